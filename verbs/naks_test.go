package verbs

import (
	"reflect"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// TestSecondSequenceNAK: a sequence NAK for the oldest unacknowledged PSN
// sends the requester back to it once per retry episode, resending the
// NAKed packet alone first (its ACK says how far the responder has
// everything: docs/recovery.md). With retry_cnt 7 a second NAK for the
// same PSN (the resent packet was lost again) resends it once more; with
// a finite retry_cnt, as rxe, it is ignored until the timer or progress
// ends the episode. Here every frame a sends is lost and the NAKs are
// injected, on fake time (no timer expires).
func TestSecondSequenceNAK(t *testing.T) {
	for _, retry := range []uint8{7, 3} {
		t.Run(map[uint8]string{7: "retry_cnt 7", 3: "retry_cnt 3"}[retry], func(t *testing.T) {
			a, b, _ := fakePair(t, connOpts{mtu: MTU1024, timeout: 14, retry: retry, rnr: 7, psnA: 0xfffffc})
			la := nicOf(a.dev).Link(0).(*memlink.Link)
			dropWhile(la, func(*wire.Packet) bool { return true })
			postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			c := waitCounter(t, a.dev, "the WRITE's 8 packets", func(c Counters) bool { return c.SentPkts == 8 })
			nak := func(before Counters) Counters {
				t.Helper()
				// PSN 3 of the WRITE, across the wrap: 0xfffffc + 3.
				la.Inject([][]byte{forgeResponse(t, a.qp.QPN(), wire.RCAck, wire.NAKSyndrome(wire.NAKPSNSequenceError), 0xffffff, nil)})
				waitCounter(t, a.dev, "the NAK", func(x Counters) bool { return x.RcvdPkts > before.RcvdPkts })
				time.Sleep(10 * time.Millisecond) // what it makes the requester send, sent
				settle(t, a.dev)
				return counters(a.dev)
			}
			c1 := nak(c)
			if c1.SentPkts != c.SentPkts+1 || c1.RcvdSeqErr != 1 {
				t.Fatalf("first NAK for PSN 3: %d packets resent (want 1, PSN 3), rcvd_seq_err %d", c1.SentPkts-c.SentPkts, c1.RcvdSeqErr)
			}
			c2 := nak(c1)
			resent := c2.SentPkts - c1.SentPkts
			switch {
			case retry == 7 && resent != 1:
				t.Fatalf("second NAK for PSN 3 with retry_cnt 7: %d packets resent, want 1 (PSN 3 again)", resent)
			case retry != 7 && (resent != 0 || c2.CompleterRetryErr != c1.CompleterRetryErr):
				t.Fatalf("second NAK for PSN 3 with retry_cnt %d: %d packets resent, %d retries counted; want it ignored",
					retry, resent, c2.CompleterRetryErr-c1.CompleterRetryErr)
			}
			if n := pending(a.scq); n != 0 || a.qp.State() != StateRTS {
				t.Fatalf("QP %v, %d completions", a.qp.State(), n)
			}
		})
	}
}

// TestRNRNAKCountsOnlyForTheHead: an RNR NAK counts against rnr_retry only
// when it names the head WR. Behind a READ whose responses were lost, an
// RNR NAK for the SEND after it says those responses were lost: the
// requester goes back for the READ and counts nothing, so even with
// rnr_retry 0 both complete once the receive is posted. Counted, it failed
// the READ with RNR_RETRY_EXC_ERR.
func TestRNRNAKCountsOnlyForTheHead(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{mtu: MTU1024, timeout: 14, retry: 7, rnr: 0})
	fill(b.mr.Bytes()[:4096], 3)
	fill(a.mr.Bytes()[8192:8192+100], 4)
	lb := nicOf(b.dev).Link(0).(*memlink.Link)
	hold := dropWhile(lb, func(p *wire.Packet) bool {
		switch p.BTH.Opcode {
		case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
			return true
		}
		return false
	})
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 8192, 100)})
	waitCounter(t, a.dev, "the RNR NAK", func(c Counters) bool { return c.RcvdRNRErr+c.CompleterRetryErr >= 1 })
	// Going back for the READ resends the SEND, which draws another RNR
	// NAK: let that exchange end before the READ can complete, or the NAK
	// would arrive naming the SEND as the head (and count, rightly).
	quiesce(t, a.dev, b.dev)
	if n := pending(a.scq); n != 0 || a.qp.State() != StateRTS {
		t.Fatalf("after the RNR NAK behind the READ: QP %v, %d completions", a.qp.State(), n)
	}
	if c := counters(a.dev); c.RcvdRNRErr != 0 {
		t.Fatalf("the RNR NAK behind the READ counted as an RNR NAK of the head: %+v", c)
	}
	postRecv(t, b, RecvWR{ID: 7, SGList: sge(b.mr, 8192, 100)})
	hold.Store(false)
	clk.Advance(transport.AckTimeout(14) + time.Microsecond)
	for i, wc := range poll(t, a.scq, 2, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %+v", wc)
		}
	}
	equalBytes(t, "READ", a.mr.Bytes()[:4096], b.mr.Bytes()[:4096])
	equalBytes(t, "SEND", b.mr.Bytes()[8192:8192+100], a.mr.Bytes()[8192:8192+100])
}

// quiesce waits until the devices' counters stop moving (the same over
// 50 ms of real time; 5 s at most): what was in flight has arrived.
func quiesce(t *testing.T, devs ...*Device) {
	t.Helper()
	snapshot := func() []Counters {
		var out []Counters
		for _, d := range devs {
			c := counters(d)
			// An idle engine with a timer armed wakes every idleWait
			// (the fake clock never fires it): its wakeups are not work.
			c.EngineWakeups, c.DoorbellWakes, c.SpinStalls = 0, 0, 0
			out = append(out, c)
		}
		return out
	}
	last, since := snapshot(), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		now := snapshot()
		if !reflect.DeepEqual(now, last) {
			last, since = now, time.Now()
		} else if time.Since(since) >= 50*time.Millisecond {
			return
		}
	}
	t.Fatal("the devices' counters never stopped moving")
}
