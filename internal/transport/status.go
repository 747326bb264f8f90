package transport

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
)

// status snapshots qp (engine goroutine).
func (e *engine) status(qp *QP, now time.Time) ibv.QPStatus {
	t := &qp.t
	s := ibv.QPStatus{
		QPN: qp.qpn, DestQPN: t.attr.DestQPN, Type: qp.typ, State: t.state, Peer: t.attr.AH.DGID.Unmap(), Queue: e.index,
		SendQueued: len(t.sq), ReqPSN: t.reqPSN, NextPSN: t.nextPSN, CompPSN: t.compPSN, Window: t.window(),
		Timeouts: t.timeouts, Retrying: t.startedRetry, Probing: t.probing,
		EPSN: t.ePSN, MSN: t.msn, RecvQueued: len(t.rq), NAKSent: t.nakSent,
	}
	if len(t.sq) > 0 && t.sq[0].started {
		w := &t.sq[0]
		s.HeadStarted, s.HeadOp, s.HeadFirst, s.HeadLast, s.HeadLength = true, w.wr.Opcode, w.firstPSN, w.lastPSN, w.length
		s.HeadSent = w.sentOff
		if w.wr.Opcode == ibv.WRRDMARead {
			s.HeadSent = w.readDone
		}
	}
	if !t.timerAt.IsZero() {
		s.TimerIn = max(t.timerAt.Sub(now), time.Nanosecond)
	}
	if !t.rnrAt.IsZero() {
		s.RNRWaitIn = max(t.rnrAt.Sub(now), time.Nanosecond)
	}
	switch t.respOp {
	case respSend:
		s.InMessage = "SEND"
	case respWrite:
		s.InMessage = "WRITE"
	}
	return s
}
