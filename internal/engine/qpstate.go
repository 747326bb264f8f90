// The state changes the engine makes to a QP: the error state and the
// flush of the queues.

package engine

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// ToError moves a QP to the error state and flushes its queues.
func (e *Engine) toError(qp *queue.QP) {
	if qp.Transport.State == ibv.StateErr {
		return
	}
	e.FastTakeOver(qp)
	qp.Transport.State = ibv.StateErr
	qp.Transport.Draining, qp.Transport.FailAfterReplies = false, false
	qp.Transport.DropReplies()
	qp.Transport.DropHeld()
	qp.StateMirror.Store(uint32(ibv.StateErr))
	e.FlushQueues(qp)
}

// FlushQueues completes every outstanding work request with WR_FLUSH_ERR
// (always, signaled or not), as a QP in the error state does.
func (e *Engine) FlushQueues(qp *queue.QP) {
	t := &qp.Transport
	for len(t.SQ) > 0 {
		e.retire(qp, ibv.WCWRFlushErr)
	}
	if t.Recv.Active {
		qp.RecvRetired()
		qp.RecvCQ.Push(ibv.WorkCompletion{WRID: t.Recv.WR.ID, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPNum: qp.Number}, false)
	}
	for _, r := range t.RQ {
		qp.RQUsed.Add(-1)
		qp.FreeSharedSlots()
		qp.RecvCQ.Push(ibv.WorkCompletion{WRID: r.ID, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPNum: qp.Number}, false)
	}
	t.RQ = t.RQ[:0]
	t.TimerAt, t.RNRAt, t.AskAt = time.Time{}, time.Time{}, time.Time{}
	t.ReqIdx, t.RdAtomicOut = 0, 0
	t.Recv.Reset()
	t.RespOp = queue.RespNone
}

// fatal moves a QP to the error state on a transport error that no
// completion of its own send queue reports (a request the responder
// rejected, a CQ overflow) and raises EventQPFatal, once per transition.
// Errors reported by an error completion (a NAK received, retries
// exhausted, a local protection error) move the QP to the error state
// without an event, as ibverbs devices report them through the CQ.
func (e *Engine) fatal(qp *queue.QP) {
	if qp.Transport.State == ibv.StateErr {
		return
	}
	e.toError(qp)
	e.Events.Post(queue.Event{Type: ibv.EventQPFatal, QP: qp})
}
