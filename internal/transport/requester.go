// The requester, as rxe_req.c: it turns the send queue's WQEs into
// request packets, within the congestion window (cwnd.go) and the fences.

package transport

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// sendWQE is a posted send work request and its progress.
type sendWQE struct {
	wr       WR
	length   uint32
	segs     []span // the memory of its SG list, resolved when it starts
	single   bool   // one SGE, kept in sge1 and resolved into seg1 (no allocation)
	sge1     ibv.SGE
	seg1     span
	started  bool
	firstPSN uint32
	lastPSN  uint32
	sentOff  uint32 // SEND/WRITE bytes packetised
	sentAll  bool
	readDone uint32 // READ bytes received
	// respDone: every response of this READ or atomic has been placed; it
	// completes once the WQEs before it have.
	respDone bool
	// readFrom is the PSN the latest request of this READ or atomic asked
	// from, readTo one past the last it asked for; retried says it was
	// asked again (see rerequest).
	readFrom, readTo uint32
	retried          bool
	// A READ's responses past a hole (recovery.go): got marks those
	// placed past the one it waits for, seenEnd is one past the highest
	// placed, and tailLost says the responses not yet placed are not on
	// their way any more (a later response, an ACK or the timer showed it).
	got      readMap
	seenEnd  uint32
	tailLost bool
	// askSeen is one past the highest response of the latest request's
	// answer seen since it was sent (recovery.go, askHoles).
	askSeen uint32
	inline  []byte // INLINE data, copied when posted
}

// requester sends what the QP's window allows; it reports whether it sent.
// In SQD it finishes (and retransmits) the WQEs already started and starts
// no new one.
func (e *engine) requester(qp *QP) bool {
	t := &qp.t
	if (t.state != ibv.StateRTS && t.state != ibv.StateSQD) || !t.rnrAt.IsZero() {
		return false
	}
	sent := false
	for t.reqIdx < len(t.sq) && e.nout < txBatch {
		if qp.typ == ibv.QPTypeRC && psnCmp(t.reqPSN, t.compPSN+t.window()) >= 0 {
			break
		}
		if t.probing && t.psnAfter(t.reqPSN, t.compPSN) {
			break // the probe is out: wait for its answer
		}
		w := &t.sq[t.reqIdx]
		if t.state == ibv.StateSQD && !w.started {
			break
		}
		if w.sentAll || w.respDone {
			// Go-back-N found nothing of it to resend, or a READ's or
			// atomic's responses all came in since: asking again would
			// send a request for nothing at the PSN after it.
			w.sentAll = true
			t.reqIdx++
			continue
		}
		if isLocalOp(w.wr.Opcode) {
			// A bind or local invalidate runs once every WR before it has
			// completed, so it is ordered after them and before the WRs
			// behind it (rxe runs it as the requester reaches it; both
			// complete in order).
			if t.reqIdx != 0 {
				break
			}
			e.localOp(qp, w)
			sent = true
			continue
		}
		if !w.started {
			rdAtomic := isReadOrAtomic(w.wr.Opcode)
			if w.wr.Flags&ibv.SendFence != 0 && t.rdAtomicOut > 0 {
				break
			}
			if rdAtomic && t.rdAtomicOut >= max(1, int(t.attr.MaxRdAtomic)) {
				break
			}
			n := uint32(1)
			if w.wr.Opcode != ibv.WRAtomicCmpAndSwp && w.wr.Opcode != ibv.WRAtomicFetchAdd {
				n = t.npkts(w.length)
			}
			if t.reqIdx > 0 && (t.nextPSN+n-t.sq[0].firstPSN)&0xffffff > maxOutstandingSpan {
				break // see psnAge: it waits for the WQEs before it
			}
			if !e.resolveLocal(qp, w) {
				return true
			}
			w.started = true
			w.firstPSN = t.nextPSN
			w.lastPSN = (w.firstPSN + n - 1) & 0xffffff
			w.seenEnd = w.firstPSN
			t.nextPSN = (w.lastPSN + 1) & 0xffffff
			if rdAtomic {
				t.rdAtomicOut++
			}
		}
		e.sendNext(qp, w)
		sent = true
		if w.sentAll {
			t.reqIdx++
			if qp.typ != ibv.QPTypeRC {
				// UC and UD complete when the last packet is handed to the link.
				e.retireSent(qp)
			}
		}
		if qp.typ == ibv.QPTypeRC && t.timerAt.IsZero() && t.attr.Timeout > 0 {
			t.timerAt = e.dev.clock.Now().Add(t.rto())
		}
	}
	return sent
}

