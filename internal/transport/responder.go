package transport

import (
	"encoding/binary"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// respOp is the message the responder is in the middle of.
type respOp uint8

const (
	respNone respOp = iota
	respSend
	respWrite
)

// recvState is the receive WQE a multi-packet SEND is filling.
type recvState struct {
	active  bool
	wr      recvWQE
	segs    []span
	written uint32
}

// reset ends the receive, keeping the segment slice's capacity so that the
// next one allocates nothing.
func (r *recvState) reset() {
	clear(r.segs)
	*r = recvState{segs: r.segs[:0]}
}

// writeState is where a multi-packet RDMA WRITE is going.
type writeState struct {
	mr    *MR
	va    uint64
	resid uint32
	total uint32
	// rkey is the key the WRITE named: a window's is checked again for
	// every packet, since LOCAL_INV, SEND_WITH_INV, Dealloc or a rebind
	// may revoke it between two of them (rxe checks the rkey per packet).
	rkey uint32
	// revoked: the region was deregistered while the WRITE was arriving;
	// the rest of it fails with a remote access error (revokeWrites).
	revoked bool
}

// respResource remembers a READ or atomic request so that a duplicate is
// replayed (READ, re-reading memory) or answered from the saved result
// (atomics, never executed twice), as rxe's responder resources.
type respResource struct {
	valid    bool
	atomic   bool
	firstPSN uint32
	lastPSN  uint32
	va       uint64
	rkey     uint32
	length   uint32
	mr       *MR
	orig     uint64
}

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
	e      *engine
	qp     *QP
	t      *qpTransport
	p      *wire.Packet
	info   wire.OpInfo
	status ibv.WCStatus // of the receive in progress, when respstErrInvalid fails it
}

// responder handles a request packet, as rxe_resp.c: one method per state,
// the loop dispatching until respstDone.
func (e *engine) responder(qp *QP, p *wire.Packet, info wire.OpInfo) {
	if qp.t.failAfterReplies {
		return // as good as in the error state (respError)
	}
	before := qp.t.ePSN
	e.respond1(qp, p, info)
	if qp.t.held.n > 0 && qp.t.ePSN != before {
		e.drainHeld(qp) // it filled a hole (ooo.go)
	}
}

