package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// TestSRQSharedByTwoQPsWithLimitEvent feeds two QPs from one SRQ and checks
// the limit event fires once, when the WQEs left drop below the limit.
func TestSRQSharedByTwoQPsWithLimitEvent(t *testing.T) {
	la, lb := memlink.NewPair(5000)
	devA := newDevice(t, la, macA, ipA, 4096)
	devB := newDevice(t, lb, macB, ipB, 4096)
	a1, a2 := newNode(t, devA, 1<<16), newNode(t, devA, 1<<16)
	pd, err := devB.AllocPD()
	must(t, err)
	cq, err := devB.CreateCQ(64)
	must(t, err)
	mr, err := pd.AllocMR(1<<16, AccessLocalWrite)
	must(t, err)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	must(t, err)
	var bs [2]*node
	for i := range bs {
		qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: QPCap{MaxSendWR: 8}})
		must(t, err)
		bs[i] = &node{dev: devB, pd: pd, scq: cq, rcq: cq, qp: qp, mr: mr}
	}
	connect(t, a1, bs[0], ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
	connect(t, a2, bs[1], ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})

	if _, err := bs[0].qp.PostRecv([]RecvWR{{ID: 1, SGList: sge(mr, 0, 8)}}); !isErr(err, ErrInvalid) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v, want EINVAL", err)
	}
	if err := srq.Modify(SRQAttr{Limit: 9}, SRQAttrLimit); !isErr(err, ErrInvalid) {
		t.Fatalf("limit above the SRQ size: %v, want EINVAL", err)
	}
	if err := srq.Destroy(); !isErr(err, ErrBusy) {
		t.Fatalf("destroying an SRQ in use: %v, want EBUSY", err)
	}
	const size = 256
	for i := range 8 {
		if _, err := srq.PostRecv([]RecvWR{{ID: uint64(100 + i), SGList: sge(mr, i*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srq.PostRecv([]RecvWR{{ID: 200, SGList: sge(mr, 0, size)}}); !isErr(err, ErrNoMem) {
		t.Fatalf("posting to a full SRQ: %v, want ENOMEM", err)
	}
	must(t, srq.Modify(SRQAttr{Limit: 4}, SRQAttrLimit))

	noEvent := func(when string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if ev, err := devB.GetAsyncEvent(ctx); err == nil {
			t.Fatalf("%s: unexpected event %v", when, ev.Type)
		}
	}
	send := func(from *node, n int) {
		t.Helper()
		fill(from.mr.Bytes()[:size], n)
		postSend(t, from, SendWR{ID: uint64(n), Opcode: WRSend, Flags: SendSignaled, SGList: sge(from.mr, 0, size)})
		if wc := poll(t, from.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("send %d: %+v", n, wc)
		}
		wc := poll(t, cq, 1, 5*time.Second)[0]
		want := bs[0].qp.QPN()
		if from == a2 {
			want = bs[1].qp.QPN()
		}
		// WQEs are consumed in the order they were posted, whichever QP takes them.
		if wc.Status != WCSuccess || wc.WRID != uint64(100+n) || wc.QPNum != want || wc.ByteLen != size {
			t.Fatalf("receive %d: %+v (want WR %d on QP %d)", n, wc, 100+n, want)
		}
		equalBytes(t, "received message", mr.Bytes()[n*size:(n+1)*size], from.mr.Bytes()[:size])
	}
	send(a1, 0)
	send(a2, 1)
	send(a1, 2)
	send(a2, 3)
	noEvent("4 WQEs left with limit 4")
	send(a1, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := devB.GetAsyncEvent(ctx)
	if err != nil || ev.Type != EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("event %+v (%v), want SRQ_LIMIT_REACHED", ev, err)
	}
	if got := srq.Query().Limit; got != 0 {
		t.Fatalf("limit %d after the event, want 0 (disarmed)", got)
	}
	send(a2, 5)
	noEvent("the limit fires once")
	// Freed slots can be posted again.
	if _, err := srq.PostRecv([]RecvWR{{ID: 106, SGList: sge(mr, 6*size, size)}}); err != nil {
		t.Fatal(err)
	}
}

// TestSRQEmptyGivesRNRThenSucceeds: with nothing in the SRQ the responder
// sends RNR NAKs; posting a WQE lets the retried SEND land.
func TestSRQEmptyGivesRNRThenSucceeds(t *testing.T) {
	la, lb := memlink.NewPair(5000)
	devA := newDevice(t, la, macA, ipA, 4096)
	devB := newDevice(t, lb, macB, ipB, 4096)
	a := newNode(t, devA, 1<<16)
	pd, err := devB.AllocPD()
	must(t, err)
	cq, err := devB.CreateCQ(16)
	must(t, err)
	mr, err := pd.AllocMR(1<<16, AccessLocalWrite)
	must(t, err)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 4})
	must(t, err)
	qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: QPCap{MaxSendWR: 4}})
	must(t, err)
	b := &node{dev: devB, pd: pd, scq: cq, rcq: cq, qp: qp, mr: mr}
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7, minRNR: 1})
	fill(a.mr.Bytes()[:100], 3)
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 100)})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := devB.Counters()
		must(t, err)
		if c.SendRNRErr > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK with an empty SRQ")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if _, err := srq.PostRecv([]RecvWR{{ID: 9, SGList: sge(mr, 0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("send after RNR: %+v", wc)
	}
	if wc := poll(t, cq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 9 || wc.ByteLen != 100 {
		t.Fatalf("receive: %+v", wc)
	}
	equalBytes(t, "message", mr.Bytes()[:100], a.mr.Bytes()[:100])
}