// localOp executes the BIND_MW or LOCAL_INV at the head of the send queue
// and completes it; a failure completes it with rxe's status (MW_BIND_ERR,
// LOC_QP_OP_ERR) and moves the QP to the error state.
func (e *engine) localOp(qp *QP, w *sendWQE) {
	ok := false
	status := ibv.WCMWBindErr
	switch w.wr.Opcode {
	case ibv.WRBindMW:
		ok = e.bindMW(qp, w.wr.Bind)
	case ibv.WRLocalInv:
		ok, status = e.invalidateRKey(qp, w.wr.InvRKey), ibv.WCLocQPOpErr
	}
	w.started, w.sentAll = true, true
	if !ok {
		e.failHead(qp, status)
		return
	}
	e.retire(qp, ibv.WCSuccess)
}

// resolveLocal checks the WQE's SG list against the local keys and fetches
// its memory. On a bad key the WQE completes with LOC_PROT_ERR and the QP
// goes to the error state, as rxe.
func (e *engine) resolveLocal(qp *QP, w *sendWQE) bool {
	if w.wr.Flags&ibv.SendInline != 0 {
		// Inline data was copied at post time.
		w.segs, w.seg1, w.single = nil, localSpan(w.inline), true
		return true
	}
	needWrite := isReadOrAtomic(w.wr.Opcode)
	w.segs = w.segs[:0]
	sgl := w.wr.SGList
	if w.single {
		sgl = []ibv.SGE{w.sge1}
	}
	for _, s := range sgl {
		mr := e.lookupMR(s.LKey)
		if mr == nil || mr.PD() != qp.pd || (needWrite && mr.Access()&ibv.AccessLocalWrite == 0) {
			e.failHead(qp, ibv.WCLocProtErr)
			return false
		}
		b, ok := spanOf(mr, s.Addr, s.Length)
		if !ok {
			e.failHead(qp, ibv.WCLocProtErr)
			return false
		}
		if w.single {
			w.seg1 = b
		} else {
			w.segs = append(w.segs, b)
		}
	}
	return true
}

// local returns the WQE's resolved local memory; buf backs the single-SGE case.
func (w *sendWQE) local(buf *[1]span) []span {
	if !w.single {
		return w.segs
	}
	buf[0] = w.seg1
	return buf[:]
}

// sendNext emits the next packet of w (a READ or atomic request is one packet).
func (e *engine) sendNext(qp *QP, w *sendWQE) {
	t := &qp.t
	wr := &w.wr
	if isReadOrAtomic(wr.Opcode) {
		e.sendReadAtomic(qp, w)
		w.sentAll = true
		t.reqPSN = (w.lastPSN + 1) & 0xffffff
		t.noackPkts = 0
		return
	}
	mtu := uint32(t.mtu)
	off := w.sentOff
	n := min(mtu, w.length-off)
	first, last := off == 0, off+n == w.length
	op := dataOpcode(wr.Opcode, first, last, qp.typ == ibv.QPTypeUC)
	if qp.typ == ibv.QPTypeUD {
		op = wire.UDSendOnly // one packet: checkSendWR bounds it by the MTU
		if wr.Opcode == ibv.WRSendWithImm {
			op = wire.UDSendOnlyImm
		}
	}
	psn := (w.firstPSN + off/mtu) & 0xffffff
	if psnCmp(psn, t.sentEnd) < 0 {
		e.counters.RetransmittedPkts++
	}
	t.noackPkts++
	// The packet that fills the window asks for an ACK: nothing else
	// would open it before the timer.
	fills := psnCmp((psn+1)&0xffffff, t.compPSN+t.window()) >= 0
	ackReq := qp.typ == ibv.QPTypeRC && (last || t.noackPkts > ibv.MaxPktsPerAck || t.probing || fills)
	if ackReq {
		t.noackPkts = 0
	}
	e.rttStart(t, psn)
	var p *wire.Packet
	if qp.typ == ibv.QPTypeUD {
		p = e.udHeader(qp, wr, op, psn)
	} else {
		p = e.header(qp, op, psn, ackReq)
	}
	info, _ := op.Info()
	if info.Headers&wire.HasRETH != 0 {
		p.RETH = wire.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, Len: w.length}
	}
	if info.Headers&wire.HasImmDt != 0 {
		p.ImmDt = wr.ImmData
	}
	if info.Headers&wire.HasIETH != 0 {
		p.IETH = wr.InvRKey
	}
	if last && wr.Flags&ibv.SendSolicited != 0 && (wr.Opcode != ibv.WRRDMAWrite) {
		p.BTH.SE = true
	}
	var one [1]span
	segs := w.local(&one)
	e.send(int(n), func(dst []byte) { gather(dst, segs, off, &e.reads) })
	w.sentOff = off + n
	w.sentAll = last
	t.reqPSN = (psn + 1) & 0xffffff
	t.markSent(t.reqPSN)
	if first && wr.Opcode != ibv.WRRDMAWrite && wr.Opcode != ibv.WRRDMAWriteWithImm {
		e.counters.RDMASends++
	}
}

