package verbs

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// The golden tests rebuild traffic of rxe captures (recorded against Linux
// rxe, see /work/shared/rxe-peer) with this engine and compare frames byte by
// byte. Only the IPv4 ID differs by design (rxe hashes one, xdproce sends 0):
// the comparison copies rxe's ID and header checksum into our frame and then
// requires the same bytes, ICRC included.

type capFrame struct {
	raw []byte
	p   wire.Packet
}

// loadCapture returns the RoCEv2 frames of a capture split by direction: the
// requester's (the sender of the first RoCE frame) and the responder's.
func loadCapture(t *testing.T, name string) (req, resp []capFrame) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "pcaps", name+".pcap"))
	if err != nil {
		t.Skipf("capture %s: %v", name, err)
	}
	_, recs, err := pcap.ReadAll(data)
	if err != nil {
		t.Fatalf("capture %s: %v", name, err)
	}
	var requester netip.Addr
	for _, r := range recs {
		var f capFrame
		if wire.Decode(r.Data, &f.p) != nil {
			continue // the perftest TCP setup around the RoCE traffic
		}
		f.raw = r.Data
		if !requester.IsValid() {
			requester = f.p.IP.Src
		}
		if f.p.IP.Src == requester {
			req = append(req, f)
		} else {
			resp = append(resp, f)
		}
	}
	if len(req) == 0 || len(resp) == 0 {
		t.Fatalf("capture %s: no RoCE exchange", name)
	}
	return req, resp
}

// stoppedClock never advances: no retransmission timer fires during a golden
// exchange, so the frames are exactly those the operations produce.
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }

// goldenNode is a device with the MAC, IP and QPN of one side of a capture,
// its QP taken to RTS towards the other side.
func goldenNode(t *testing.T, link Link, self, peer capFrame, qpn uint32, sqPSN, rqPSN uint32, bufSize int) *node {
	t.Helper()
	d, err := NewDevice(link, DeviceConfig{
		MAC: net.HardwareAddr(self.p.Eth.Src[:]), GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), self.p.IP.Src},
		ActiveMTU: 4096, Clock: stoppedClock{time.Unix(1e9, 0)},
	})
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	must(t, d.do(func() error { nicOf(d).PinNextQPN(qpn); return nil }))
	n := newNode(t, d, bufSize)
	if n.qp.QPN() != qpn {
		t.Fatalf("QPN %#x, want %#x", n.qp.QPN(), qpn)
	}
	access := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	must(t, n.qp.Connect(Peer{Access: access, AH: AH{DGID: peer.p.IP.Src, SGIDIndex: 1, HopLimit: 64, DMAC: net.HardwareAddr(peer.p.Eth.Src[:])},
		PathMTU: MTU4096, DestQPN: peer.p.BTH.DestQP, RQPSN: rqPSN, SQPSN: sqPSN, MaxDestRdAtomic: 16, MinRNRTimer: 12,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}))
	return n
}

