package verbs

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
)

// TestQPFatalOnResponderError: a request the responder rejects (a WRITE with
// a bad rkey) moves the responder QP to ERR and raises EventQPFatal for it;
// the requester, told by its REM_ACCESS_ERR completion, gets no event.
func TestQPFatalOnResponderError(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x80})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("WRITE with a bad rkey: %+v", wc)
	}
	if ev := asyncEvent(t, b.dev); ev.Type != EventQPFatal || ev.QP != b.qp || ev.Type.String() != "QP_FATAL" {
		t.Fatalf("responder event %v on %p, want QP_FATAL on %p", ev.Type, ev.QP, b.qp)
	}
	noAsyncEvent(t, b.dev) // once per transition
	noAsyncEvent(t, a.dev)
}

// TestQPFatalOnCQOverflow: a receive completion that overflows the receive
// CQ raises EventCQErr for the CQ, then EventQPFatal for the QP, which is in
// ERR.
func TestQPFatalOnCQOverflow(t *testing.T) {
	la, lb := memlink.NewPair(5000)
	a := newNode(t, newDevice(t, la, macA, ipA, 4096), 1<<16)
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
	small, err := b.dev.CreateCQ(1)
	must(t, err)
	b.rcq = small
	b.qp, err = b.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: small, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(t, err)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
	postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, 0, 64)}, RecvWR{ID: 2, SGList: sge(b.mr, 64, 64)})
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, SGList: sge(a.mr, 0, 8)}, SendWR{ID: 2, Opcode: WRSend, SGList: sge(a.mr, 0, 8)})
	ev := asyncEvent(t, b.dev)
	if ev.Type != EventCQErr || ev.CQ != small {
		t.Fatalf("first event %v, want CQ_ERR on the receive CQ", ev.Type)
	}
	if ev = asyncEvent(t, b.dev); ev.Type != EventQPFatal || ev.QP != b.qp {
		t.Fatalf("second event %v, want QP_FATAL on the QP", ev.Type)
	}
	if b.qp.State() != StateErr {
		t.Fatalf("QP %v after the overflow, want ERR", b.qp.State())
	}
}

// TestNoQPFatalForReportedErrors: errors a send completion reports (retries
// exhausted, a bad local key) and Modify to ERR raise no event.
func TestNoQPFatalForReportedErrors(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{timeout: 14, retry: 1, rnr: 7})
	must(t, b.dev.Close())
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 8)})
	for i := 0; i < 2 && pending(a.scq) == 0; i++ {
		waitCounter(t, a.dev, "a transmission", func(c Counters) bool { return c.SentPkts == uint64(i+1) })
		clk.Advance(transport.AckTimeout(14) + time.Microsecond)
	}
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRetryExcErr {
		t.Fatalf("completion %+v, want RETRY_EXC_ERR", wc)
	}
	noAsyncEvent(t, a.dev)

	c, d, _, _ := pair(t, connOpts{}, 1<<16)
	postSend(t, c, SendWR{ID: 1, Opcode: WRSend, SGList: []SGE{{Addr: c.mr.Addr(), Length: 8, LKey: c.mr.LKey() ^ 1}}})
	if wc := poll(t, c.scq, 1, 5*time.Second)[0]; wc.Status != WCLocProtErr {
		t.Fatalf("completion %+v, want LOC_PROT_ERR", wc)
	}
	must(t, d.qp.Modify(QPAttr{State: StateErr}, AttrState))
	noAsyncEvent(t, c.dev)
	noAsyncEvent(t, d.dev)
}
