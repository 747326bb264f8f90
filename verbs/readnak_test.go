package verbs

import (
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// TestReadNAKPastHoleAsksOnce: three 64 KiB READs A (PSNs 0-15), B
// (16-31) and C (32-47); A's response 5 and B's request are lost. The
// requester asks for A's hole (PSN 5 alone) once responses 6-8 show it;
// the responder holds C and NAKs 16 behind A's responses. That NAK says
// nothing of the hole's request, still out: the requester resends B's
// request alone (the probe), not A's hole again, nor C, which the
// responder holds and executes once B has come. Exactly these READ
// requests, one response resent, every byte right, no timer.
func TestReadNAKPastHoleAsksOnce(t *testing.T) {
	isReadReq := func(op wire.Opcode) bool { return op == wire.RCReadRequest }
	a, b, _, wa, wb := selectivePair(t, firstOf(isReadReq, 16), firstOf(isReadResp, 5))
	const size = 64 << 10
	fill(b.mr.Bytes()[:3*size], 33)
	// One post: the three requests leave before any response can show
	// A's hole (posted one by one, a slow host asked for it between them).
	var wrs []SendWR
	for i := range 3 {
		wrs = append(wrs, SendWR{ID: uint64(i + 1), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, i*size, size),
			RemoteAddr: b.mr.Addr() + uint64(i*size), RKey: b.mr.RKey()})
	}
	postSend(t, a, wrs...)
	for i, wc := range poll(t, a.scq, 3, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	equalBytes(t, "READs", a.mr.Bytes()[:3*size], b.mr.Bytes()[:3*size])
	quiesce(t, a.dev, b.dev)
	expectReadRequests(t, wa, b.mr.Addr(), readReq{0, 0, size}, readReq{16, size, size}, readReq{32, 2 * size, size}, readReq{5, 5 * 4096, 4096}, readReq{16, size, size})
	if got := wb.resent(isReadResp); !slices.Equal(got, []uint32{5}) {
		t.Fatalf("resent responses %v, want [5]", got)
	}
	ca, cb := counters(a.dev), counters(b.dev)
	if ca.TransportTimeouts != 0 || ca.DuplicateReadResponse != 0 || ca.ReadReaskReorder != 1 || ca.ReadReaskNAK != 1 || ca.RetransmittedPkts != 2 {
		t.Fatalf("requester counters %+v: want no timer, no duplicate response, one re-ask by the reorder window and one by the NAK", ca)
	}
	if cb.RetransmittedPkts != 1 || cb.OOOHeld != 1 {
		t.Fatalf("responder counters %+v: want one response replayed, C held", cb)
	}
}

// TestReadTailProbe: a 64 KiB READ whose response 5 is lost, and so is the
// answer to the request for that hole. Nothing else is outstanding, so
// nothing but time shows it: the READ tail probe fires once the hole's
// answer is overdue, one READ round trip (50 µs on the fake clock, the
// time the first response took) after the request left and half one
// (at least 100 µs) past the last response, long before the RTO (at
// least 1 ms). It asks for PSN 5 alone again, and the READ completes.
func TestReadTailProbe(t *testing.T) {
	var clk interface{ Advance(time.Duration) }
	lost := 0
	first := true
	a, b, c, wa, wb := selectivePair(t, nil, func(p *wire.Packet, _ []pktRec) bool {
		if !isReadResp(p.BTH.Opcode) {
			return false
		}
		if first {
			// The first response leaves 50 µs after its request: the
			// requester's READ round trip.
			first = false
			clk.Advance(50 * time.Microsecond)
		}
		if p.BTH.PSN == 5 && lost < 2 {
			lost++
			return true
		}
		return false
	})
	clk = c
	const size = 64 << 10
	fill(b.mr.Bytes()[:size], 34)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, a.dev, "the hole's request", func(c Counters) bool { return c.ReadReaskReorder == 1 })
	quiesce(t, a.dev, b.dev)
	if n := pending(a.scq); n != 0 {
		t.Fatalf("%d completions with the hole's answer lost", n)
	}
	clk.Advance(200 * time.Microsecond)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	equalBytes(t, "READ", a.mr.Bytes()[:size], b.mr.Bytes()[:size])
	quiesce(t, a.dev, b.dev)
	reqs := wa.sent(wire.RCReadRequest)
	if len(reqs) != 3 || reqs[0].psn != 0 || reqs[0].reth.Len != size {
		t.Fatalf("READ requests %+v, want the READ and PSN 5 twice", reqs)
	}
	for _, r := range reqs[1:] {
		if r.psn != 5 || r.reth.VA != b.mr.Addr()+5*4096 || r.reth.Len != 4096 {
			t.Fatalf("READ requests %+v, want the READ and PSN 5 twice", reqs)
		}
	}
	if got := wb.resent(isReadResp); !slices.Equal(got, []uint32{5, 5}) {
		t.Fatalf("resent responses %v, want [5 5]", got)
	}
	if ca := counters(a.dev); ca.TransportTimeouts != 1 || ca.ReadTailProbes != 1 || ca.ReadReaskTimer != 1 || ca.DuplicateReadResponse != 0 {
		t.Fatalf("counters %+v: want one expiry, the tail probe", ca)
	}
}

