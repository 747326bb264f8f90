package ring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	xnetns "github.com/xdproce/xdproce/internal/netns"
)

// Self-contained network-namespace fixtures: a named namespace holding a
// veth pair a<->b, an XDP program on each end redirecting every frame to
// the AF_XDP socket of its RX queue, and helpers to move frames.

var nameSeq atomic.Int64

type vethNet struct {
	tb     testing.TB
	name   string
	ns     netns.NsHandle
	a, b   int // ifindexes
	aMAC   [6]byte
	bMAC   [6]byte
	queues int
	xsks   map[int]*ebpf.Map // ifindex -> XSKMAP of its program
}

// onThread runs fn on a locked OS thread in namespace ns. If the thread
// cannot be switched back it is left locked, so Go discards it.
func onThread(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err)
			return // thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// newVethNet creates namespace ring-<pid>-<n> with veth a<->b, both with
// the given RX/TX queue count and MTU, up, IPv6 off (no stray router
// solicitations), and an XDP redirect program on each end.
func newVethNet(tb testing.TB, queues, mtu int) *vethNet {
	tb.Helper()
	xnetns.RequireRoot(tb)
	name := fmt.Sprintf("ring-%d-%d", os.Getpid(), nameSeq.Add(1))
	n := &vethNet{tb: tb, name: name, queues: queues, xsks: map[int]*ebpf.Map{}}
	errc := make(chan error, 1)
	go func() {
		// NewNamed moves this thread into the new namespace: never unlock it.
		runtime.LockOSThread()
		h, err := netns.NewNamed(name)
		n.ns = h
		errc <- err
	}()
	if err := <-errc; err != nil {
		tb.Fatalf("create netns %s: %v", name, err)
	}
	tb.Cleanup(func() {
		n.ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			tb.Errorf("delete netns %s: %v", name, err)
		}
	})
	err := n.do(func() error {
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0)
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: "a", MTU: mtu, NumRxQueues: queues, NumTxQueues: queues},
			PeerName:  "b",
			PeerMTU:   uint32(mtu),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		for _, p := range []struct {
			name  string
			index *int
			mac   *[6]byte
		}{{"a", &n.a, &n.aMAC}, {"b", &n.b, &n.bMAC}} {
			l, err := netlink.LinkByName(p.name)
			if err != nil {
				return err
			}
			*p.index = l.Attrs().Index
			copy(p.mac[:], l.Attrs().HardwareAddr)
			_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+p.name+"/disable_ipv6", []byte("1"), 0)
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("set up veth in %s: %v", name, err)
	}
	n.attachRedirect(n.a)
	n.attachRedirect(n.b)
	return n
}

func (n *vethNet) do(fn func() error) error { return onThread(n.ns, fn) }

// attachRedirect loads and attaches (native mode) the equivalent of
//
//	SEC("xdp.frags") int prog(struct xdp_md *ctx)
//	{ return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS); }
func (n *vethNet) attachRedirect(ifindex int) {
	tb := n.tb
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(n.queues)})
	if err != nil {
		tb.Fatalf("create XSKMAP: %v", err)
	}
	tb.Cleanup(func() { xsks.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:  ebpf.XDP,
		Flags: unix.BPF_F_XDP_HAS_FRAGS,
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 16, asm.Word), // ctx->rx_queue_index
			asm.LoadMapPtr(asm.R1, xsks.FD()),
			asm.Mov.Imm(asm.R3, 2), // XDP_PASS when the slot is empty
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
		License: "Dual MIT/GPL",
	})
	if err != nil {
		tb.Fatalf("load XDP program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	var l link.Link
	err = n.do(func() error {
		var err error
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		tb.Fatalf("attach XDP to ifindex %d: %v", ifindex, err)
	}
	tb.Cleanup(func() { l.Close() })
	n.xsks[ifindex] = xsks
}

// open opens a socket on ifindex/queue inside the namespace, registers it
// in the XSKMAP and closes it at cleanup.
func (n *vethNet) open(ifindex, queue int, cfg Config) *Socket {
	n.tb.Helper()
	s, err := n.tryOpen(ifindex, queue, cfg)
	if err != nil {
		n.tb.Fatalf("open ifindex %d queue %d: %v", ifindex, queue, err)
	}
	n.tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			n.tb.Errorf("close: %v", err)
		}
	})
	return s
}

