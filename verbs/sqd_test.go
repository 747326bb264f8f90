package verbs

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// TestSQDDrainsUnderLoss: a QP moved to SQD in the middle of a long WRITE
// finishes it, retransmitting under loss with a finite retry_cnt, starts
// none of the WRs behind it, raises SQ_DRAINED once the WRITE has completed,
// and refuses to leave SQD (but for ERR) until then; SQD -> RTS resumes.
func TestSQDDrainsUnderLoss(t *testing.T) {
	const big = 1 << 20 // 1024 packets: far more than the 128-PSN window
	a, b, la, _ := pair(t, connOpts{timeout: 12, retry: 3}, 1<<21)
	fill(a.mr.Bytes()[:big+4096], 9)
	base := counters(a.dev).SentPkts
	hold := dropWhile(la, func(*wire.Packet) bool { return true })
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, big), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, big, 4096), RemoteAddr: b.mr.Addr() + big, RKey: b.mr.RKey()},
		SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, big+8192, 4096), RemoteAddr: b.mr.Addr() + big, RKey: b.mr.RKey()})
	waitCounter(t, a.dev, "a full window", func(c Counters) bool { return c.SentPkts >= base+MaxUnackedPSNs })
	must(t, a.qp.Modify(QPAttr{State: StateSQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsyncNotify))
	if attr, err := a.qp.Query(); err != nil || attr.State != StateSQD || !attr.SQDraining {
		t.Fatalf("Query while draining: state %v draining %v (%v)", attr.State, attr.SQDraining, err)
	}
	if err := a.qp.Modify(QPAttr{State: StateRTS}, AttrState); !isErr(err, ErrInvalid) {
		t.Fatalf("SQD -> RTS while draining: %v, want EINVAL", err)
	}
	if err := a.qp.Modify(QPAttr{State: StateSQD}, AttrState); !isErr(err, ErrInvalid) {
		t.Fatalf("SQD -> SQD while draining: %v, want EINVAL", err)
	}
	// From now on lose one frame in 200 (ACKs come every 64 packets, so
	// the retry counter is reset between two losses).
	var n atomic.Int32
	dropWhile(la, func(*wire.Packet) bool { return n.Add(1)%200 == 0 })
	hold.Store(false)

	if wc := poll(t, a.scq, 1, 20*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 1 {
		t.Fatalf("the WRITE started before SQD: %+v; A %s B %s; %+v %+v %+v", wc, dumpQP(a.qp), dumpQP(b.qp), counters(a.dev), counters(b.dev), la.Stats())
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[:big], a.mr.Bytes()[:big])
	if ev := asyncEvent(t, a.dev); ev.Type != EventSQDrained || ev.QP != a.qp || ev.Type.String() != "SQ_DRAINED" {
		t.Fatalf("event %v on %p, want SQ_DRAINED on %p", ev.Type, ev.QP, a.qp)
	}
	time.Sleep(30 * time.Millisecond)
	if k := pending(a.scq); k != 0 {
		t.Fatalf("%d completions in SQD after the drain", k)
	}
	if !allZero(b.mr.Bytes()[big : big+4096]) {
		t.Fatal("a WR posted behind the drained one was started in SQD")
	}
	if attr, err := a.qp.Query(); err != nil || attr.State != StateSQD || attr.SQDraining {
		t.Fatalf("Query after the drain: state %v draining %v (%v)", attr.State, attr.SQDraining, err)
	}
	must(t, a.qp.Modify(QPAttr{State: StateSQD, MinRNRTimer: 2}, AttrState|AttrMinRNRTimer)) // SQD -> SQD once drained
	must(t, a.qp.Modify(QPAttr{State: StateRTS}, AttrState))
	wcs := poll(t, a.scq, 2, 10*time.Second)
	if wcs[0].Status != WCSuccess || wcs[0].WRID != 2 || wcs[1].Status != WCSuccess || wcs[1].WRID != 3 {
		t.Fatalf("completions after SQD -> RTS: %+v", wcs)
	}
	equalBytes(t, "WRITE after SQD", b.mr.Bytes()[big:big+4096], a.mr.Bytes()[big:big+4096])
	equalBytes(t, "READ after SQD", a.mr.Bytes()[big+8192:big+8192+4096], a.mr.Bytes()[big:big+4096])
	noAsyncEvent(t, a.dev)
}

// TestSQDIdle: with nothing in flight the drain ends at once; the event is
// raised only when asked for, and posting in SQD queues WRs without
// starting them.
func TestSQDIdle(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	must(t, a.qp.Modify(QPAttr{State: StateSQD}, AttrState))
	noAsyncEvent(t, a.dev)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	time.Sleep(20 * time.Millisecond)
	if k := pending(a.scq); k != 0 {
		t.Fatalf("a WR posted in SQD completed")
	}
	must(t, a.qp.Modify(QPAttr{State: StateRTS}, AttrState))
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion after SQD -> RTS: %+v", wc)
	}
	must(t, a.qp.Modify(QPAttr{State: StateSQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsyncNotify))
	if ev := asyncEvent(t, a.dev); ev.Type != EventSQDrained || ev.QP != a.qp {
		t.Fatalf("event %v, want SQ_DRAINED", ev.Type)
	}
	must(t, a.qp.Modify(QPAttr{State: StateSQD}, AttrState)) // SQD -> SQD: no new drain
	noAsyncEvent(t, a.dev)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
