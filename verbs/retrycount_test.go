package verbs

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// TestRetryCountUnderLoss: with retry_cnt 3 and 5% of the frames lost each
// way, long multi-packet WRITEs (256 packets each, so every one meets many
// losses and sequence-error NAKs) all complete successfully: as rxe's
// completer, a retry episode counts once however many NAKs it draws, and
// progress (an ACK at or past the oldest unacknowledged PSN, a response)
// restores the counter. Counting every NAK exhausts retry_cnt 3 within a
// few WRITEs.
func TestRetryCountUnderLoss(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			const size, writes = 256 << 10, 6
			a, b, la, lb := pair(t, connOpts{mtu: MTU1024, timeout: 14, retry: 3}, 2*size)
			la.SetImpairment(memlink.Impairment{Drop: 0.05, Seed: seed})
			lb.SetImpairment(memlink.Impairment{Drop: 0.05, Seed: seed + 100})
			for i := range writes {
				src := a.mr.Bytes()[i%2*size:][:size]
				fill(src, i)
				postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, i%2*size, size),
					RemoteAddr: b.mr.Addr() + uint64(i%2*size), RKey: b.mr.RKey()})
				if pollWait(a.scq, 10*time.Second) == nil {
					t.Fatalf("WRITE %d: no completion; A %s", i, dumpQP(a.qp))
				}
				if wc := poll(t, a.scq, 1, time.Second)[0]; wc.Status != WCSuccess || wc.WRID != uint64(i) {
					c, _ := a.dev.Counters()
					cb, _ := b.dev.Counters()
					t.Fatalf("WRITE %d: completion %+v; counters %+v B %+v links %+v %+v", i, wc, c, cb, la.Stats(), lb.Stats())
				}
				equalBytes(t, fmt.Sprint("WRITE ", i), b.mr.Bytes()[i%2*size:][:size], src)
			}
			c, _ := a.dev.Counters()
			if c.RcvdSeqErr < 4 || la.Stats().Dropped == 0 {
				t.Errorf("the losses were not exercised: %d sequence-error NAKs, link %+v", c.RcvdSeqErr, la.Stats())
			}
			t.Logf("sequence-error NAKs %d, retries %d, link A %+v B %+v", c.RcvdSeqErr, c.CompleterRetryErr, la.Stats(), lb.Stats())
		})
	}
}

// TestRetryExhaustedMultiPacketDeadPeer: a WRITE of 8 packets to a peer that
// is gone is sent once, then once more per expired timer (fake time) for
// each of retry_cnt 3 retries, and the next expiry fails it with
// RETRY_EXC_ERR: with a finite retry_cnt a timeout resends the whole
// window, as rxe (retry_cnt 7 probes instead: TestTimeoutProbesThenResends).
func TestRetryExhaustedMultiPacketDeadPeer(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{mtu: MTU1024, timeout: 14, retry: 3, rnr: 7})
	must(t, b.dev.Close())
	base := waitCounter(t, a.dev, "setup", func(Counters) bool { return true }).SentPkts
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, a.dev, "first transmission", func(c Counters) bool { return c.SentPkts == base+8 })
	for i := 1; i <= 3; i++ {
		clk.Advance(transport.AckTimeout(14) + time.Microsecond)
		want := base + 8*uint64(1+i)
		waitCounter(t, a.dev, "a retransmission", func(c Counters) bool { return c.SentPkts == want })
		if n := pending(a.scq); n != 0 {
			t.Fatalf("retry %d: a completion before retry_cnt ran out", i)
		}
	}
	clk.Advance(transport.AckTimeout(14) + time.Microsecond)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRetryExcErr || wc.WRID != 1 {
		t.Fatalf("completion %+v, want RETRY_EXC_ERR", wc)
	}
	if c := waitCounter(t, a.dev, "the end", func(Counters) bool { return true }); c.SentPkts != base+32 || c.RetryExceededErr != 1 {
		t.Fatalf("counters %+v: want 4 transmissions of 8 packets and one retry_exceeded_err", c)
	}
}

// TestRetryExhaustedWithoutProgress: the responder never gets PSN 5 of a
// WRITE. Its one sequence-error NAK (which acknowledges PSNs 0-4: progress)
// starts a retry; the resent PSN 5 is lost again and the responder, having
// NAKed already, stays silent, so only the timer retries. With retry_cnt 3,
// PSN 5 is sent 1+3 times and the WRITE fails with RETRY_EXC_ERR: NAKs
// reset the counter only when they move the acknowledged PSN forward.
func TestRetryExhaustedWithoutProgress(t *testing.T) {
	// Fake time: on a loaded machine a real timer could expire before
	// the NAK arrives, and that retry would come on top of the NAK's.
	a, b, clk := fakePair(t, connOpts{mtu: MTU1024, timeout: 10, retry: 3, rnr: 7})
	la := nicOf(a.dev).Link(0).(*memlink.Link)
	var sent5 atomic.Int32
	la.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) == nil && p.BTH.PSN == 5 {
			sent5.Add(1)
			return true
		}
		return false
	})
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 16<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, a.dev, "the NAK and its retry", func(c Counters) bool { return c.RcvdSeqErr == 1 && sent5.Load() == 2 })
	for i := int32(1); i <= 2; i++ {
		clk.Advance(transport.AckTimeout(10) + time.Microsecond)
		waitCounter(t, a.dev, "a timer's retry", func(Counters) bool { return sent5.Load() == 2+i })
	}
	clk.Advance(transport.AckTimeout(10) + time.Microsecond)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRetryExcErr {
		t.Fatalf("completion %+v, want RETRY_EXC_ERR", wc)
	}
	c := counters(a.dev)
	if n := sent5.Load(); n != 4 || c.RcvdSeqErr != 1 || c.RetryExceededErr != 1 {
		t.Fatalf("PSN 5 sent %d times (want 1+retry_cnt = 4); counters %+v", n, c)
	}
}

