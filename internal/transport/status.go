package transport

import (
	"time"

	"github.com/xdproce/xdproce/internal/engine"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// status snapshots qp, served by e, which is between two steps.
func status(e *engine.Engine, qp *queue.QP, now time.Time) ibv.QPStatus {
	t := &qp.Transport
	s := ibv.QPStatus{
		QPN: qp.Number, DestQPN: t.Attr.DestQPN, Type: qp.QPType, State: t.State, Peer: t.Attr.AH.DGID.Unmap(), Queue: e.Index,
		SendQueued: len(t.SQ), ReqPSN: t.ReqPSN, NextPSN: t.NextPSN, CompPSN: t.CompPSN, Window: t.Window(),
		Timeouts: t.Timeouts, Retrying: t.StartedRetry, Probing: t.Probing,
		EPSN: t.EPSN, MSN: t.MSN, RecvQueued: len(t.RQ), NAKSent: t.NAKSent,
	}
	if len(t.SQ) > 0 && t.SQ[0].Started {
		w := &t.SQ[0]
		s.HeadStarted, s.HeadOp, s.HeadFirst, s.HeadLast, s.HeadLength = true, w.WR.Opcode, w.FirstPSN, w.LastPSN, w.Length
		s.HeadSent = w.SentOff
		if w.WR.Opcode == ibv.WRRDMARead {
			s.HeadSent = w.ReadDone
		}
	}
	if !t.TimerAt.IsZero() {
		s.TimerIn = max(t.TimerAt.Sub(now), time.Nanosecond)
	}
	if !t.RNRAt.IsZero() {
		s.RNRWaitIn = max(t.RNRAt.Sub(now), time.Nanosecond)
	}
	switch t.RespOp {
	case queue.RespSend:
		s.InMessage = "SEND"
	case queue.RespWrite:
		s.InMessage = "WRITE"
	}
	return s
}
