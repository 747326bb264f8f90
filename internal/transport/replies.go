package transport

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// The responder's replies leave in request order (IBTA: responses in PSN
// order), and no QP sends more than replyBudget of them per engine step. A
// READ asks for up to 2 GiB, millions of packets at PMTU 256, and a
// requester that goes back asks again; sent in one go, one such request
// would hold the engine while every other QP, and every timer, waits. So a
// reply that does not fit the step's budget is queued and resumed on the
// next steps, round robin with the other QPs, and every response behind it
// (ACK, NAK, atomic ACK, further READ data) queues behind it. rxe's
// responder works the same way: one READ reply at a time, in slices, with
// the later requests waiting behind it. A QP whose path has lost a READ
// response's tail also waits for its pace (pacing.go).

const (
	// replyBudget is the packets one QP's responder sends per engine step.
	replyBudget = 64
	// maxQueuedReplies bounds a QP's queue. A requester has at most
	// max_dest_rd_atomic READs and atomics outstanding, plus ACKs and a
	// NAK between them; beyond that only duplicates (a requester going
	// back again and again, or a forger) arrive. A reply that finds the
	// queue full is dropped and counted: a duplicate READ as if no
	// resource held it, an ACK covered by the next, cumulative one (or,
	// failing that, by the requester's timer).
	maxQueuedReplies = 2*ibv.MaxRdAtomic + 8
)

// pendingReply is one queued response: the rest of a READ reply, or an
// acknowledgement (ACK, NAK or atomic ACK) to send after what precedes it.
type pendingReply struct {
	read bool
	res  respResource // READ: a copy, as resources are reused meanwhile
	next uint32       // READ: the next PSN to send
	// replay: the READ's response is sent again (counted as retransmitted).
	replay bool
	// Acknowledgements.
	op       wire.Opcode // RCAck or RCAtomicAck
	psn      uint32
	syndrome uint8
	msn      uint32
	orig     uint64
}

// replying reports whether responses are waiting: a new one must queue.
func (t *qpTransport) replying() bool { return t.replyHead < len(t.replies) }

// replyRoom reports whether qp may send one more response in this step,
// and counts it if so.
func (e *engine) replyRoom(qp *QP) bool {
	t := &qp.t
	if t.replyStep != e.steps {
		t.replyStep, t.replySent = e.steps, 0
	}
	if t.replySent >= replyBudget {
		return false
	}
	t.replySent++
	return true
}

// readRoom is replyRoom for a READ response packet, which also waits for
// the QP's pace (pacing.go).
func (e *engine) readRoom(qp *QP) bool {
	if !e.replyRoom(qp) {
		return false
	}
	if !e.paceAllows(qp) {
		qp.t.replySent--
		return false
	}
	return true
}

// respond sends an acknowledgement (ACK, NAK or atomic ACK) now, or queues
// it behind the responses already waiting or when the step's budget is
// spent.
func (e *engine) respond(qp *QP, r pendingReply) {
	if !qp.t.replying() && e.replyRoom(qp) {
		e.sendAcknowledge(qp, &r)
		return
	}
	e.queueReply(qp, r)
}

// startRead sends the READ reply of res from PSN from, as much as the
// step's budget allows, and queues the rest.
func (e *engine) startRead(qp *QP, res *respResource, from uint32, replay bool) {
	r := pendingReply{read: true, res: *res, next: from, msn: qp.t.msn, replay: replay}
	if !qp.t.replying() {
		for e.readRoom(qp) {
			if e.readPacket(qp, &r) {
				return
			}
		}
	}
	e.queueReply(qp, r)
}

// queueReply appends r to qp's replies, which the steps then send.
func (e *engine) queueReply(qp *QP, r pendingReply) {
	t := &qp.t
	if len(t.replies)-t.replyHead >= maxQueuedReplies {
		e.counters.DroppedReplies++
		return
	}
	t.replies = append(t.replies, r)
	e.activate(qp)
}

// pumpReplies sends qp's queued replies, oldest first, until none is left
// or the QP has used its budget for this step.
func (e *engine) pumpReplies(qp *QP) bool {
	t := &qp.t
	sent := false
	for t.replying() {
		r := &t.replies[t.replyHead]
		if r.read && !e.readRoom(qp) || !r.read && !e.replyRoom(qp) {
			break
		}
		sent = true
		if r.read && !e.readPacket(qp, r) {
			continue
		}
		if !r.read {
			e.sendAcknowledge(qp, r)
		}
		*r = pendingReply{}
		t.replyHead++
	}
	if !t.replying() {
		t.replies, t.replyHead = t.replies[:0], 0
		if t.failAfterReplies {
			e.fatal(qp) // the NAK that waited behind them is out
		}
	}
	return sent
}

// sendAcknowledge sends an ACK, NAK or atomic ACK.
func (e *engine) sendAcknowledge(qp *QP, r *pendingReply) {
	pkt := e.header(qp, r.op, r.psn, false)
	pkt.AETH = wire.AETH{Syndrome: r.syndrome, MSN: r.msn}
	if r.op == wire.RCAtomicAck {
		pkt.AtomicAck = r.orig
	}
	e.send(0, nil)
}

// readPacket sends the next packet of a READ reply and reports whether it
// was the last (or the reply ended because its window was revoked).
func (e *engine) readPacket(qp *QP, r *pendingReply) bool {
	t := &qp.t
	res := &r.res
	mtu := uint32(t.mtu)
	psn := r.next
	off := ((psn - res.firstPSN) & 0xffffff) * mtu
	n := min(mtu, res.length-off)
	first, last := psn == res.firstPSN, off+n == res.length
	op := segmentOpcode(first, last, wire.RCReadResponseOnly, wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast)
	pkt := e.header(qp, op, psn, false)
	pkt.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(ackCreditsInval), MSN: r.msn}
	var src [1]span
	if n > 0 {
		mr := res.mr
		if isMWKey(res.rkey) {
			// A window may be invalidated, deallocated or rebound while
			// its READ's response is being sent: every packet checks the
			// key again (rxe's read_reply rechecks it per slice). A
			// revoked reply ends here, unsent; the requester asks again
			// and its duplicate READ is refused (duplicate).
			var ok bool
			if mr, ok = e.checkMWAccess(qp, res.rkey, res.va+uint64(off), n, ibv.AccessRemoteRead); !ok {
				return true
			}
		}
		src[0], _ = mr.span(res.va+uint64(off), n)
	}
	e.send(int(n), func(dst []byte) { gather(dst, src[:], 0, &e.reads) })
	if r.replay {
		e.counters.RetransmittedPkts++
	}
	r.next = (psn + 1) & 0xffffff
	return last
}

// dropReplies forgets qp's queued replies (the QP is leaving the states
// that send them).
func (t *qpTransport) dropReplies() {
	clear(t.replies)
	t.replies, t.replyHead = t.replies[:0], 0
}

// revokeReplies drops the queued READ replies that read mr, just
// deregistered: no packet reads it again, and a requester that asks again
// is told the key is invalid.
func (e *objects) revokeReplies(mr *MR) {
	for _, qp := range e.live {
		t := &qp.t
		keep := t.replies[:t.replyHead]
		for _, r := range t.replies[t.replyHead:] {
			if !r.read || r.res.mr != mr {
				keep = append(keep, r)
			}
		}
		clear(t.replies[len(keep):])
		t.replies = keep
	}
}
