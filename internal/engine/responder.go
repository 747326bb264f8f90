package engine

import (
	"encoding/binary"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// respState is a state of the responder's handling of one request, as
// rxe_resp.c's enum resp_states.
type respState uint8

const (
	respstCheckPSN     respState = iota // in sequence, a gap, or a duplicate?
	respstOutOfSeq                      // RC: a PSN past the expected one
	respstDuplicate                     // RC: a PSN already executed
	respstResync                        // UC: a gap drops the message in progress
	respstCheckOpSeq                    // the opcode continues the message in progress, or starts one
	respstCheckOpValid                  // the QP grants the access the opcode needs
	respstCheckLength                   // FIRST/MIDDLE carry exactly one path MTU
	respstExecute                       // SEND, WRITE, READ or atomic
	respstErrInvalid                    // NAK invalid request (RC: and the QP to error)
	respstDone
)

// reception is one request on its way through the responder's states.
type reception struct {
	e      *Engine
	qp     *queue.QP
	t      *queue.Transport
	p      *wire.Packet
	info   wire.OpInfo
	status ibv.WCStatus // of the receive in progress, when respstErrInvalid fails it
}

// responder handles a request packet, as rxe_resp.c: one method per state,
// the loop dispatching until respstDone.
func (e *Engine) responder(qp *queue.QP, p *wire.Packet, info wire.OpInfo) {
	if qp.Transport.FailAfterReplies {
		return // as good as in the error state (RespError)
	}
	if h := &qp.Transport.Held; h.Watch {
		// The request after a fill: a go-back-N requester resends the
		// PSN after the filling packet (ooo.go).
		h.Watch, h.Selective = false, p.BTH.PSN != h.AfterFill
	}
	before := qp.Transport.EPSN
	e.respond1(qp, p, info)
	if qp.Transport.Held.N > 0 && qp.Transport.EPSN != before {
		e.drainHeld(qp) // it filled a hole (ooo.go)
	}
}

// respond1 runs one request through the responder's states.
func (e *Engine) respond1(qp *queue.QP, p *wire.Packet, info wire.OpInfo) {
	r := reception{e: e, qp: qp, t: &qp.Transport, p: p, info: info}
	for s := respstCheckPSN; s != respstDone; {
		s = r.step(s)
	}
}

// step runs one state and returns the next.
func (r *reception) step(s respState) respState {
	switch s {
	case respstCheckPSN:
		return r.checkPSN()
	case respstOutOfSeq:
		return r.outOfSeq()
	case respstDuplicate:
		r.e.Counters.DuplicateRequest++
		r.e.fastDuplicate(r.qp, r.p.BTH.PSN) // the program's ACK lost? (fastpath.go)
		r.e.duplicate(r.qp, r.p, r.info)
		return respstDone
	case respstResync:
		return r.resync()
	case respstCheckOpSeq:
		return r.checkOpSeq()
	case respstCheckOpValid:
		return r.checkOpValid()
	case respstCheckLength:
		return r.checkLength()
	case respstExecute:
		r.execute()
		return respstDone
	case respstErrInvalid:
		r.e.respError(r.qp, r.p.BTH.PSN, wire.NAKInvalidRequest, r.status)
		return respstDone
	}
	return respstDone
}

// checkPSN: the expected PSN goes on; RC sorts the rest into duplicates
// and gaps, UC resynchronises.
func (r *reception) checkPSN() respState {
	d := queue.PSNCmp(r.p.BTH.PSN, r.t.EPSN)
	switch {
	case d == 0:
		r.t.NAKSent = false
		return respstCheckOpSeq
	case r.qp.QPType != ibv.QPTypeRC:
		return respstResync
	case d > 0:
		return respstOutOfSeq
	}
	return respstDuplicate
}

// resync: UC lost a packet, and with it its message. The receive WQE the
// lost message had taken goes back to the head of its queue, as rxe rewinds
// it; a packet that starts a message starts over from its PSN.
func (r *reception) resync() respState {
	r.e.abortRecv(r.qp)
	r.t.RespOp = queue.RespNone
	if r.info.Flags&wire.FlagStart == 0 {
		return respstDone
	}
	r.t.EPSN = r.p.BTH.PSN
	r.t.NAKSent = false
	return respstCheckOpSeq
}

// outOfSeq: one NAK per gap, and one more each time the requester is seen
// to go back to or before the packets already seen: its resent packet at
// EPSN was lost as well, and without a NAK only its transport timer would
// tell it. The packet is held until the hole fills (ooo.go).
func (r *reception) outOfSeq() respState {
	t, psn := r.t, r.p.BTH.PSN
	r.e.Counters.OutOfSeqRequest++
	if !t.NAKSent || queue.PSNCmp(psn, t.NAKMax) <= 0 {
		t.NAKSent = true
		r.e.sendAck(r.qp, t.EPSN, wire.NAKSyndrome(wire.NAKPSNSequenceError))
	}
	t.NAKMax = psn
	r.e.hold(r.qp, r.p) // executed once the hole fills (ooo.go)
	return respstDone
}

// checkOpSeq (rxe's check_op_seq): a MIDDLE or LAST continues the message
// in progress, of its kind; anything else starts one.
func (r *reception) checkOpSeq() respState {
	f := r.info.Flags
	ok := f&wire.FlagStart == 0
	switch r.t.RespOp {
	case queue.RespSend:
		ok = ok && f&wire.FlagSend != 0
	case queue.RespWrite:
		ok = ok && f&wire.FlagWrite != 0
	default:
		ok = !ok
	}
	if !ok {
		r.status = ibv.WCRemInvReqErr
		return respstErrInvalid
	}
	return respstCheckOpValid
}

// checkOpValid (rxe's check_op_valid): the QP's access flags allow what
// the opcode does.
func (r *reception) checkOpValid() respState {
	f := r.info.Flags
	need := ibv.Access(0)
	switch {
	case f&wire.FlagWrite != 0:
		need = ibv.AccessRemoteWrite
	case f&wire.FlagRead != 0:
		need = ibv.AccessRemoteRead
	case f&wire.FlagAtomic != 0:
		need = ibv.AccessRemoteAtomic
	}
	if r.t.Attr.AccessFlags&need != need {
		return respstErrInvalid
	}
	return respstCheckLength
}

// checkLength (rxe's check_length): FIRST and MIDDLE carry exactly one path
// MTU, LAST and ONLY at most one.
func (r *reception) checkLength() respState {
	n, mtu := queue.PayloadLen(r.p), uint32(r.t.MTU)
	if n > mtu || (r.info.Flags&wire.FlagEnd == 0 && n != mtu) {
		r.status = ibv.WCRemInvReqErr
		return respstErrInvalid
	}
	return respstExecute
}

// execute runs the request; the rkey, resource and receive checks that
// depend on the operation happen there, as in rxe's execute.
func (r *reception) execute() {
	f := r.info.Flags
	switch {
	case f&wire.FlagSend != 0:
		r.e.execSend(r.qp, r.p, r.info)
	case f&wire.FlagWrite != 0:
		r.e.execWrite(r.qp, r.p, r.info)
	case f&wire.FlagRead != 0:
		r.e.execRead(r.qp, r.p)
	case f&wire.FlagAtomic != 0:
		r.e.execAtomic(r.qp, r.p)
	}
}

// takeRecv starts a receive WQE; false (after an RNR NAK for RC) if none is posted.
func (e *Engine) takeRecv(qp *queue.QP, psn uint32) bool {
	t := &qp.Transport
	var wr queue.RecvWQE
	ok := false
	if qp.SRQ != nil {
		wr, ok = e.takeSRQ(qp.SRQ)
	} else if len(t.RQ) > 0 {
		wr, ok = t.RQ[0], true
		t.RQ = t.RQ[1:]
	}
	if !ok {
		if qp.QPType == ibv.QPTypeRC {
			e.Counters.SendRNRErr++
			e.sendAck(qp, psn, wire.RNRNAKSyndrome(t.Attr.MinRNRTimer))
		}
		return false
	}
	t.Recv.Reset()
	t.Recv.Active, t.Recv.WR = true, wr
	// An SRQ's WQEs name memory of the SRQ's protection domain, which
	// need not be the QP's (ibv_create_srq takes its own PD).
	pd := qp.PD
	if qp.SRQ != nil {
		pd = qp.SRQ.PD
	}
	var one [1]ibv.SGE
	for _, s := range wr.Sges(&one) {
		mr := e.LookupMR(s.LKey)
		b, ok := queue.Span{}, false
		if mr != nil && mr.PD() == pd && mr.Access()&ibv.AccessLocalWrite != 0 {
			b, ok = spanOf(mr, s.Addr, s.Length)
		}
		if !ok {
			// A malformed receive WQE (class A, as rxe): it completes with
			// LOC_QP_OP_ERR and the requester gets NAK remote operational
			// error (REM_OP_ERR).
			e.completeRecv(qp, ibv.WCLocQPOpErr, 0, 0)
			e.respError(qp, psn, wire.NAKRemoteOperationalError, 0)
			return false
		}
		t.Recv.Segs = append(t.Recv.Segs, b)
	}
	return true
}

// completeRecv retires the active receive WQE.
func (e *Engine) completeRecv(qp *queue.QP, status ibv.WCStatus, op ibv.WCOpcode, flags ibv.WCFlags) bool {
	t := &qp.Transport
	wc := ibv.WorkCompletion{WRID: t.Recv.WR.ID, Status: status, Opcode: op, QPNum: qp.Number, SrcQP: t.Attr.DestQPN}
	if qp.QPType == ibv.QPTypeUD {
		wc.SrcQP = e.rx.DETH.SrcQP
	}
	if status == ibv.WCSuccess {
		wc.ByteLen = t.Recv.Written
		wc.Flags = flags | ibv.WCWithGRH
		if qp.QPType == ibv.QPTypeUD {
			wc.IPVersion = 4
			if e.rx.IP.V6 {
				wc.IPVersion = 6
			}
		}
		wc.ImmData = e.rx.ImmDt
		if flags&ibv.WCWithInvalidate != 0 {
			wc.InvalidatedKey = e.rx.IETH
		}
		if op == ibv.WCRecvRDMAWithImm {
			wc.ByteLen = t.Write.Total
		}
	}
	t.Recv.Reset()
	qp.RecvRetired()
	e.Counters.RDMARecvs++
	e.pending.Flush() // the data before its completion
	if !qp.RecvCQ.Push(wc, e.rx.BTH.SE) {
		e.fatal(qp)
		return false
	}
	return true
}

func (e *Engine) execSend(qp *queue.QP, p *wire.Packet, info wire.OpInfo) {
	t := &qp.Transport
	psn := p.BTH.PSN
	if info.Flags&wire.FlagStart != 0 && !e.takeRecv(qp, psn) {
		return
	}
	if !queue.ScatterPayload(t.Recv.Segs, t.Recv.Written, p, &e.pending) {
		// The message does not fit the receive buffers.
		e.completeRecvErr(qp, ibv.WCLocLenErr)
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	t.Recv.Written += queue.PayloadLen(p)
	t.EPSN = (psn + 1) & 0xffffff
	if info.Flags&wire.FlagEnd == 0 {
		t.RespOp = queue.RespSend
		e.ackIfAsked(qp, p)
		return
	}
	t.RespOp = queue.RespNone
	flags := ibv.WCFlags(0)
	if info.Headers&wire.HasImmDt != 0 {
		flags |= ibv.WCWithImm
	}
	if info.Headers&wire.HasIETH != 0 {
		if !e.invalidateRKey(qp, p.IETH) {
			// As rxe (class J) for a key that names no bound window: the
			// SEND is acknowledged with the MSN unchanged, then the receive
			// fails and the QP goes to the error state without a NAK.
			e.ackIfAsked(qp, p)
			e.completeRecvErr(qp, ibv.WCRemInvReqErr)
			e.fatal(qp)
			return
		}
		flags |= ibv.WCWithInvalidate
	}
	t.MSN = (t.MSN + 1) & 0xffffff
	// A receive completion that overflows the CQ moves the QP to the
	// error state and the SEND is not acknowledged (rxe's
	// RESPST_ERR_CQ_OVERFLOW).
	if e.completeRecv(qp, ibv.WCSuccess, ibv.WCRecv, flags) {
		e.ackIfAsked(qp, p)
	}
}

func (e *Engine) completeRecvErr(qp *queue.QP, status ibv.WCStatus) {
	if qp.Transport.Recv.Active {
		e.completeRecv(qp, status, ibv.WCRecv, 0)
	}
}

func (e *Engine) execWrite(qp *queue.QP, p *wire.Packet, info wire.OpInfo) {
	t := &qp.Transport
	psn := p.BTH.PSN
	if info.Flags&wire.FlagStart != 0 {
		r := p.RETH
		if r.Len > ibv.MaxMsgSize {
			e.respError(qp, psn, wire.NAKInvalidRequest, 0)
			return
		}
		t.Write = queue.WriteState{VA: r.VA, Resid: r.Len, Total: r.Len, RKey: r.RKey}
		if r.Len > 0 {
			mr, ok := e.checkRKey(qp, r.RKey, r.VA, r.Len, ibv.AccessRemoteWrite)
			if !ok {
				e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
				return
			}
			t.Write.MR = mr
		}
	}
	n := queue.PayloadLen(p)
	w := &t.Write
	if w.Revoked {
		e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
		return
	}
	last := info.Flags&wire.FlagEnd != 0
	if (last && n != w.Resid) || (!last && n >= w.Resid) {
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	if n > 0 && info.Flags&wire.FlagStart == 0 && IsMWKey(w.RKey) {
		mr, ok := e.checkMWAccess(qp, w.RKey, w.VA, n, ibv.AccessRemoteWrite)
		if !ok {
			// The window went away mid-message: the rest of the WRITE
			// fails as a WRITE naming an invalid key.
			w.MR, w.Revoked = nil, true
			e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
			return
		}
		w.MR = mr
	}
	// A WRITE with immediate needs a receive WQE before anything is written.
	if last && info.Headers&wire.HasImmDt != 0 && !e.takeRecv(qp, psn) {
		return
	}
	if n > 0 {
		dst, _ := spanOf(w.MR, w.VA, n) // inside the region: checked against RETH length
		one := [1]queue.Span{dst}
		queue.ScatterPayload(one[:], 0, p, &e.pending)
		w.VA += uint64(n)
		w.Resid -= n
	}
	t.EPSN = (psn + 1) & 0xffffff
	if !last {
		t.RespOp = queue.RespWrite
		e.ackIfAsked(qp, p)
		return
	}
	t.RespOp = queue.RespNone
	t.MSN = (t.MSN + 1) & 0xffffff
	if info.Headers&wire.HasImmDt != 0 && !e.completeRecv(qp, ibv.WCSuccess, ibv.WCRecvRDMAWithImm, ibv.WCWithImm) {
		return // the CQ overflowed: no ACK, as for a SEND
	}
	e.ackIfAsked(qp, p)
}

// checkRKey finds the region an rkey names, directly or through a memory
// window, and checks PD, rights and range.
func (e *Engine) checkRKey(qp *queue.QP, rkey uint32, va uint64, n uint32, need ibv.Access) (*memory.MR, bool) {
	if IsMWKey(rkey) {
		return e.checkMWAccess(qp, rkey, va, n, need)
	}
	mr := e.LookupMR(rkey)
	if mr == nil || mr.PD() != qp.PD || mr.Access()&need != need {
		return nil, false
	}
	if _, ok := spanOf(mr, va, n); !ok {
		return nil, false
	}
	return mr, true
}

func (e *Engine) execRead(qp *queue.QP, p *wire.Packet) {
	t := &qp.Transport
	psn := p.BTH.PSN
	r := p.RETH
	if r.Len > ibv.MaxMsgSize || t.Attr.MaxDestRdAtomic == 0 {
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	var mr *memory.MR
	if r.Len > 0 {
		var ok bool
		if mr, ok = e.checkRKey(qp, r.RKey, r.VA, r.Len, ibv.AccessRemoteRead); !ok {
			e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
			return
		}
	}
	res := e.newResource(qp)
	*res = queue.RespResource{Valid: true, FirstPSN: psn, LastPSN: (psn + t.Npkts(r.Len) - 1) & 0xffffff,
		VA: r.VA, RKey: r.RKey, Length: r.Len, MR: mr}
	t.MSN = (t.MSN + 1) & 0xffffff
	t.EPSN = (res.LastPSN + 1) & 0xffffff
	e.readReply(qp, res, psn, readNew)
}

// readKind is what a READ response answers: a new READ, a duplicate, or a
// duplicate that resumes the READ exactly where its PSN says (RETH's
// address and length those of the rest of the original), as a requester
// that lost the response's tail asks (ours, and rxe's req_retry).
type readKind uint8

const (
	readNew readKind = iota
	readDuplicate
	readResume
	readHole // a duplicate that asks exactly for a hole inside the READ (recovery.go)
)

// readReply sends the READ responses of res from PSN from on, after the
// QP's deferred ACK; what the step's budget or the QP's pace leaves is
// queued (replies.go).
func (e *Engine) readReply(qp *queue.QP, res *queue.RespResource, from uint32, kind readKind) {
	e.readStarting(qp, res, from, kind)
	e.sendDueAck(qp)
	e.startRead(qp, res, from, kind != readNew)
}

func (e *Engine) execAtomic(qp *queue.QP, p *wire.Packet) {
	t := &qp.Transport
	psn := p.BTH.PSN
	a := p.AtomicETH
	if t.Attr.MaxDestRdAtomic == 0 || a.VA%8 != 0 {
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	mr, ok := e.checkRKey(qp, a.RKey, a.VA, 8, ibv.AccessRemoteAtomic)
	if !ok {
		e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
		return
	}
	target, _ := spanOf(mr, a.VA, 8)
	e.pending.Flush() // the target may have writes queued
	// Atomics operate on the 64-bit value in the responder's byte order (rxe: host order).
	e.AtomicMu.Lock()
	var b [8]byte
	target.Read(b[:], 0, nil)
	orig := binary.LittleEndian.Uint64(b[:])
	if p.BTH.Opcode == wire.RCCompareSwap {
		if orig == a.Compare {
			binary.LittleEndian.PutUint64(b[:], a.SwapAdd)
			target.Write(b[:], 0, nil)
		}
	} else {
		binary.LittleEndian.PutUint64(b[:], orig+a.SwapAdd)
		target.Write(b[:], 0, nil)
	}
	e.AtomicMu.Unlock()
	res := e.newResource(qp)
	*res = queue.RespResource{Valid: true, Atomic: true, FirstPSN: psn, LastPSN: psn, Orig: orig}
	t.MSN = (t.MSN + 1) & 0xffffff
	t.EPSN = (psn + 1) & 0xffffff
	e.atomicAck(qp, psn, orig)
}

func (e *Engine) atomicAck(qp *queue.QP, psn uint32, orig uint64) {
	e.sendDueAck(qp)
	e.respond(qp, queue.PendingReply{Op: wire.RCAtomicAck, PSN: psn, Syndrome: wire.ACKSyndrome(ackCreditsInval), MSN: qp.Transport.MSN, Orig: orig})
}

func (e *Engine) newResource(qp *queue.QP) *queue.RespResource {
	t := &qp.Transport
	r := &t.Res[t.ResNext%len(t.Res)]
	t.ResNext++
	return r
}

// duplicate answers a request PSN the responder has already executed.
func (e *Engine) duplicate(qp *queue.QP, p *wire.Packet, info wire.OpInfo) {
	t := &qp.Transport
	psn := p.BTH.PSN
	if info.Flags&(wire.FlagRead|wire.FlagAtomic) == 0 {
		// SEND/WRITE: acknowledge the last good PSN again, never re-execute (C9-105).
		e.sendAck(qp, (t.EPSN-1)&0xffffff, wire.ACKSyndrome(ackCreditsInval))
		return
	}
	for i := range t.Res {
		r := &t.Res[i]
		if !r.Valid || queue.PSNCmp(psn, r.FirstPSN) < 0 || queue.PSNCmp(psn, r.LastPSN) > 0 {
			continue
		}
		if r.Atomic {
			if info.Flags&wire.FlagAtomic != 0 && psn == r.FirstPSN {
				e.atomicAck(qp, psn, r.Orig)
			}
			return
		}
		if info.Flags&wire.FlagRead != 0 && p.RETH.RKey == r.RKey {
			if r.Length > 0 {
				// The key may have been invalidated or deregistered since:
				// check it again, as rxe_recheck_mr.
				mr, ok := e.checkRKey(qp, r.RKey, r.VA, r.Length, ibv.AccessRemoteRead)
				if !ok {
					e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
					return
				}
				r.MR = mr
			}
			kind := readDuplicate
			off := uint64((psn-r.FirstPSN)&0xffffff) * uint64(qp.Transport.MTU)
			if p.RETH.VA == r.VA+off && uint64(p.RETH.Len)+off == uint64(r.Length) {
				kind = readResume
			} else if p.RETH.VA == r.VA+off && p.RETH.Len > 0 && uint64(p.RETH.Len)+off < uint64(r.Length) {
				kind = readHole
			}
			// Answer the range asked for, as rxe's duplicate_request
			// does: a requester that asks for one hole (recovery.go)
			// gets that hole, ended by a LAST, not the rest of the READ.
			// The data still comes from the resource, at the offset the
			// PSN gives; a length past it is cut to it.
			res := *r
			if p.RETH.Len > 0 && off+uint64(p.RETH.Len) < uint64(r.Length) {
				res.Length = uint32(off) + p.RETH.Len
				res.LastPSN = (r.FirstPSN + qp.Transport.Npkts(res.Length) - 1) & 0xffffff
			}
			e.readReply(qp, &res, psn, kind)
		}
		return
	}
	// No resource any more: drop silently (class D), as rxe.
}

// ackIfAsked acknowledges a SEND/WRITE packet that asks for it. The ACK is
// deferred to the end of the receive batch, so a burst of requests gets one
// cumulative ACK (as hardware RNICs coalesce); rxe, fed one packet at a
// time, sends one per AckReq, and so do we when packets come one by one.
func (e *Engine) ackIfAsked(qp *queue.QP, p *wire.Packet) {
	if qp.QPType != ibv.QPTypeRC {
		return
	}
	if !p.BTH.AckReq {
		e.Counters.AckDeferred++
		return
	}
	t := &qp.Transport
	if t.ACKDue {
		e.Counters.AckDeferred++
	} else {
		t.ACKDue = true
		e.acks = append(e.acks, qp)
	}
	t.ACKPSN = p.BTH.PSN
}

// sendDueAck sends qp's deferred ACK, if any. Every other response of the
// QP goes after it, so responses stay in PSN order.
func (e *Engine) sendDueAck(qp *queue.QP) {
	t := &qp.Transport
	if t.ACKDue {
		t.ACKDue = false
		n := e.nout
		e.sendAckNow(qp, t.ACKPSN, wire.ACKSyndrome(ackCreditsInval))
		if e.nout > n {
			e.nacks++
		}
	}
}

// sendDueAcks ends a receive batch: the deferred ACKs go out.
func (e *Engine) sendDueAcks() {
	for _, qp := range e.acks {
		if int(qp.Number) < len(e.Qps) && e.Qps[qp.Number] == qp {
			e.sendDueAck(qp)
		}
	}
	clear(e.acks)
	e.acks = e.acks[:0]
}

// SendAck sends an ACKNOWLEDGE (or NAK) with the syndrome and the current
// MSN, after any deferred ACK.
func (e *Engine) sendAck(qp *queue.QP, psn uint32, syndrome uint8) {
	e.sendDueAck(qp)
	e.sendAckNow(qp, psn, syndrome)
}

func (e *Engine) sendAckNow(qp *queue.QP, psn uint32, syndrome uint8) {
	e.respond(qp, queue.PendingReply{Op: wire.RCAck, PSN: psn, Syndrome: syndrome, MSN: qp.Transport.MSN})
}

// RespError is a class C/D error: RC sends the NAK and the QP goes to the
// error state; the receive in progress fails with status (if non-zero).
// UC drops the message.
func (e *Engine) respError(qp *queue.QP, psn uint32, code wire.NAKCode, status ibv.WCStatus) {
	t := &qp.Transport
	if qp.QPType != ibv.QPTypeRC {
		t.RespOp = queue.RespNone
		e.abortRecv(qp)
		return
	}
	if status != 0 && t.Recv.Active {
		e.completeRecv(qp, status, ibv.WCRecv, 0)
	}
	e.sendAck(qp, psn, wire.NAKSyndrome(code))
	if t.Replying() {
		// The NAK waits behind replies to earlier requests (a READ's
		// response, paced or beyond this step's budget). The error state
		// drops what is queued, so it waits for them: rxe sends a READ's
		// whole response before it takes the next request. Entering it
		// now would drop the NAK too, and the requester would retry into
		// a QP that no longer answers: RETRY_EXC_ERR, not the error meant.
		t.FailAfterReplies = true
		return
	}
	e.fatal(qp)
}

// AbortRecv gives the receive WQE a dropped UC message had taken back to
// the head of its queue (RQ or SRQ), unconsumed.
func (e *Engine) abortRecv(qp *queue.QP) {
	t := &qp.Transport
	if !t.Recv.Active {
		return
	}
	if qp.SRQ != nil {
		qp.SRQ.Mu.Lock()
		qp.SRQ.Q = append([]queue.RecvWQE{t.Recv.WR}, qp.SRQ.Q...)
		qp.SRQ.Mu.Unlock()
	} else {
		t.RQ = append([]queue.RecvWQE{t.Recv.WR}, t.RQ...)
	}
	t.Recv.Reset()
}