// respond1 runs one request through the responder's states.
func (e *engine) respond1(qp *QP, p *wire.Packet, info wire.OpInfo) {
	r := reception{e: e, qp: qp, t: &qp.t, p: p, info: info}
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
		r.e.counters.DuplicateRequest++
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
	d := psnCmp(r.p.BTH.PSN, r.t.ePSN)
	switch {
	case d == 0:
		r.t.nakSent = false
		return respstCheckOpSeq
	case r.qp.typ != ibv.QPTypeRC:
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
	r.t.respOp = respNone
	if r.info.Flags&wire.FlagStart == 0 {
		return respstDone
	}
	r.t.ePSN = r.p.BTH.PSN
	r.t.nakSent = false
	return respstCheckOpSeq
}

// outOfSeq: one NAK per gap, and one more each time the requester is seen
// to go back to or before the packets already seen: its resent packet at
// ePSN was lost as well, and without a NAK only its transport timer would
// tell it. The packet is held until the hole fills (ooo.go).
func (r *reception) outOfSeq() respState {
	t, psn := r.t, r.p.BTH.PSN
	r.e.counters.OutOfSeqRequest++
	if !t.nakSent || psnCmp(psn, t.nakMax) <= 0 {
		t.nakSent = true
		r.e.sendAck(r.qp, t.ePSN, wire.NAKSyndrome(wire.NAKPSNSequenceError))
	}
	t.nakMax = psn
	r.e.hold(r.qp, r.p) // executed once the hole fills (ooo.go)
	return respstDone
}

// checkOpSeq (rxe's check_op_seq): a MIDDLE or LAST continues the message
// in progress, of its kind; anything else starts one.
func (r *reception) checkOpSeq() respState {
	f := r.info.Flags
	ok := f&wire.FlagStart == 0
	switch r.t.respOp {
	case respSend:
		ok = ok && f&wire.FlagSend != 0
	case respWrite:
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
	if r.t.attr.AccessFlags&need != need {
		return respstErrInvalid
	}
	return respstCheckLength
}

// checkLength (rxe's check_length): FIRST and MIDDLE carry exactly one path
// MTU, LAST and ONLY at most one.
func (r *reception) checkLength() respState {
	n, mtu := payloadLen(r.p), uint32(r.t.mtu)
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
func (e *engine) takeRecv(qp *QP, psn uint32) bool {
	t := &qp.t
	var wr recvWQE
	ok := false
	if qp.srq != nil {
		wr, ok = e.takeSRQ(qp.srq)
	} else if len(t.rq) > 0 {
		wr, ok = t.rq[0], true
		t.rq = t.rq[1:]
	}
	if !ok {
		if qp.typ == ibv.QPTypeRC {
			e.counters.SendRNRErr++
			e.sendAck(qp, psn, wire.RNRNAKSyndrome(t.attr.MinRNRTimer))
		}
		return false
	}
	t.recv.reset()
	t.recv.active, t.recv.wr = true, wr
	// An SRQ's WQEs name memory of the SRQ's protection domain, which
	// need not be the QP's (ibv_create_srq takes its own PD).
	pd := qp.pd
	if qp.srq != nil {
		pd = qp.srq.pd
	}
	var one [1]ibv.SGE
	for _, s := range wr.sges(&one) {
		mr := e.lookupMR(s.LKey)
		b, ok := span{}, false
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
		t.recv.segs = append(t.recv.segs, b)
	}
	return true
}

// completeRecv retires the active receive WQE.
func (e *engine) completeRecv(qp *QP, status ibv.WCStatus, op ibv.WCOpcode, flags ibv.WCFlags) bool {
	t := &qp.t
	wc := ibv.WorkCompletion{WRID: t.recv.wr.ID, Status: status, Opcode: op, QPNum: qp.qpn, SrcQP: t.attr.DestQPN}
	if qp.typ == ibv.QPTypeUD {
		wc.SrcQP = e.rx.DETH.SrcQP
	}
	if status == ibv.WCSuccess {
		wc.ByteLen = t.recv.written
		wc.Flags = flags | ibv.WCWithGRH
		if qp.typ == ibv.QPTypeUD {
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
			wc.ByteLen = t.write.total
		}
	}
	t.recv.reset()
	qp.recvRetired()
	e.counters.RDMARecvs++
	e.pending.flush() // the data before its completion
	if !qp.rcq.push(wc, e.rx.BTH.SE) {
		e.fatal(qp)
		return false
	}
	return true
}

func (e *engine) execSend(qp *QP, p *wire.Packet, info wire.OpInfo) {
	t := &qp.t
	psn := p.BTH.PSN
	if info.Flags&wire.FlagStart != 0 && !e.takeRecv(qp, psn) {
		return
	}
	if !scatterPayload(t.recv.segs, t.recv.written, p, &e.pending) {
		// The message does not fit the receive buffers.
		e.completeRecvErr(qp, ibv.WCLocLenErr)
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	t.recv.written += payloadLen(p)
	t.ePSN = (psn + 1) & 0xffffff
	if info.Flags&wire.FlagEnd == 0 {
		t.respOp = respSend
		e.ackIfAsked(qp, p)
		return
	}
	t.respOp = respNone
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
	t.msn = (t.msn + 1) & 0xffffff
	// A receive completion that overflows the CQ moves the QP to the
	// error state and the SEND is not acknowledged (rxe's
	// RESPST_ERR_CQ_OVERFLOW).
	if e.completeRecv(qp, ibv.WCSuccess, ibv.WCRecv, flags) {
		e.ackIfAsked(qp, p)
	}
}

func (e *engine) completeRecvErr(qp *QP, status ibv.WCStatus) {
	if qp.t.recv.active {
		e.completeRecv(qp, status, ibv.WCRecv, 0)
	}
}

func (e *engine) execWrite(qp *QP, p *wire.Packet, info wire.OpInfo) {
	t := &qp.t
	psn := p.BTH.PSN
	if info.Flags&wire.FlagStart != 0 {
		r := p.RETH
		if r.Len > ibv.MaxMsgSize {
			e.respError(qp, psn, wire.NAKInvalidRequest, 0)
			return
		}
		t.write = writeState{va: r.VA, resid: r.Len, total: r.Len, rkey: r.RKey}
		if r.Len > 0 {
			mr, ok := e.checkRKey(qp, r.RKey, r.VA, r.Len, ibv.AccessRemoteWrite)
			if !ok {
				e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
				return
			}
			t.write.mr = mr
		}
	}
	n := payloadLen(p)
	w := &t.write
	if w.revoked {
		e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
		return
	}
	last := info.Flags&wire.FlagEnd != 0
	if (last && n != w.resid) || (!last && n >= w.resid) {
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	if n > 0 && info.Flags&wire.FlagStart == 0 && isMWKey(w.rkey) {
		mr, ok := e.checkMWAccess(qp, w.rkey, w.va, n, ibv.AccessRemoteWrite)
		if !ok {
			// The window went away mid-message: the rest of the WRITE
			// fails as a WRITE naming an invalid key.
			w.mr, w.revoked = nil, true
			e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
			return
		}
		w.mr = mr
	}
	// A WRITE with immediate needs a receive WQE before anything is written.
	if last && info.Headers&wire.HasImmDt != 0 && !e.takeRecv(qp, psn) {
		return
	}
	if n > 0 {
		dst, _ := spanOf(w.mr, w.va, n) // inside the region: checked against RETH length
		one := [1]span{dst}
		scatterPayload(one[:], 0, p, &e.pending)
		w.va += uint64(n)
		w.resid -= n
	}
	t.ePSN = (psn + 1) & 0xffffff
	if !last {
		t.respOp = respWrite
		e.ackIfAsked(qp, p)
		return
	}
	t.respOp = respNone
	t.msn = (t.msn + 1) & 0xffffff
	if info.Headers&wire.HasImmDt != 0 && !e.completeRecv(qp, ibv.WCSuccess, ibv.WCRecvRDMAWithImm, ibv.WCWithImm) {
		return // the CQ overflowed: no ACK, as for a SEND
	}
	e.ackIfAsked(qp, p)
}

// checkRKey finds the region an rkey names, directly or through a memory
// window, and checks PD, rights and range.
func (e *engine) checkRKey(qp *QP, rkey uint32, va uint64, n uint32, need ibv.Access) (*MR, bool) {
	if isMWKey(rkey) {
		return e.checkMWAccess(qp, rkey, va, n, need)
	}
	mr := e.lookupMR(rkey)
	if mr == nil || mr.PD() != qp.pd || mr.Access()&need != need {
		return nil, false
	}
	if _, ok := spanOf(mr, va, n); !ok {
		return nil, false
	}
	return mr, true
}

func (e *engine) execRead(qp *QP, p *wire.Packet) {
	t := &qp.t
	psn := p.BTH.PSN
	r := p.RETH
	if r.Len > ibv.MaxMsgSize || t.attr.MaxDestRdAtomic == 0 {
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	var mr *MR
	if r.Len > 0 {
		var ok bool
		if mr, ok = e.checkRKey(qp, r.RKey, r.VA, r.Len, ibv.AccessRemoteRead); !ok {
			e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
			return
		}
	}
	res := e.newResource(qp)
	*res = respResource{valid: true, firstPSN: psn, lastPSN: (psn + t.npkts(r.Len) - 1) & 0xffffff,
		va: r.VA, rkey: r.RKey, length: r.Len, mr: mr}
	t.msn = (t.msn + 1) & 0xffffff
	t.ePSN = (res.lastPSN + 1) & 0xffffff
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
func (e *engine) readReply(qp *QP, res *respResource, from uint32, kind readKind) {
	e.readStarting(qp, res, from, kind)
	e.sendDueAck(qp)
	e.startRead(qp, res, from, kind != readNew)
}

func (e *engine) execAtomic(qp *QP, p *wire.Packet) {
	t := &qp.t
	psn := p.BTH.PSN
	a := p.AtomicETH
	if t.attr.MaxDestRdAtomic == 0 || a.VA%8 != 0 {
		e.respError(qp, psn, wire.NAKInvalidRequest, 0)
		return
	}
	mr, ok := e.checkRKey(qp, a.RKey, a.VA, 8, ibv.AccessRemoteAtomic)
	if !ok {
		e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
		return
	}
	target, _ := spanOf(mr, a.VA, 8)
	e.pending.flush() // the target may have writes queued
	// Atomics operate on the 64-bit value in the responder's byte order (rxe: host order).
	e.atomicMu.Lock()
	var b [8]byte
	target.read(b[:], 0, nil)
	orig := binary.LittleEndian.Uint64(b[:])
	if p.BTH.Opcode == wire.RCCompareSwap {
		if orig == a.Compare {
			binary.LittleEndian.PutUint64(b[:], a.SwapAdd)
			target.write(b[:], 0, nil)
		}
	} else {
		binary.LittleEndian.PutUint64(b[:], orig+a.SwapAdd)
		target.write(b[:], 0, nil)
	}
	e.atomicMu.Unlock()
	res := e.newResource(qp)
	*res = respResource{valid: true, atomic: true, firstPSN: psn, lastPSN: psn, orig: orig}
	t.msn = (t.msn + 1) & 0xffffff
	t.ePSN = (psn + 1) & 0xffffff
	e.atomicAck(qp, psn, orig)
}

func (e *engine) atomicAck(qp *QP, psn uint32, orig uint64) {
	e.sendDueAck(qp)
	e.respond(qp, pendingReply{op: wire.RCAtomicAck, psn: psn, syndrome: wire.ACKSyndrome(ackCreditsInval), msn: qp.t.msn, orig: orig})
}

func (e *engine) newResource(qp *QP) *respResource {
	t := &qp.t
	r := &t.res[t.resNext%len(t.res)]
	t.resNext++
	return r
}

// duplicate answers a request PSN the responder has already executed.
func (e *engine) duplicate(qp *QP, p *wire.Packet, info wire.OpInfo) {
	t := &qp.t
	psn := p.BTH.PSN
	if info.Flags&(wire.FlagRead|wire.FlagAtomic) == 0 {
		// SEND/WRITE: acknowledge the last good PSN again, never re-execute (C9-105).
		e.sendAck(qp, (t.ePSN-1)&0xffffff, wire.ACKSyndrome(ackCreditsInval))
		return
	}
	for i := range t.res {
		r := &t.res[i]
		if !r.valid || psnCmp(psn, r.firstPSN) < 0 || psnCmp(psn, r.lastPSN) > 0 {
			continue
		}
		if r.atomic {
			if info.Flags&wire.FlagAtomic != 0 && psn == r.firstPSN {
				e.atomicAck(qp, psn, r.orig)
			}
			return
		}
		if info.Flags&wire.FlagRead != 0 && p.RETH.RKey == r.rkey {
			if r.length > 0 {
				// The key may have been invalidated or deregistered since:
				// check it again, as rxe_recheck_mr.
				mr, ok := e.checkRKey(qp, r.rkey, r.va, r.length, ibv.AccessRemoteRead)
				if !ok {
					e.respError(qp, psn, wire.NAKRemoteAccessError, 0)
					return
				}
				r.mr = mr
			}
			kind := readDuplicate
			off := uint64((psn-r.firstPSN)&0xffffff) * uint64(qp.t.mtu)
			if p.RETH.VA == r.va+off && uint64(p.RETH.Len)+off == uint64(r.length) {
				kind = readResume
			} else if p.RETH.VA == r.va+off && p.RETH.Len > 0 && uint64(p.RETH.Len)+off < uint64(r.length) {
				kind = readHole
			}
			// Answer the range asked for, as rxe's duplicate_request
			// does: a requester that asks for one hole (recovery.go)
			// gets that hole, ended by a LAST, not the rest of the READ.
			// The data still comes from the resource, at the offset the
			// PSN gives; a length past it is cut to it.
			res := *r
			if p.RETH.Len > 0 && off+uint64(p.RETH.Len) < uint64(r.length) {
				res.length = uint32(off) + p.RETH.Len
				res.lastPSN = (r.firstPSN + qp.t.npkts(res.length) - 1) & 0xffffff
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
func (e *engine) ackIfAsked(qp *QP, p *wire.Packet) {
	if qp.typ != ibv.QPTypeRC {
		return
	}
	if !p.BTH.AckReq {
		e.counters.AckDeferred++
		return
	}
	t := &qp.t
	if t.ackDue {
		e.counters.AckDeferred++
	} else {
		t.ackDue = true
		e.acks = append(e.acks, qp)
	}
	t.ackPSN = p.BTH.PSN
}

// sendDueAck sends qp's deferred ACK, if any. Every other response of the
// QP goes after it, so responses stay in PSN order.
func (e *engine) sendDueAck(qp *QP) {
	t := &qp.t
	if t.ackDue {
		t.ackDue = false
		n := e.nout
		e.sendAckNow(qp, t.ackPSN, wire.ACKSyndrome(ackCreditsInval))
		if e.nout > n {
			e.nacks++
		}
	}
}

// sendDueAcks ends a receive batch: the deferred ACKs go out.
func (e *engine) sendDueAcks() {
	for _, qp := range e.acks {
		if int(qp.qpn) < len(e.qps) && e.qps[qp.qpn] == qp {
			e.sendDueAck(qp)
		}
	}
	clear(e.acks)
	e.acks = e.acks[:0]
}

// sendAck sends an ACKNOWLEDGE (or NAK) with the syndrome and the current
// MSN, after any deferred ACK.
func (e *engine) sendAck(qp *QP, psn uint32, syndrome uint8) {
	e.sendDueAck(qp)
	e.sendAckNow(qp, psn, syndrome)
}

func (e *engine) sendAckNow(qp *QP, psn uint32, syndrome uint8) {
	e.respond(qp, pendingReply{op: wire.RCAck, psn: psn, syndrome: syndrome, msn: qp.t.msn})
}

// respError is a class C/D error: RC sends the NAK and the QP goes to the
// error state; the receive in progress fails with status (if non-zero).
// UC drops the message.
func (e *engine) respError(qp *QP, psn uint32, code wire.NAKCode, status ibv.WCStatus) {
	t := &qp.t
	if qp.typ != ibv.QPTypeRC {
		t.respOp = respNone
		e.abortRecv(qp)
		return
	}
	if status != 0 && t.recv.active {
		e.completeRecv(qp, status, ibv.WCRecv, 0)
	}
	e.sendAck(qp, psn, wire.NAKSyndrome(code))
	if t.replying() {
		// The NAK waits behind replies to earlier requests (a READ's
		// response, paced or beyond this step's budget). The error state
		// drops what is queued, so it waits for them: rxe sends a READ's
		// whole response before it takes the next request. Entering it
		// now would drop the NAK too, and the requester would retry into
		// a QP that no longer answers: RETRY_EXC_ERR, not the error meant.
		t.failAfterReplies = true
		return
	}
	e.fatal(qp)
}

// abortRecv gives the receive WQE a dropped UC message had taken back to
// the head of its queue (RQ or SRQ), unconsumed.
func (e *engine) abortRecv(qp *QP) {
	t := &qp.t
	if !t.recv.active {
		return
	}
	if qp.srq != nil {
		qp.srq.mu.Lock()
		qp.srq.q = append([]recvWQE{t.recv.wr}, qp.srq.q...)
		qp.srq.mu.Unlock()
	} else {
		t.rq = append([]recvWQE{t.recv.wr}, t.rq...)
	}
	t.recv.reset()
}