// TestSRQWQEsUseTheSRQsPD: a QP in one PD takes its receives from an SRQ
// created in another. The receive WQEs' lkeys are checked against the
// SRQ's PD (ibverbs: the SRQ is created with its own PD): a buffer of the
// SRQ's PD receives the SEND; one of the QP's PD (not the SRQ's) is a
// malformed WQE: LOC_QP_OP_ERR here, REM_OP_ERR at the sender.
func TestSRQWQEsUseTheSRQsPD(t *testing.T) {
	for _, bufInSRQPD := range []bool{true, false} {
		name := "buffer in the QP's PD"
		if bufInSRQPD {
			name = "buffer in the SRQ's PD"
		}
		t.Run(name, func(t *testing.T) {
			la, lb := memlink.NewPair(5000)
			a := newNode(t, newDevice(t, la, macA, ipA, 4096), 1<<16)
			devB := newDevice(t, lb, macB, ipB, 4096)
			qpPD, err := devB.AllocPD()
			must(t, err)
			srqPD, err := devB.AllocPD()
			must(t, err)
			cq, err := devB.CreateCQ(64)
			must(t, err)
			srq, err := srqPD.CreateSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1})
			must(t, err)
			qp, err := qpPD.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: QPCap{MaxSendWR: 8}})
			must(t, err)
			bufPD := qpPD
			if bufInSRQPD {
				bufPD = srqPD
			}
			mr, err := bufPD.AllocMR(1<<16, AccessLocalWrite)
			must(t, err)
			b := &node{dev: devB, pd: qpPD, scq: cq, rcq: cq, qp: qp, mr: mr}
			connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
			_, err = srq.PostRecv([]RecvWR{{ID: 9, SGList: sge(mr, 0, 100)}})
			must(t, err)
			fill(a.mr.Bytes()[:100], 5)
			postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 100)})
			swc := poll(t, a.scq, 1, 5*time.Second)[0]
			rwc := poll(t, cq, 1, 5*time.Second)[0]
			if bufInSRQPD {
				if swc.Status != WCSuccess || rwc.Status != WCSuccess || rwc.WRID != 9 || rwc.ByteLen != 100 {
					t.Fatalf("send %+v, receive %+v: want both successful", swc, rwc)
				}
				equalBytes(t, "SEND into the SRQ's buffer", mr.Bytes()[:100], a.mr.Bytes()[:100])
				return
			}
			if swc.Status != WCRemOpErr || rwc.Status != WCLocQPOpErr || rwc.WRID != 9 {
				t.Fatalf("send %+v, receive %+v: want REM_OP_ERR and LOC_QP_OP_ERR", swc, rwc)
			}
		})
	}
}
