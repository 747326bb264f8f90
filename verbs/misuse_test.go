package verbs

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
)

// TestCreateQPRefusesOtherDevicesCQ: a QP's CQs (and SRQ) must belong to
// its own device; the engine would otherwise push completions into
// another device's ring from its goroutine. EINVAL, as uverbs.
func TestCreateQPRefusesOtherDevicesCQ(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 4096)
	cap := QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	for _, attr := range []QPInitAttr{
		{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: a.rcq, Cap: cap},
		{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: b.rcq, Cap: cap},
		{Type: QPTypeUC, SendCQ: b.scq, RecvCQ: b.rcq, Cap: cap},
	} {
		if _, err := a.pd.CreateQP(attr); !isErr(err, ErrInvalid) {
			t.Fatalf("CreateQP with a CQ of another device: %v, want EINVAL", err)
		}
	}
	srq, err := b.pd.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	must(t, err)
	if _, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq, SRQ: srq, Cap: cap}); !isErr(err, ErrInvalid) {
		t.Fatalf("CreateQP with an SRQ of another device: %v, want EINVAL", err)
	}
}

// TestDestroyQPTwice: a second Destroy is EINVAL and leaves the SRQ's count
// of attached QPs as the first left it.
func TestDestroyQPTwice(t *testing.T) {
	a, _, _, _ := pair(t, connOpts{}, 4096)
	srq, err := a.pd.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	must(t, err)
	qp, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq, SRQ: srq,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	must(t, err)
	other, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq, SRQ: srq,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	must(t, err)
	must(t, qp.Destroy())
	if err := qp.Destroy(); !isErr(err, ErrInvalid) {
		t.Fatalf("second Destroy: %v, want EINVAL", err)
	}
	if n := tsrq(srq).Attached(); n != 1 {
		t.Fatalf("SRQ has %d QPs attached, want 1 (the other)", n)
	}
	if err := srq.Destroy(); !isErr(err, ErrBusy) {
		t.Fatalf("destroying an SRQ a QP still uses: %v, want EBUSY", err)
	}
	must(t, other.Destroy())
	must(t, srq.Destroy())
}

// TestNoAckForSendThatOverflowedCQ: a SEND whose receive completion does not
// fit the receive CQ moves the responder QP to the error state without an
// ACK (rxe's RESPST_ERR_CQ_OVERFLOW), so the requester never sees it
// succeed: its retries run out.
func TestNoAckForSendThatOverflowedCQ(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{timeout: 8, retry: 1}, 1<<16)
	small, err := b.dev.CreateCQ(2)
	must(t, err)
	b.rcq = small
	b.qp, err = b.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: small, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 8}})
	must(t, err)
	a.qp, err = a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(t, err)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{timeout: 8, retry: 1, rnr: 7})
	for i := range 4 {
		postRecv(t, b, RecvWR{ID: uint64(i), SGList: sge(b.mr, i*64, 64)})
	}
	const n = 2 // the CQ's depth
	for i := range n + 1 {
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 16)})
		wc := poll(t, a.scq, 1, 5*time.Second)[0]
		if want := WCSuccess; i == n {
			if wc.Status == WCSuccess {
				t.Fatalf("SEND %d, whose receive completion overflowed the CQ, was acknowledged: %+v", i, wc)
			}
		} else if wc.Status != want {
			t.Fatalf("SEND %d: %+v", i, wc)
		}
	}
	if b.qp.State() != StateErr || !small.Overflowed() {
		t.Fatalf("responder QP %v, CQ overflowed %v", b.qp.State(), small.Overflowed())
	}
}

// wakeAfterClose is a MemLink that reports a Wake after its owner released
// it: on AF_XDP that would write to a closed, perhaps reused, eventfd.
type wakeAfterClose struct {
	*memlink.Link
	released, late atomic.Bool
}

func (l *wakeAfterClose) Wake() {
	if l.released.Load() {
		l.late.Store(true)
	}
	l.Link.Wake()
}