func (n *vethNet) tryOpen(ifindex, queue int, cfg Config) (*Socket, error) {
	var s *Socket
	err := n.do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		s, err = Open(ctx, ifindex, queue, cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := n.xsks[ifindex].Put(uint32(queue), uint32(s.FD())); err != nil {
		return nil, errors.Join(fmt.Errorf("register socket: %w", err), s.Close())
	}
	return s, nil
}

// Test frames: Ethernet header, ethertype 0x88b5 (local experimental),
// then a tag byte, a sequence number and a pattern derived from both.
const testEtherType = 0x88b5

func writeTestFrame(b []byte, dst, src [6]byte, tag byte, seq uint32) {
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:14], testEtherType)
	b[14] = tag
	binary.BigEndian.PutUint32(b[15:19], seq)
	for i := 19; i < len(b); i++ {
		b[i] = byte(uint32(i)*31 + seq)
	}
}

// parseTestFrame returns the tag and sequence number of a test frame after
// checking its pattern; ok=false for other traffic.
func parseTestFrame(b []byte) (tag byte, seq uint32, ok bool, err error) {
	if len(b) < 19 || binary.BigEndian.Uint16(b[12:14]) != testEtherType {
		return 0, 0, false, nil
	}
	tag, seq = b[14], binary.BigEndian.Uint32(b[15:19])
	for i := 19; i < len(b); i++ {
		if b[i] != byte(uint32(i)*31+seq) {
			return tag, seq, true, fmt.Errorf("frame %d byte %d: %#x, want %#x", seq, i, b[i], byte(uint32(i)*31+seq))
		}
	}
	return tag, seq, true, nil
}

// sendFrames transmits frames of the given lengths (sequence numbers from
// first) from s, kicking until the kernel took them all. It reclaims
// completed buffers as it goes; the deadline bounds it.
func sendFrames(tb testing.TB, s *Socket, dst, src [6]byte, tag byte, first uint32, lens []int, deadline time.Time) {
	tb.Helper()
	tx := make([]TXFrame, 64)
	seq := first
	for len(lens) > 0 {
		s.Complete()
		n := s.AllocTX(tx[:min(len(tx), len(lens))])
		for i := range tx[:n] {
			tx[i].Len = lens[i]
			writeTestFrame(tx[i].Buf()[:lens[i]], dst, src, tag, seq)
			seq++
		}
		if m, err := s.Submit(tx[:n]); err != nil || m != n {
			tb.Fatalf("submit %d frames: %d, %v", n, m, err)
		}
		lens = lens[n:]
		if err := flushTX(s, deadline); err != nil {
			tb.Fatal(err)
		}
	}
}

// flushTX kicks until the TX ring is empty.
func flushTX(s *Socket, deadline time.Time) error {
	for s.TXPending() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("TX ring still holds %d descriptors at the deadline", s.TXPending())
		}
		if err := s.Kick(); err != nil {
			return err
		}
		s.Complete()
	}
	return nil
}

// drainTX waits until every submitted buffer has completed.
func drainTX(s *Socket, deadline time.Time) error {
	for s.FrameStats().TXKernel > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d TX buffers not completed at the deadline", s.FrameStats().TXKernel)
		}
		if err := s.Kick(); err != nil {
			return err
		}
		s.Complete()
		runtime.Gosched()
	}
	return nil
}

// received is one test frame as received.
type received struct {
	tag      byte
	seq      uint32
	length   int
	segments int
	lens     [MaxSegments]uint32
}

// receiveFrames collects want test frames on s (other traffic is released
// and skipped), checking every byte, or fails at the deadline.
func receiveFrames(tb testing.TB, s *Socket, want int, deadline time.Time) []received {
	tb.Helper()
	var out []received
	pkts := make([]Packet, 64)
	scratch := make([]byte, 1<<16)
	for len(out) < want {
		if time.Now().After(deadline) {
			st, _ := s.Statistics()
			tb.Fatalf("received %d of %d frames by the deadline; kernel stats %+v, counters %+v", len(out), want, st, s.Counters())
		}
		n := s.Receive(pkts)
		for i := range pkts[:n] {
			p := &pkts[i]
			b, err := p.Bytes(scratch)
			if err != nil {
				tb.Fatal(err)
			}
			tag, seq, ok, err := parseTestFrame(b)
			if err != nil {
				tb.Fatal(err)
			}
			if !ok {
				continue
			}
			r := received{tag: tag, seq: seq, length: p.Len(), segments: p.Segments()}
			for j := range p.Segments() {
				r.lens[j] = p.Desc(j).Len
			}
			out = append(out, r)
		}
		if err := s.Release(pkts[:n]); err != nil {
			tb.Fatal(err)
		}
		if _, err := s.Refill(); err != nil {
			tb.Fatal(err)
		}
		if n == 0 {
			if _, err := s.Wait(10 * time.Millisecond); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return out
}
