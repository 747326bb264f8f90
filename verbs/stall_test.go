package verbs

import (
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// The stalled requester's poke (engine's timer.go): a requester that can
// send no more and hears nothing for a probe timeout (2·srtt) resends its
// oldest unacknowledged packet, asking for an ACK, instead of waiting for
// the transport timer (at least 1 ms with retry_cnt 7).

// seedRTT gives A's QP a round-trip estimate of rtt on the fake clock: one
// 4 KiB WRITE (PSN 0) whose ACK B sends only after the clock moved by rtt.
// With one sample srtt is rtt and rttvar rtt/2, so the probe timeout is
// srtt + 4·rttvar = 3·rtt.
func seedRTT(t *testing.T, a, b *node, clk interface{ Advance(time.Duration) }, wa *pktLog, rtt time.Duration) {
	t.Helper()
	nb := nicOf(b.dev)
	nb.LockEngine(0)
	postSend(t, a, SendWR{ID: 100, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	deadline := time.Now().Add(5 * time.Second)
	for wa.count(func(r pktRec) bool { return isData(r.op) }) == 0 {
		if time.Now().After(deadline) {
			nb.UnlockEngine(0)
			t.Fatal("the seeding WRITE was not sent")
		}
		time.Sleep(100 * time.Microsecond)
	}
	clk.Advance(rtt)
	nb.UnlockEngine(0)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 100 {
		t.Fatalf("seeding completion %+v", wc)
	}
}

// stallWrites posts two 64 KiB WRITEs (PSNs 1-32) after seedRTT, waits
// until both ends are quiet (the requester has sent everything it has) and
// returns how many of them completed; done, if not negative, is how many
// must have.
func stallWrites(t *testing.T, a, b *node, done int) int {
	t.Helper()
	const size = 64 << 10
	fill(a.mr.Bytes()[:2*size], 33)
	for i := range 2 {
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, i*size, size),
			RemoteAddr: b.mr.Addr() + uint64(i*size), RKey: b.mr.RKey()})
	}
	quiesce(t, a.dev, b.dev)
	n := pending(a.scq)
	if done >= 0 && n != done {
		t.Fatalf("%d completions before any timer, want %d", n, done)
	}
	for i, wc := range poll(t, a.scq, n, time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	return n
}

// pokeAnswered has A's poke fire (the clock moved past the probe timeout)
// while B is busy, and B answer the probe a round trip (rtt) later, as on
// a wire: an ACK sooner than srtt after the poke left B before the probe
// arrived (TestStallPokeLateACK).
func pokeAnswered(t *testing.T, a, b *node, clk interface{ Advance(time.Duration) }, rtt time.Duration) {
	t.Helper()
	nb := nicOf(b.dev)
	nb.LockEngine(0)
	clk.Advance(500 * time.Microsecond)
	quiesce(t, a.dev)
	clk.Advance(rtt)
	nb.UnlockEngine(0)
}

// finishWrites checks that the WRITEs from the done-th on completed, and
// that both placed every byte.
func finishWrites(t *testing.T, a, b *node, done int) {
	t.Helper()
	const size = 64 << 10
	for i, wc := range poll(t, a.scq, 2-done, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(done+i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[:2*size], a.mr.Bytes()[:2*size])
	quiesce(t, a.dev, b.dev)
}

// TestStallPokeLostNAK: PSN 20 is lost and so is the responder's one NAK
// for it; the responder acknowledged the first WRITE (16) and holds 21-32.
// The requester has nothing more to send and its transport timer, re-armed
// by that ACK with 16 PSNs outstanding, waits 1 ms. A probe timeout (150 µs:
// srtt 50 µs) later it probes with 17, its oldest unacknowledged PSN; the
// responder answers the duplicate with an ACK of 19, so 20 is probed in
// turn; the responder fills the hole, executes what it held and
// acknowledges 32. Two packets resent, no transport timeout.
func TestStallPokeLostNAK(t *testing.T) {
	a, b, clk, wa, wb := selectivePair(t, firstOf(isData, 20), func(p *wire.Packet, seen []pktRec) bool {
		return p.BTH.Opcode == wire.RCAck && p.AETH.IsNAK() && !slices.ContainsFunc(seen, isSeqNAK)
	})
	seedRTT(t, a, b, clk, wa, 50*time.Microsecond)
	stallWrites(t, a, b, 1)
	if n := wb.count(isSeqNAK); n != 1 {
		t.Fatalf("%d sequence NAKs, want the one lost", n)
	}
	if ack := wb.last(isPlainACK); ack.psn != 16 {
		t.Fatalf("last ACK before the poke PSN %d, want 16", ack.psn)
	}
	pokeAnswered(t, a, b, clk, 50*time.Microsecond)
	finishWrites(t, a, b, 1)
	if got := wa.resent(isData); !slices.Equal(got, []uint32{17, 20}) {
		t.Fatalf("resent PSNs %v, want [17 20]", got)
	}
	if ack := wb.last(isPlainACK); ack.psn != 32 || ack.aeth.MSN != 3 {
		t.Fatalf("last ACK PSN %d MSN %d, want 32 and 3", ack.psn, ack.aeth.MSN)
	}
	ca, cb := counters(a.dev), counters(b.dev)
	if ca.TransportTimeouts != 0 || ca.StallPokes != 1 || ca.RetransmittedPkts != 2 {
		t.Fatalf("requester counters %+v: want one poke, no timeout", ca)
	}
	if cb.OOOHeld != 12 || cb.DuplicateRequest != 1 {
		t.Fatalf("responder counters %+v: want 21-32 held, 17 a duplicate", cb)
	}
}

// TestStallPokeLostACK: every packet arrives, but the ACK of the last one
// (PSN 32) is lost; the transport timer waits 1 ms. A probe timeout later
// the requester probes with its oldest unacknowledged packet (1, or 17 if
// the first WRITE's ACK came on its own); the responder answers the
// duplicate with an ACK of 32, and both WRITEs complete without a
// transport timeout.
func TestStallPokeLostACK(t *testing.T) {
	a, b, clk, wa, wb := selectivePair(t, nil, func(p *wire.Packet, seen []pktRec) bool {
		return p.BTH.Opcode == wire.RCAck && p.AETH.IsACK() && p.BTH.PSN == 32 &&
			!slices.ContainsFunc(seen, func(r pktRec) bool { return isPlainACK(r) && r.psn == 32 })
	})
	seedRTT(t, a, b, clk, wa, 50*time.Microsecond)
	done := stallWrites(t, a, b, -1)
	clk.Advance(500 * time.Microsecond)
	finishWrites(t, a, b, done)
	if got, want := wa.resent(isData), []uint32{uint32(1 + 16*done)}; !slices.Equal(got, want) {
		t.Fatalf("resent PSNs %v, want %v", got, want)
	}
	if ack := wb.last(isPlainACK); ack.psn != 32 {
		t.Fatalf("last ACK PSN %d, want 32", ack.psn)
	}
	ca, cb := counters(a.dev), counters(b.dev)
	if ca.TransportTimeouts != 0 || ca.StallPokes != 1 {
		t.Fatalf("requester counters %+v: want one poke, no timeout", ca)
	}
	if cb.DuplicateRequest != 1 {
		t.Fatalf("responder counters %+v: want the poke taken as one duplicate", cb)
	}
}

// TestStallPokeGoBackN: the lost packet and lost NAK of TestStallPokeLostNAK
// against a responder that goes back N (NoHold, as rxe): it dropped 21-32.
// The poke probes with 17, the duplicate's ACK (19) has 20 probed in turn,
// and its ACK names 20 alone: the requester goes back N from 21. What the
// responder sees is what a timer expiry would have sent it, a probe timeout
// sooner.
func TestStallPokeGoBackN(t *testing.T) {
	a, b, clk, wa, wb := selectivePairRecovery(t, NoHold, firstOf(isData, 20), func(p *wire.Packet, seen []pktRec) bool {
		return p.BTH.Opcode == wire.RCAck && p.AETH.IsNAK() && !slices.ContainsFunc(seen, isSeqNAK)
	})
	seedRTT(t, a, b, clk, wa, 50*time.Microsecond)
	stallWrites(t, a, b, 1)
	pokeAnswered(t, a, b, clk, 50*time.Microsecond)
	finishWrites(t, a, b, 1)
	want := []uint32{17, 20}
	for psn := uint32(21); psn <= 32; psn++ {
		want = append(want, psn)
	}
	if got := wa.resent(isData); !slices.Equal(got, want) {
		t.Fatalf("resent PSNs %v, want %v", got, want)
	}
	if ack := wb.last(isPlainACK); ack.psn != 32 || ack.aeth.MSN != 3 {
		t.Fatalf("last ACK PSN %d MSN %d, want 32 and 3", ack.psn, ack.aeth.MSN)
	}
	if ca, cb := counters(a.dev), counters(b.dev); ca.TransportTimeouts != 0 || ca.StallPokes != 1 || cb.OOOHeld != 0 {
		t.Fatalf("counters A %+v B %+v: want one poke, no timeout, nothing held", ca, cb)
	}
}

// TestStallPokeLateACK: nothing is lost, but the responder is busy (its
// engine held) while the requester sends a 256 KiB and a 64 KiB WRITE
// (PSNs 1-64, 65-80), so the poke fires (probe timeout 150 µs) and probes
// with PSN 1. The responder then runs, one receive batch (64 frames) at a
// time, and acknowledges 64 sooner than srtt after the poke: that ACK left
// it before the probe arrived, so it says nothing about what the probe
// found, and the requester must not probe 65 in turn (the chain that, at
// 0% loss, turned each late partial ACK into a probe) but wait where it
// was. The responder's ACKs of 80 (for the last packet and for the
// duplicate) are lost, so only a second poke, a probe timeout later,
// resends 65.
func TestStallPokeLateACK(t *testing.T) {
	lateACKAfterProbe(t, 0, 200*time.Microsecond, 500*time.Microsecond, "the poke's", 0, 2)
}

// TestTimerLateACK: TestStallPokeLateACK's late ACK after a transport
// timer expiry instead of a poke (pokes off: NoProbe). The timer (1 ms)
// fires and probes 1; the ACK of 64 that then comes sooner than srtt
// after the expiry left the responder before the probe arrived, so the
// requester must not probe 65 in turn but resume where it was (an expiry
// can be as early as a poke when the responder is merely descheduled).
// The ACKs of 80 are lost, so the next expiry resends 65.
func TestTimerLateACK(t *testing.T) {
	lateACKAfterProbe(t, NoProbe, 1100*time.Microsecond, 1100*time.Microsecond, "the timer's", 2, 0)
}

// lateACKAfterProbe is the exchange of the two tests above under recovery
// r: the first probe goes out once the clock passes expire, the second
// again later; the requester ends with timeouts expiries and pokes pokes.
func lateACKAfterProbe(t *testing.T, r Recovery, expire, again time.Duration, probe string, timeouts, pokes uint64) {
	t.Helper()
	a, b, clk, wa, wb := selectivePairRecovery(t, r, nil, func(p *wire.Packet, seen []pktRec) bool {
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
	clk.Advance(expire)
	quiesce(t, a.dev)
	if got := wa.resent(isData); !slices.Equal(got, []uint32{1}) {
		nb.UnlockEngine(0)
		t.Fatalf("resent PSNs %v before the responder ran, want %s [1]", got, probe)
	}
	nb.UnlockEngine(0)
	quiesce(t, a.dev, b.dev)
	if ack := wb.last(func(r pktRec) bool { return isPlainACK(r) && !r.dropped }); ack.psn != 64 {
		t.Fatalf("last ACK A heard PSN %d, want 64", ack.psn)
	}
	if got := wa.resent(isData); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("resent PSNs %v after the late ACK of 64, want [1]: no probe chained on it", got)
	}
	clk.Advance(again)
	for i, wc := range poll(t, a.scq, 2, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[:off], a.mr.Bytes()[:off])
	if got := wa.resent(isData); !slices.Equal(got, []uint32{1, 65}) {
		t.Fatalf("resent PSNs %v, want [1 65]", got)
	}
	if ca := counters(a.dev); ca.TransportTimeouts != timeouts || ca.StallPokes != pokes {
		t.Fatalf("requester counters %+v: want %d timeouts, %d pokes", ca, timeouts, pokes)
	}
}

func countOf(seen []pktRec, ok func(pktRec) bool) int {
	n := 0
	for _, r := range seen {
		if ok(r) {
			n++
		}
	}
	return n
}
