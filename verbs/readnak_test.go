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
	for i := range 3 {
		postSend(t, a, SendWR{ID: uint64(i + 1), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, i*size, size),
			RemoteAddr: b.mr.Addr() + uint64(i*size), RKey: b.mr.RKey()})
	}
	for i, wc := range poll(t, a.scq, 3, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	equalBytes(t, "READs", a.mr.Bytes()[:3*size], b.mr.Bytes()[:3*size])
	quiesce(t, a.dev, b.dev)
	var reqs []pktRec
	wa.mu.Lock()
	for _, r := range wa.pkts {
		if r.op == wire.RCReadRequest {
			reqs = append(reqs, r)
		}
	}
	wa.mu.Unlock()
	want := []struct {
		psn uint32
		off uint64
		n   uint32
	}{{0, 0, size}, {16, size, size}, {32, 2 * size, size}, {5, 5 * 4096, 4096}, {16, size, size}}
	if len(reqs) != len(want) {
		t.Fatalf("%d READ requests %+v, want %d", len(reqs), reqs, len(want))
	}
	for i, w := range want {
		if r := reqs[i]; r.psn != w.psn || r.reth.VA != b.mr.Addr()+w.off || r.reth.Len != w.n {
			t.Fatalf("request %d: PSN %d VA +%d len %d, want PSN %d VA +%d len %d", i, r.psn, r.reth.VA-b.mr.Addr(), r.reth.Len, w.psn, w.off, w.n)
		}
	}
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
