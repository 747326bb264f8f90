// Package e2e runs RoCEv2 end to end between network namespaces: frames built
// by the codec leave one host through its AF_XDP TX ring and arrive at the
// other through XDP steering and its AF_XDP RX ring.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/wire"
)

// pair is two hosts, each with an opened nic.Port on its link and a
// FrameLink on the port.
type pair struct {
	topo   *netns.Topology
	a, b   *netns.Host
	pa, pb *nic.Port
	la, lb *nic.FrameLink
}

func openPair(t *testing.T, mtu int) *pair {
	t.Helper()
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: mtu, Queues: 1})
	p := &pair{topo: topo, a: topo.Hosts[0], b: topo.Hosts[1]}
	open := func(h *netns.Host) (*nic.Port, *nic.FrameLink) {
		var port *nic.Port
		var link *nic.FrameLink
		err := h.Do(func() error {
			var err error
			if port, err = nic.Open(t.Context(), nic.Config{Ifname: h.Link}); err != nil {
				return err
			}
			if link, err = nic.NewFrameLink(port); err != nil {
				return errors.Join(err, port.Close())
			}
			return nil
		})
		if err != nil {
			t.Fatalf("open %s: %v", h.Name, err)
		}
		t.Cleanup(func() {
			if err := errors.Join(link.Close(), port.Close()); err != nil {
				t.Errorf("close %s: %v", h.Name, err)
			}
		})
		return port, link
	}
	p.pa, p.la = open(p.a)
	p.pb, p.lb = open(p.b)
	return p
}

// sendOnly builds an RC SEND_ONLY frame from a to b carrying payload.
func (p *pair) sendOnly(t *testing.T, psn uint32, payload []byte) []byte {
	t.Helper()
	var pkt wire.Packet
	pkt.Reset()
	copy(pkt.Eth.Src[:], p.a.MAC)
	copy(pkt.Eth.Dst[:], p.b.MAC)
	pkt.IP.Src, pkt.IP.Dst = p.a.Addr, p.b.Addr
	pkt.UDP.SrcPort = wire.UDPSourcePort(0, 0x11, 0x12)
	pkt.BTH = wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x12, AckReq: true, PSN: psn}
	pkt.Payload = payload
	frame := make([]byte, pkt.FrameLen())
	n, err := wire.Encode(frame, &pkt)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return frame[:n]
}

