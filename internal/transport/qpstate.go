// Modify's effects on a QP's transport state (queue.Transport), made as
// a control operation between two of its engine's steps.

package transport

import (
	"net"

	"github.com/xdproce/xdproce/internal/engine"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// modify applies a validated Modify to qp, served by e: a control
// operation, so e is between two steps.
func (d *NIC) modify(e *engine.Engine, qp *queue.QP, a ibv.QPAttr, mask ibv.AttrMask, next ibv.QPState, dmac net.HardwareAddr) {
	t := &qp.Transport
	e.FastTakeOver(qp)
	defer e.FastHandBack(qp, true)
	prev := t.State
	if qp.QPType == ibv.QPTypeUD {
		// Datagrams leave from one port per QP (rxe's) and are one packet
		// of up to the port's MTU; each names its destination itself.
		t.SrcPort, t.MTU = wire.UDSourcePort(qp.Number), d.dev.Cfg.ActiveMTU
		copy(t.SMAC[:], d.dev.Cfg.MAC)
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
		copy(t.SMAC[:], d.dev.Cfg.MAC)
		t.SIP = queue.GIDAddr(d.dev.Cfg.GIDs[a.AH.SGIDIndex])
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
		e.TakePosts(qp)
		e.FlushQueues(qp)
		return
	}
	t.State = next
	qp.StateMirror.Store(uint32(next))
	switch {
	case prev == ibv.StateRTS && next == ibv.StateSQD:
		// Drain: the WQEs already started finish, then EventSQDrained.
		t.Draining = true
		e.CheckDrained(qp)
	case prev == ibv.StateSQD && next == ibv.StateRTS && len(t.SQ) > 0:
		e.Activate(qp)
	}
}

func roundPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