// sendReadAtomic sends the request of a READ or atomic WQE. A READ asks
// for what has not arrived yet: after a loss it asks for its lowest hole,
// from the first missing byte to the next response placed (or its end),
// with RETH adjusted (a responder treats it as a duplicate and replays
// that range: recovery.go).
func (e *engine) sendReadAtomic(qp *QP, w *sendWQE) {
	t := &qp.t
	wr := &w.wr
	e.rttStart(t, w.firstPSN)
	if w.retried {
		e.counters.RetransmittedPkts++
	}
	if wr.Opcode == ibv.WRRDMARead {
		psn := w.nextRespPSN(t.mtu)
		to := w.holeEnd(psn)
		n := w.length
		if to != (w.lastPSN+1)&0xffffff {
			n = ((to - w.firstPSN) & 0xffffff) * uint32(t.mtu)
		}
		p := e.header(qp, wire.RCReadRequest, psn, true)
		p.RETH = wire.RETH{VA: wr.RemoteAddr + uint64(w.readDone), RKey: wr.RKey, Len: n - w.readDone}
		w.readFrom, w.readTo, w.tailLost, w.askSeen = psn, to, false, psn
	} else {
		p := e.header(qp, wire.RCFetchAdd, w.firstPSN, true)
		p.AtomicETH = wire.AtomicETH{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.CompareAdd}
		if wr.Opcode == ibv.WRAtomicCmpAndSwp {
			p.BTH.Opcode = wire.RCCompareSwap
			p.AtomicETH.SwapAdd, p.AtomicETH.Compare = wr.Swap, wr.CompareAdd
		}
		w.readFrom = w.firstPSN
	}
	e.send(0, nil)
	t.markSent((w.lastPSN + 1) & 0xffffff)
}

// nextRespPSN is the PSN of the next response a READ or atomic WQE waits for.
func (w *sendWQE) nextRespPSN(mtu int) uint32 {
	return (w.firstPSN + w.readDone/uint32(mtu)) & 0xffffff
}

// dataOpcode picks the SEND or WRITE opcode for a packet's place in its message.
func dataOpcode(op ibv.WROpcode, first, last, uc bool) wire.Opcode {
	var o wire.Opcode
	switch op {
	case ibv.WRSend, ibv.WRSendWithImm, ibv.WRSendWithInv:
		o = segmentOpcode(first, last, wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast)
		if last && op == ibv.WRSendWithImm {
			o++ // SEND_LAST → LAST_WITH_IMM, SEND_ONLY → ONLY_WITH_IMM
		}
		if last && op == ibv.WRSendWithInv {
			o = wire.RCSendLastInv
			if first {
				o = wire.RCSendOnlyInv
			}
		}
	default:
		o = segmentOpcode(first, last, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast)
		if last && op == ibv.WRRDMAWriteWithImm {
			o++
		}
	}
	if uc {
		o |= 0x20
	}
	return o
}

// segmentOpcode picks ONLY, FIRST, MIDDLE or LAST for a packet's place in its message.
func segmentOpcode(first, last bool, only, firstOp, middle, lastOp wire.Opcode) wire.Opcode {
	switch {
	case first && last:
		return only
	case first:
		return firstOp
	case last:
		return lastOp
	}
	return middle
}