// receiveDecoded collects n RoCEv2 frames at b, decoded (ICRC verified), or fails at the deadline.
func (p *pair) receiveDecoded(t *testing.T, ctx context.Context, n int) [][]byte {
	t.Helper()
	var got [][]byte
	var bad []error
	err := p.lb.Collect(ctx, func(frame []byte) bool {
		var pkt wire.Packet
		if err := wire.Decode(frame, &pkt); err != nil {
			bad = append(bad, err)
		} else {
			got = append(got, bytes.Clone(frame))
		}
		return len(got)+len(bad) < n
	})
	if err != nil {
		t.Fatalf("receive at %s: got %d of %d frames: %v", p.b.Name, len(got), n, err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d frames failed to decode at the receiver, first: %v", len(bad), bad[0])
	}
	return got
}

// TestSendOnlyThroughAFXDP sends RoCEv2 SEND_ONLY packets from A's AF_XDP TX
// ring to B's AF_XDP RX ring, while ping and a TCP stream keep working over
// the same links, at MTU 1500 (one UMEM chunk per frame) and 4200 (PMTU 4096
// frames span two chunks: XDP multi-buffer and XDP_USE_SG chains).
func TestSendOnlyThroughAFXDP(t *testing.T) {
	for _, tc := range []struct{ mtu, payload int }{{1500, 1024}, {4200, 4096}} {
		t.Run(fmt.Sprintf("mtu%d", tc.mtu), func(t *testing.T) {
			p := openPair(t, tc.mtu)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()

			var side sync.WaitGroup
			sideErr := make(chan error, 2)
			side.Add(2)
			go func() { defer side.Done(); sideErr <- p.a.Ping(ctx, p.b.Addr, 56) }()
			go func() { defer side.Done(); sideErr <- tcpExchange(ctx, p.a, p.b, 1<<20) }()

			const count = 500
			sizes := []int{0, 1, 2, 3, 5, 64, tc.payload - 1, tc.payload}
			frames := make([][]byte, count)
			payloads := make([][]byte, count)
			for i := range frames {
				payloads[i] = pattern(i, sizes[i%len(sizes)])
				frames[i] = p.sendOnly(t, uint32(0xfffff0+i)&0xffffff, payloads[i])
			}
			sendErr := make(chan error, 1)
			go func() {
				// A's socket is used only by this goroutine.
				sendErr <- p.la.Transmit(ctx, frames)
			}()
			got := p.receiveDecoded(t, ctx, count)
			if err := <-sendErr; err != nil {
				t.Fatalf("transmit: %v", err)
			}
			for i, f := range got {
				var pkt wire.Packet
				if err := wire.Decode(f, &pkt); err != nil {
					t.Fatal(err)
				}
				want := uint32(0xfffff0+i) & 0xffffff
				if pkt.BTH.PSN != want || pkt.BTH.Opcode != wire.RCSendOnly || pkt.IP.Src != p.a.Addr {
					t.Fatalf("frame %d: opcode %v PSN %#x from %v, want SEND_ONLY PSN %#x from %v",
						i, pkt.BTH.Opcode, pkt.BTH.PSN, pkt.IP.Src, want, p.a.Addr)
				}
				if !bytes.Equal(pkt.Payload, payloads[i]) {
					t.Fatalf("frame %d: payload of %d bytes differs from the %d sent", i, len(pkt.Payload), len(payloads[i]))
				}
			}
			side.Wait()
			close(sideErr)
			for err := range sideErr {
				if err != nil {
					t.Errorf("ordinary traffic beside RoCE: %v", err)
				}
			}
			c, err := p.pb.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if c.Redirected < count || c.Passed == 0 || c.Malformed != 0 {
				t.Errorf("B's XDP counters %+v: want >= %d redirected, some passed, none malformed", c, count)
			}
		})
	}
}

// TestReplayGoldenCaptures replays every RoCEv2 frame of the rxe golden
// captures from A to B, readdressed to the pair (IPv6 ones as IPv4) with the
// ICRC recomputed, and checks each arrives with its transport headers and
// payload unchanged.
func TestReplayGoldenCaptures(t *testing.T) {
	p := openPair(t, 4200)
	files, err := filepath.Glob("../../wire/testdata/pcaps/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden captures found: %v", err)
	}
	var frames [][]byte
	var originals []wire.Packet
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, recs, err := pcap.ReadAll(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, r := range recs {
			var pkt wire.Packet
			if wire.Decode(r.Data, &pkt) != nil {
				continue // not RoCEv2, or the deliberately corrupted frame
			}
			originals = append(originals, pkt)
			frames = append(frames, p.readdress(t, pkt))
		}
	}
	if len(frames) < 400 {
		t.Fatalf("only %d RoCEv2 frames in the golden captures", len(frames))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() { sendErr <- p.la.Transmit(ctx, frames) }()
	got := p.receiveDecoded(t, ctx, len(frames))
	if err := <-sendErr; err != nil {
		t.Fatalf("transmit: %v", err)
	}
	for i, f := range got {
		var pkt wire.Packet
		if err := wire.Decode(f, &pkt); err != nil {
			t.Fatal(err)
		}
		o := originals[i]
		if pkt.BTH != o.BTH || pkt.RETH != o.RETH || pkt.AETH != o.AETH || pkt.AtomicETH != o.AtomicETH ||
			pkt.AtomicAck != o.AtomicAck || pkt.ImmDt != o.ImmDt || pkt.IETH != o.IETH || pkt.DETH != o.DETH ||
			!bytes.Equal(pkt.Payload, o.Payload) {
			t.Fatalf("replayed frame %d (%v PSN %#x) arrived changed", i, o.BTH.Opcode, o.BTH.PSN)
		}
	}
	t.Logf("replayed %d golden RoCEv2 frames from %d captures", len(got), len(files))
}

// readdress rewrites a captured packet to travel from a to b over IPv4.
func (p *pair) readdress(t *testing.T, pkt wire.Packet) []byte {
	t.Helper()
	copy(pkt.Eth.Src[:], p.a.MAC)
	copy(pkt.Eth.Dst[:], p.b.MAC)
	pkt.Eth.HasVLAN = false
	pkt.IP = wire.IP{Src: p.a.Addr, Dst: p.b.Addr, TOS: pkt.IP.TOS, TTL: 64, DF: true}
	pkt.UDP.Checksum = 0
	frame := make([]byte, pkt.FrameLen())
	n, err := wire.Encode(frame, &pkt)
	if err != nil {
		t.Fatalf("re-encode %v: %v", pkt.BTH.Opcode, err)
	}
	return frame[:n]
}

func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7)
	}
	return b
}

// tcpExchange streams n bytes over TCP from a to b and checks they arrive intact.
func tcpExchange(ctx context.Context, a, b *netns.Host, n int) error {
	conn, srv, err := netns.TCPPair(ctx, a, b, b.Addr)
	if err != nil {
		return err
	}
	defer srv.Close()
	want := pattern(7, n)
	go func() {
		defer conn.Close()
		_, _ = conn.Write(want)
	}()
	if d, ok := ctx.Deadline(); ok {
		_ = srv.SetDeadline(d)
	}
	got, err := io.ReadAll(srv)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("TCP stream of %d bytes arrived as %d different bytes", n, len(got))
	}
	return nil
}