// TestReadResumeAsksNoAnswerArriving: at PMTU 256, three READs A (8 KiB,
// PSNs 0-31), B (8 KiB, 32-63) and C (64 KiB, 64-319); A's response 5 and
// B's request are lost. The responder holds C and NAKs 32; the requester
// resends B's request alone (the probe), which moves its resume point
// (ReqPSN) to 64 and no further: the walk passes over C, sent and
// unanswered. C's answer, 256 responses, arrives over several receive
// batches; its first ones take the requester's completed PSN past 64.
// That is no loss: the requester resumes behind C instead of asking again
// for the rest of C's answer, which the responder replayed in full behind
// the original. Exactly the READ requests below, one response resent,
// every byte right.
func TestReadResumeAsksNoAnswerArriving(t *testing.T) {
	a, b, qa, _, la, lb, clk := slicedPair(t)
	isReadReq := func(op wire.Opcode) bool { return op == wire.RCReadRequest }
	wa, wb := logWire(la, firstOf(isReadReq, 32)), logWire(lb, firstOf(isReadResp, 5))
	sizes := []int{8 << 10, 8 << 10, 64 << 10}
	const total = 80 << 10
	fill(b.mr.Bytes()[:total], 36)
	holdEngines(t, a.dev, b.dev)
	var wrs []SendWR
	off := 0
	for i, n := range sizes {
		wrs = append(wrs, SendWR{ID: uint64(i + 1), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, off, n),
			RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
		off += n
	}
	postSend(t, qa[0], wrs...)
	var wc []WorkCompletion
	buf := make([]WorkCompletion, 4)
	for step := 0; step < 200 && len(wc) < 3; step++ {
		stepBoth(a.dev, b.dev, clk)
		wc = append(wc, buf[:qa[0].scq.Poll(buf)]...)
	}
	if len(wc) != 3 {
		t.Fatalf("%d completions %+v, want 3", len(wc), wc)
	}
	for i, c := range wc {
		if c.Status != WCSuccess || c.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	for range 4 {
		stepBoth(a.dev, b.dev, clk)
	}
	equalBytes(t, "READs", a.mr.Bytes()[:total], b.mr.Bytes()[:total])
	expectReadRequests(t, wa, b.mr.Addr(), readReq{0, 0, 8 << 10}, readReq{32, 8 << 10, 8 << 10}, readReq{64, 16 << 10, 64 << 10}, readReq{5, 5 * 256, 256}, readReq{32, 8 << 10, 8 << 10})
	if got := wb.resent(isReadResp); !slices.Equal(got, []uint32{5}) {
		t.Fatalf("resent responses %v, want [5]", got)
	}
	if ca := nicOf(a.dev).EngineCounters(0); ca.DuplicateReadResponse != 0 || ca.ReadReaskNAK != 1 || ca.TransportTimeouts != 0 {
		t.Fatalf("requester counters %+v: want no duplicate response, one re-ask by the NAK, no timer", ca)
	}
}
