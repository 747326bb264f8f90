package verbs

import (
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// TestTimerLateACK: TestStallPokeLateACK's late ACK after a transport
// timer expiry instead of a poke (pokes off: NoProbe). Nothing is lost;
// the responder is busy while the requester sends PSNs 1-80, and the
// timer (1 ms) fires and probes 1. The responder then acknowledges 64
// sooner than srtt after the expiry: that ACK left it before the probe
// arrived, so the requester must not probe 65 in turn but resume where it
// was. The ACKs of 80 are lost, so the next expiry resends 65.
func TestTimerLateACK(t *testing.T) {
	a, b, clk, wa, wb := selectivePairRecovery(t, NoProbe, nil, func(p *wire.Packet, seen []pktRec) bool {
		return p.BTH.Opcode == wire.RCAck && p.AETH.IsACK() && p.BTH.PSN == 80 &&
			countOf(seen, func(r pktRec) bool { return r.op == wire.RCAck && r.psn == 80 && r.dropped }) < 2
	})
	seedRTT(t, a, b, clk, wa, 50*time.Microsecond)
	nb := nicOf(b.dev)
	nb.LockEngine(0)
	sizes := []int{256 << 10, 64 << 10}
	fill(a.mr.Bytes()[:320<<10], 33)
	off := 0
	for i, n := range sizes {
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, off, n),
			RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
		off += n
	}
	quiesce(t, a.dev)
	clk.Advance(1100 * time.Microsecond) // past the RTO
	quiesce(t, a.dev)
	if got := wa.resent(isData); !slices.Equal(got, []uint32{1}) {
		nb.UnlockEngine(0)
		t.Fatalf("resent PSNs %v before the responder ran, want the timer's [1]", got)
	}
	nb.UnlockEngine(0)
	quiesce(t, a.dev, b.dev)
	if ack := wb.last(func(r pktRec) bool { return isPlainACK(r) && !r.dropped }); ack.psn != 64 {
		t.Fatalf("last ACK A heard PSN %d, want 64", ack.psn)
	}
	if got := wa.resent(isData); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("resent PSNs %v after the late ACK of 64, want [1]: no probe chained on it", got)
	}
	clk.Advance(1100 * time.Microsecond)
	for i, wc := range poll(t, a.scq, 2, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[:off], a.mr.Bytes()[:off])
	if got := wa.resent(isData); !slices.Equal(got, []uint32{1, 65}) {
		t.Fatalf("resent PSNs %v, want [1 65]", got)
	}
	if ca := counters(a.dev); ca.TransportTimeouts != 2 || ca.StallPokes != 0 {
		t.Fatalf("requester counters %+v: want two timeouts, no poke", ca)
	}
}