// TestTimeoutProbesThenResends: the last three packets of an 8-packet WRITE
// are lost, so no NAK can come, and only the last asks for an ACK. When the
// timer expires the requester resends only the oldest unacknowledged
// packet, PSN 0, asking for an ACK; the responder's ACK of PSN 4 shows
// where it stands and PSNs 5-7 follow at once, without another timeout
// and without resending 1-4.
func TestTimeoutProbesThenResends(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{mtu: MTU1024, timeout: 14, retry: 7, rnr: 7})
	la := nicOf(a.dev).Link(0).(*memlink.Link)
	log := watchSent(la, func(p *wire.Packet, n int) bool { return n <= 8 && p.BTH.PSN >= 5 })
	fill(a.mr.Bytes()[:8<<10], 7)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, a.dev, "the first transmission", func(c Counters) bool { return c.SentPkts >= 8 })
	if psns, _ := log.since(0); len(psns) != 8 {
		t.Fatalf("first transmission %v", psns)
	}
	clk.Advance(transport.AckTimeout(14) + time.Microsecond)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	psns, acks := log.since(8)
	if fmt.Sprint(psns) != "[0 5 6 7]" || !acks[0] || !acks[3] {
		t.Fatalf("after the timeout sent PSNs %v with AckReq %v: want the probe 0 (AckReq), then 5, 6 and 7", psns, acks)
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[:8<<10], a.mr.Bytes()[:8<<10])
}

// TestTimerBacksOffWithInfiniteRetries: with retry_cnt 7 (forever) and the
// peer gone, each expiry without progress doubles the next timeout, up to
// 2^transport.MaxBackoff times the local ACK timeout; the first answer resets it.
func TestTimerBacksOffWithInfiniteRetries(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{timeout: 10, retry: 7, rnr: 7})
	la := nicOf(a.dev).Link(0).(*memlink.Link)
	log := watchSent(la, func(*wire.Packet, int) bool { return true })
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, a.dev, "the first transmission", func(c Counters) bool { return c.SentPkts >= 1 })
	base := transport.AckTimeout(10)
	for i := range transport.MaxBackoff + 2 {
		period := base << min(i, transport.MaxBackoff)
		n := log.n()
		clk.Advance(period - time.Microsecond)
		time.Sleep(5 * time.Millisecond) // the engine looks at the clock at least every idleWait
		if got := log.n(); got != n {
			t.Fatalf("expiry %d: resent before %v", i+1, period)
		}
		clk.Advance(2 * time.Microsecond)
		waitCounter(t, a.dev, fmt.Sprintf("expiry %d after %v", i+1, period), func(c Counters) bool { return log.n() == n+1 })
	}
	la.SetDropFilter(nil) // the peer answers the next probe: progress
	clk.Advance(base << transport.MaxBackoff)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	st, _ := a.dev.QPStatus()
	if st[0].Timeouts != 0 || st[0].Probing {
		t.Fatalf("after progress: %v", st[0])
	}
}

// TestTimeoutResendsSkippedAtomic: a WRITE and a FETCH_ADD behind it both
// lose their first transmission. The timer's go-back-N resends the WRITE
// (the probe) but not the atomic, whose answer might still be on its way;
// once the WRITE is acknowledged the atomic is the oldest unacknowledged
// request, and the next expiry must send it again. It found a stall under
// the race detector: the requester's PSN had not moved past the skipped
// atomic, so the timer saw nothing unacknowledged and re-armed forever.
func TestTimeoutResendsSkippedAtomic(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{mtu: MTU1024, timeout: 10, retry: 7, rnr: 7})
	la := nicOf(a.dev).Link(0).(*memlink.Link)
	dropFirst(la, func(p *wire.Packet) bool { return p.BTH.Opcode == wire.RCWriteOnly },
		func(p *wire.Packet) bool { return p.BTH.Opcode == wire.RCFetchAdd })
	binary.LittleEndian.PutUint64(b.mr.Bytes()[64:], 41)
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 16), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 8, 8), RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 1})
	waitCounter(t, a.dev, "both first transmissions", func(c Counters) bool { return c.SentPkts >= 2 })
	buf := make([]WorkCompletion, 2)
	var wcs []WorkCompletion
	for i := 0; i < 200 && len(wcs) < 2; i++ {
		clk.Advance(transport.AckTimeout(10) << transport.MaxBackoff)
		time.Sleep(2 * time.Millisecond)
		wcs = append(wcs, buf[:a.scq.Poll(buf)]...)
	}
	if len(wcs) != 2 || wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess {
		t.Fatalf("completions %+v after 200 expiries:%s", wcs, stallReport(t))
	}
	if got, orig := binary.LittleEndian.Uint64(b.mr.Bytes()[64:]), binary.LittleEndian.Uint64(a.mr.Bytes()[8:]); got != 42 || orig != 41 {
		t.Fatalf("target %d (want 42), original %d (want 41)", got, orig)
	}
}