// collect reads n frames from the scripted peer's end of the link.
func collect(t *testing.T, l *memlink.Link, n int) [][]byte {
	t.Helper()
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n {
		if _, err := l.Receive(n-len(got), func(f []byte) { got = append(got, append([]byte(nil), f...)) }); err != nil {
			t.Fatal(err)
		}
		if len(got) < n {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d frames", len(got), n)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return got
}

// sameFrame compares our frame with rxe's after taking rxe's IPv4 ID.
func sameFrame(t *testing.T, i int, ours []byte, theirs capFrame) {
	t.Helper()
	var p wire.Packet
	if err := wire.Decode(ours, &p); err != nil {
		t.Fatalf("frame %d: ours does not decode: %v", i, err)
	}
	if p.IP.V6 || p.Eth.HasVLAN {
		t.Fatalf("frame %d: expected untagged IPv4", i)
	}
	if p.IP.ID != 0 {
		t.Fatalf("frame %d: IP ID %d, xdproce sends 0", i, p.IP.ID)
	}
	patched := append([]byte(nil), ours...)
	copy(patched[18:20], theirs.raw[18:20]) // IPv4 ID
	copy(patched[24:26], theirs.raw[24:26]) // IPv4 header checksum, which covers the ID
	icrc, err := wire.ICRC(patched)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(patched[len(patched)-4:], icrc)
	if !bytes.Equal(patched, theirs.raw) {
		t.Fatalf("frame %d (%v PSN %#x) differs from rxe's (%v PSN %#x):\nours %x\nrxe  %x", i, p.BTH.Opcode, p.BTH.PSN,
			theirs.p.BTH.Opcode, theirs.p.BTH.PSN, patched, theirs.raw)
	}
}

// messages joins the payloads of each message in frames (FIRST..LAST, ONLY).
func messages(frames []capFrame) [][]byte {
	var out [][]byte
	var cur []byte
	for _, f := range frames {
		info, _ := f.p.BTH.Opcode.Info()
		if info.Flags&wire.FlagStart != 0 {
			cur = nil
		}
		cur = append(cur, f.p.Payload...)
		if info.Flags&wire.FlagEnd != 0 {
			out = append(out, cur)
		}
	}
	return out
}

// TestGoldenRequesterWriteMulti posts the five 16 KiB WRITEs of
// rc_write_multi at PMTU 4096 and requires rxe's exact requester frames
// (FIRST/MIDDLE/LAST, PSNs, AckReq on LAST, RETH, ICRC); rxe's ACKs then
// complete them.
func TestGoldenRequesterWriteMulti(t *testing.T) {
	req, resp := loadCapture(t, "rc_write_multi")
	la, peer := memlink.NewPair(9000)
	msgs := messages(req)
	const size = 16384
	a := goldenNode(t, la, req[0], resp[0], resp[0].p.BTH.DestQP, req[0].p.BTH.PSN, resp[0].p.BTH.PSN, len(msgs)*size)
	var wrs []SendWR
	for i, m := range msgs {
		if len(m) != size {
			t.Fatalf("message %d: %d bytes", i, len(m))
		}
		copy(a.mr.Bytes()[i*size:], m)
		wrs = append(wrs, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, i*size, size),
			RemoteAddr: req[0].p.RETH.VA, RKey: req[0].p.RETH.RKey})
	}
	postSend(t, a, wrs...)
	for i, f := range collect(t, peer, len(req)) {
		sameFrame(t, i, f, req[i])
	}
	replay(t, peer, resp)
	for i, wc := range poll(t, a.scq, len(msgs), 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.Opcode != WCRDMAWrite {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
}

// TestGoldenSendMulti checks both sides of rc_send_multi (10001-byte SENDs:
// FIRST/MIDDLE/LAST with pad 3): our requester's frames, and our responder's
// ACKs (one per AckReq, MSN counting messages, credits 31) to rxe's SENDs.
func TestGoldenSendMulti(t *testing.T) {
	req, resp := loadCapture(t, "rc_send_multi")
	msgs := messages(req)
	t.Run("requester", func(t *testing.T) {
		la, peer := memlink.NewPair(9000)
		a := goldenNode(t, la, req[0], resp[0], resp[0].p.BTH.DestQP, req[0].p.BTH.PSN, resp[0].p.BTH.PSN, 1<<17)
		var wrs []SendWR
		off := 0
		for i, m := range msgs {
			copy(a.mr.Bytes()[off:], m)
			wrs = append(wrs, SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, off, len(m))})
			off += len(m)
		}
		postSend(t, a, wrs...)
		for i, f := range collect(t, peer, len(req)) {
			sameFrame(t, i, f, req[i])
		}
		replay(t, peer, resp)
		for i, wc := range poll(t, a.scq, len(msgs), 5*time.Second) {
			if wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.Opcode != WCSend {
				t.Fatalf("completion %d: %+v", i, wc)
			}
		}
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := goldenNode(t, lb, resp[0], req[0], req[0].p.BTH.DestQP, resp[0].p.BTH.PSN, req[0].p.BTH.PSN, 1<<17)
		for i := range msgs {
			postRecv(t, b, RecvWR{ID: uint64(i), SGList: sge(b.mr, i*16384, 16384)})
		}
		replay(t, peer, req)
		for i, f := range collect(t, peer, len(resp)) {
			sameFrame(t, i, f, resp[i])
		}
		for i, wc := range poll(t, b.rcq, len(msgs), 5*time.Second) {
			if wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(len(msgs[i])) || wc.Flags&WCWithGRH == 0 {
				t.Fatalf("receive %d: %+v", i, wc)
			}
			equalBytes(t, "received message", b.mr.Bytes()[i*16384:i*16384+len(msgs[i])], msgs[i])
		}
	})
}

// TestGoldenRequesterReadMulti posts rc_read_multi's five 12 KiB READs: the
// requests must match rxe's (PSNs advancing by the 3 response packets each),
// and rxe's responses must land in our memory.
func TestGoldenRequesterReadMulti(t *testing.T) {
	req, resp := loadCapture(t, "rc_read_multi")
	la, peer := memlink.NewPair(9000)
	data := messages(resp)
	const size = 12288
	a := goldenNode(t, la, req[0], resp[0], resp[0].p.BTH.DestQP, req[0].p.BTH.PSN, resp[0].p.BTH.PSN, len(req)*size)
	var wrs []SendWR
	for i := range req {
		wrs = append(wrs, SendWR{ID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, i*size, size),
			RemoteAddr: req[i].p.RETH.VA, RKey: req[i].p.RETH.RKey})
	}
	postSend(t, a, wrs...)
	for i, f := range collect(t, peer, len(req)) {
		sameFrame(t, i, f, req[i])
	}
	replay(t, peer, resp)
	for i, wc := range poll(t, a.scq, len(req), 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.Opcode != WCRDMARead || wc.ByteLen != size {
			t.Fatalf("completion %d: %+v", i, wc)
		}
		equalBytes(t, "read data", a.mr.Bytes()[i*size:(i+1)*size], data[i])
	}
}

// replay sends captured frames to the engine from the scripted peer.
func replay(t *testing.T, l *memlink.Link, frames []capFrame) {
	t.Helper()
	// One frame per receive batch, as rxe meets them: the engine would
	// otherwise coalesce the ACKs of a burst.
	for i := range frames {
		if err := l.Send([][]byte{frames[i].raw}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for l.Peer().Queued() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("frame %d of %d not taken by the engine", i, len(frames))
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}
