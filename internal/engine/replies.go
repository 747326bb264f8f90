package engine

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// replyRoom reports whether qp may send one more response in this step,
// and counts it if so.
func (e *Engine) replyRoom(qp *queue.QP) bool {
	t := &qp.Transport
	if t.ReplyStep != e.steps {
		t.ReplyStep, t.ReplySent = e.steps, 0
	}
	if t.ReplySent >= queue.ReplyBudget {
		return false
	}
	t.ReplySent++
	return true
}

// readRoom is replyRoom for a READ response packet, which also waits for
// the QP's pace (pacing.go).
func (e *Engine) readRoom(qp *queue.QP) bool {
	if !e.replyRoom(qp) {
		return false
	}
	if !e.paceAllows(qp) {
		qp.Transport.ReplySent--
		return false
	}
	return true
}

// respond sends an acknowledgement (ACK, NAK or atomic ACK) now, or queues
// it behind the responses already waiting or when the step's budget is
// spent.
func (e *Engine) respond(qp *queue.QP, r queue.PendingReply) {
	if !qp.Transport.Replying() && e.replyRoom(qp) {
		e.sendAcknowledge(qp, &r)
		return
	}
	e.queueReply(qp, r)
}

// startRead sends the READ reply of res from PSN from, as much as the
// step's budget allows, and queues the rest.
func (e *Engine) startRead(qp *queue.QP, res *queue.RespResource, from uint32, replay bool) {
	r := queue.PendingReply{Read: true, Res: *res, Next: from, MSN: qp.Transport.MSN, Replay: replay}
	if !qp.Transport.Replying() {
		for e.readRoom(qp) {
			if e.readPacket(qp, &r) {
				return
			}
		}
	}
	e.queueReply(qp, r)
}

// queueReply appends r to qp's replies, which the steps then send.
func (e *Engine) queueReply(qp *queue.QP, r queue.PendingReply) {
	t := &qp.Transport
	if len(t.Replies)-t.ReplyHead >= queue.MaxQueuedReplies {
		e.Counters.DroppedReplies++
		return
	}
	t.Replies = append(t.Replies, r)
	e.Activate(qp)
}

// pumpReplies sends qp's queued replies, oldest first, until none is left
// or the QP has used its budget for this step.
func (e *Engine) pumpReplies(qp *queue.QP) bool {
	t := &qp.Transport
	sent := false
	for t.Replying() {
		r := &t.Replies[t.ReplyHead]
		if r.Read && !e.readRoom(qp) || !r.Read && !e.replyRoom(qp) {
			break
		}
		sent = true
		if r.Read && !e.readPacket(qp, r) {
			continue
		}
		if !r.Read {
			e.sendAcknowledge(qp, r)
		}
		*r = queue.PendingReply{}
		t.ReplyHead++
	}
	if !t.Replying() {
		t.Replies, t.ReplyHead = t.Replies[:0], 0
		if t.FailAfterReplies {
			e.fatal(qp) // the NAK that waited behind them is out
		}
	}
	return sent
}

// sendAcknowledge sends an ACK, NAK or atomic ACK.
func (e *Engine) sendAcknowledge(qp *queue.QP, r *queue.PendingReply) {
	pkt := e.header(qp, r.Op, r.PSN, false)
	pkt.AETH = wire.AETH{Syndrome: r.Syndrome, MSN: r.MSN}
	if r.Op == wire.RCAtomicAck {
		pkt.AtomicAck = r.Orig
	}
	e.send(0, nil)
}

// readPacket sends the next packet of a READ reply and reports whether it
// was the last (or the reply ended because its window was revoked).
func (e *Engine) readPacket(qp *queue.QP, r *queue.PendingReply) bool {
	t := &qp.Transport
	res := &r.Res
	mtu := uint32(t.MTU)
	psn := r.Next
	off := ((psn - res.FirstPSN) & 0xffffff) * mtu
	n := min(mtu, res.Length-off)
	first, last := psn == res.FirstPSN, off+n == res.Length
	op := queue.SegmentOpcode(first, last, wire.RCReadResponseOnly, wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast)
	pkt := e.header(qp, op, psn, false)
	pkt.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(ackCreditsInval), MSN: r.MSN}
	var src [1]queue.Span
	if n > 0 {
		mr := res.MR
		if IsMWKey(res.RKey) {
			// A window may be invalidated, deallocated or rebound while
			// its READ's response is being sent: every packet checks the
			// key again (rxe's read_reply rechecks it per slice). A
			// revoked reply ends here, unsent; the requester asks again
			// and its duplicate READ is refused (duplicate).
			var ok bool
			if mr, ok = e.checkMWAccess(qp, res.RKey, res.VA+uint64(off), n, ibv.AccessRemoteRead); !ok {
				return true
			}
		}
		src[0], _ = spanOf(mr, res.VA+uint64(off), n)
	}
	e.send(int(n), func(dst []byte) { queue.Gather(dst, src[:], 0, &e.reads) })
	if r.Replay {
		e.Counters.RetransmittedPkts++
	}
	r.Next = (psn + 1) & 0xffffff
	return last
}