// TestPostsRacingClose: after Close every post returns ErrClosed, and
// posts racing with Close never ring the doorbell of a released link.
func TestPostsRacingClose(t *testing.T) {
	for round := range 20 {
		la, lb := memlink.NewPair(4096 + 200)
		link := &wakeAfterClose{Link: la}
		a := newNode(t, newDevice(t, link, macA, ipA, 4096), 1<<16)
		b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
		connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
		a.dev.onClose = func() error { link.released.Store(true); return nil }
		srq, err := a.pd.CreateSRQ(SRQInitAttr{MaxWR: 1 << 14, MaxSGE: 1})
		must(t, err)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _ = a.qp.PostRecv([]RecvWR{{SGList: sge(a.mr, 0, 8)}})
					_, _ = srq.PostRecv([]RecvWR{{SGList: sge(a.mr, 0, 8)}})
					time.Sleep(time.Duration(round%3) * time.Microsecond)
				}
			}()
		}
		time.Sleep(time.Millisecond)
		must(t, a.dev.Close())
		close(stop)
		wg.Wait()
		if link.late.Load() {
			t.Fatalf("round %d: a post rang the doorbell of a released link", round)
		}
		if _, err := a.qp.PostSend([]SendWR{{Opcode: WRSend, SGList: sge(a.mr, 0, 8)}}); !isErr(err, ErrClosed) {
			t.Fatalf("PostSend after Close: %v, want ErrClosed", err)
		}
		if _, err := a.qp.PostRecv([]RecvWR{{SGList: sge(a.mr, 0, 8)}}); !isErr(err, ErrClosed) {
			t.Fatalf("PostRecv after Close: %v, want ErrClosed", err)
		}
		if _, err := srq.PostRecv([]RecvWR{{SGList: sge(a.mr, 0, 8)}}); !isErr(err, ErrClosed) {
			t.Fatalf("SRQ PostRecv after Close: %v, want ErrClosed", err)
		}
	}
}

// TestQPNsAreRandom: QPNs are drawn at random from 0x11..MaxQP-1, unique
// per device (rxe counts up from 0x11, which a blind attacker can guess),
// and a destroyed QP's number can be had again.
func TestQPNsAreRandom(t *testing.T) {
	a, _, _, _ := pair(t, connOpts{}, 4096)
	seen := map[uint32]bool{a.qp.QPN(): true}
	var qps []*QP
	below := 0
	for range 200 {
		qp, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq, Cap: QPCap{MaxSendWR: 1}})
		must(t, err)
		n := qp.QPN()
		if n < transport.FirstUserQPN || n >= MaxQP || seen[n] {
			t.Fatalf("QPN %#x: out of range or reused while live", n)
		}
		if n < transport.FirstUserQPN+256 {
			below++
		}
		seen[n] = true
		qps = append(qps, qp)
	}
	// Counting up, all 200 would lie in the first 256; at random about 13 do.
	if below > 60 {
		t.Fatalf("%d of 200 QPNs below %#x: not spread over the range", below, transport.FirstUserQPN+256)
	}
	for _, qp := range qps {
		must(t, qp.Destroy())
	}
}

// A QP may have no send queue (max_send_wr 0, as rxe allows: qperf's
// receiving side asks for one); a send on it finds the queue full.
func TestQPWithoutSendQueue(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 4096)
	qp, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq, Cap: QPCap{MaxRecvWR: 4}})
	must(t, err)
	must(t, qp.Modify(QPAttr{State: StateInit, Port: 1}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
	must(t, qp.Modify(QPAttr{State: StateRTR, AH: AH{DGID: ipB, SGIDIndex: 1, DMAC: macB}, PathMTU: MTU1024, DestQPN: b.qp.QPN(), MaxDestRdAtomic: 1},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
	must(t, qp.Modify(QPAttr{State: StateRTS}, AttrState|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic))
	if _, err := qp.PostSend([]SendWR{{Opcode: WRSend, SGList: sge(a.mr, 0, 8)}}); !isErr(err, ErrNoMem) {
		t.Fatalf("a send on a QP without a send queue: %v, want ENOMEM", err)
	}
	must(t, qp.Destroy())
}
