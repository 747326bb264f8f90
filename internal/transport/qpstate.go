// The state changes the engine makes to a QP, whose transport state is
// queue.Transport: Modify's effects, the error state and the flush of
// the queues.

package transport

import (
	"net"
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// modify applies a validated Modify to qp, served by e: a control
// operation, so e is between two steps.
func (d *NIC) modify(e *engine, qp *queue.QP, a ibv.QPAttr, mask ibv.AttrMask, next ibv.QPState, dmac net.HardwareAddr) {
	t := &qp.Transport
	e.fastTakeOver(qp)
	defer e.fastHandBack(qp, true)
	prev := t.State
	if qp.QPType == ibv.QPTypeUD {
		// Datagrams leave from one port per QP (rxe's) and are one packet
		// of up to the port's MTU; each names its destination itself.
		t.SrcPort, t.MTU = wire.UDSourcePort(qp.Number), d.cfg.ActiveMTU
		copy(t.SMAC[:], d.cfg.MAC)
	}
	if mask&ibv.AttrEnSQDAsyncNotify != 0 {
		t.Attr.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&ibv.AttrAccessFlags != 0 {
		t.Attr.AccessFlags = a.AccessFlags
	}
	if mask&ibv.AttrQKey != 0 {
		t.Attr.QKey = a.QKey
	}
	if mask&ibv.AttrAV != 0 {
		t.Attr.AH = a.AH
		copy(t.DMAC[:], dmac)
		copy(t.SMAC[:], d.cfg.MAC)
		t.SIP = queue.GIDAddr(d.cfg.GIDs[a.AH.SGIDIndex])
		t.DIP = queue.GIDAddr(a.AH.DGID)
		t.V6 = !t.DIP.Is4()
	}
	if mask&ibv.AttrPathMTU != 0 {
		t.Attr.PathMTU = a.PathMTU
		t.MTU = a.PathMTU.Bytes()
	}
	if mask&ibv.AttrTimeout != 0 {
		t.Attr.Timeout = a.Timeout
	}
	if mask&ibv.AttrRetryCnt != 0 {
		t.Attr.RetryCnt, t.RetryLeft = a.RetryCnt, a.RetryCnt
	}
	if mask&ibv.AttrRNRRetry != 0 {
		t.Attr.RNRRetry, t.RNRLeft = a.RNRRetry, a.RNRRetry
	}
	if mask&ibv.AttrRQPSN != 0 {
		t.Attr.RQPSN, t.EPSN = a.RQPSN, a.RQPSN
	}
	if mask&ibv.AttrSQPSN != 0 {
		t.Attr.SQPSN, t.ReqPSN, t.NextPSN, t.CompPSN, t.SentEnd = a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN
		t.AckedReq = (a.SQPSN - 1) & 0xffffff
	}
	if mask&ibv.AttrMaxQPRdAtomic != 0 {
		t.Attr.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&ibv.AttrMaxDestRdAtomic != 0 {
		t.Attr.MaxDestRdAtomic = a.MaxDestRdAtomic
		t.Res = make([]queue.RespResource, max(1, roundPow2(int(a.MaxDestRdAtomic))))
	}
	if mask&ibv.AttrMinRNRTimer != 0 {
		t.Attr.MinRNRTimer = a.MinRNRTimer
	}
	if mask&ibv.AttrDestQPN != 0 {
		t.Attr.DestQPN = a.DestQPN
	}
	if mask&(ibv.AttrAV|ibv.AttrDestQPN) != 0 {
		t.SrcPort = wire.UDPSourcePort(t.Attr.AH.FlowLabel, qp.Number, t.Attr.DestQPN)
	}
	switch next {
	case ibv.StateReset:
		t.Reset(qp)
		qp.PostMu.Lock()
		qp.PostedSend, qp.PostedRecv = qp.PostedSend[:0], qp.PostedRecv[:0]
		qp.SQUsed.Store(0)
		qp.RQUsed.Store(0)
		qp.PostMu.Unlock()
	case ibv.StateErr:
		t.State = ibv.StateErr
		t.Draining, t.FailAfterReplies = false, false
		// A QP in the error state sends nothing: the queued READ
		// responses would keep reading application memory after Modify
		// returned.
		t.DropReplies()
		t.DropHeld()
		qp.StateMirror.Store(uint32(ibv.StateErr))
		e.takePosts(qp)
		e.flushQueues(qp)
		return
	}
	t.State = next
	qp.StateMirror.Store(uint32(next))
	switch {
	case prev == ibv.StateRTS && next == ibv.StateSQD:
		// Drain: the WQEs already started finish, then EventSQDrained.
		t.Draining = true
		e.checkDrained(qp)
	case prev == ibv.StateSQD && next == ibv.StateRTS && len(t.SQ) > 0:
		e.activate(qp)
	}
}

func roundPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// toError moves a QP to the error state and flushes its queues.
func (e *engine) toError(qp *queue.QP) {
	if qp.Transport.State == ibv.StateErr {
		return
	}
	e.fastTakeOver(qp)
	qp.Transport.State = ibv.StateErr
	qp.Transport.Draining, qp.Transport.FailAfterReplies = false, false
	qp.Transport.DropReplies()
	qp.Transport.DropHeld()
	qp.StateMirror.Store(uint32(ibv.StateErr))
	e.flushQueues(qp)
}

// flushQueues completes every outstanding work request with WR_FLUSH_ERR
// (always, signaled or not), as a QP in the error state does.
func (e *engine) flushQueues(qp *queue.QP) {
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
	t.TimerAt, t.RNRAt = time.Time{}, time.Time{}
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
func (e *engine) fatal(qp *queue.QP) {
	if qp.Transport.State == ibv.StateErr {
		return
	}
	e.toError(qp)
	e.events.Post(queue.Event{Type: ibv.EventQPFatal, QP: qp})
}
