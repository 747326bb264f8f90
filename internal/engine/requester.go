// The requester, as rxe_req.c: it turns the send queue's WQEs into
// request packets, within the congestion window (cwnd.go) and the fences.

package engine

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// requester sends what the QP's window allows; it reports whether it sent.
// In SQD it finishes (and retransmits) the WQEs already started and starts
// no new one.
func (e *Engine) requester(qp *queue.QP) bool {
	t := &qp.Transport
	if (t.State != ibv.StateRTS && t.State != ibv.StateSQD) || !t.RNRAt.IsZero() {
		return false
	}
	sent := false
	for t.ReqIdx < len(t.SQ) && e.nout < txBatch {
		if qp.QPType == ibv.QPTypeRC && queue.PSNCmp(t.ReqPSN, t.CompPSN+t.Window()) >= 0 {
			break
		}
		if t.Probing && t.PSNAfter(t.ReqPSN, t.CompPSN) {
			break // the probe is out: wait for its answer
		}
		w := &t.SQ[t.ReqIdx]
		if t.State == ibv.StateSQD && !w.Started {
			break
		}
		if w.SentAll || w.RespDone {
			// Go-back-N found nothing of it to resend, or a READ's or
			// atomic's responses all came in since: asking again would
			// send a request for nothing at the PSN after it.
			w.SentAll = true
			t.ReqIdx++
			continue
		}
		if queue.IsLocalOp(w.WR.Opcode) {
			// A bind or local invalidate runs once every WR before it has
			// completed, so it is ordered after them and before the WRs
			// behind it (rxe runs it as the requester reaches it; both
			// complete in order).
			if t.ReqIdx != 0 {
				break
			}
			e.localOp(qp, w)
			sent = true
			continue
		}
		if !w.Started {
			rdAtomic := queue.IsReadOrAtomic(w.WR.Opcode)
			if w.WR.Flags&ibv.SendFence != 0 && t.RdAtomicOut > 0 {
				break
			}
			if rdAtomic && t.RdAtomicOut >= max(1, int(t.Attr.MaxRdAtomic)) {
				break
			}
			n := uint32(1)
			if w.WR.Opcode != ibv.WRAtomicCmpAndSwp && w.WR.Opcode != ibv.WRAtomicFetchAdd {
				n = t.Npkts(w.Length)
			}
			if t.ReqIdx > 0 && (t.NextPSN+n-t.SQ[0].FirstPSN)&0xffffff > queue.MaxOutstandingSpan {
				break // see PSNAge: it waits for the WQEs before it
			}
			if !e.resolveLocal(qp, w) {
				return true
			}
			w.Started = true
			w.FirstPSN = t.NextPSN
			w.LastPSN = (w.FirstPSN + n - 1) & 0xffffff
			w.SeenEnd = w.FirstPSN
			t.NextPSN = (w.LastPSN + 1) & 0xffffff
			if rdAtomic {
				t.RdAtomicOut++
			}
		}
		e.sendNext(qp, w)
		sent = true
		if w.SentAll {
			t.ReqIdx++
			if qp.QPType != ibv.QPTypeRC {
				// UC and UD complete when the last packet is handed to the link.
				e.retireSent(qp)
			}
		}
		if qp.QPType == ibv.QPTypeRC && t.TimerAt.IsZero() && t.Attr.Timeout > 0 {
			t.TimerAt = e.now().Add(t.RTO())
		}
		if t.FastReq && t.NoAckPkts == 0 && !queue.IsReadOrAtomic(w.WR.Opcode) {
			e.fastSlice = true // it asked for an ACK the program takes: kick it first (streamSlices)
			break
		}
	}
	if sent {
		e.armPoke(qp)
	}
	if !t.AskAt.IsZero() && t.ReqIdx < len(t.SQ) && e.nout < txBatch {
		e.ask(qp) // what waits behind the packets that did not ask needs their ACK now
		sent = true
	}
	return sent
}

// localOp executes the BIND_MW or LOCAL_INV at the head of the send queue
// and completes it; a failure completes it with rxe's status (MW_BIND_ERR,
// LOC_QP_OP_ERR) and moves the QP to the error state.
func (e *Engine) localOp(qp *queue.QP, w *queue.SendWQE) {
	ok := false
	status := ibv.WCMWBindErr
	switch w.WR.Opcode {
	case ibv.WRBindMW:
		ok = e.bindMW(qp, w.WR.Bind)
	case ibv.WRLocalInv:
		ok, status = e.invalidateRKey(qp, w.WR.InvRKey), ibv.WCLocQPOpErr
	}
	w.Started, w.SentAll = true, true
	if !ok {
		e.failHead(qp, status)
		return
	}
	e.retire(qp, ibv.WCSuccess)
}

// resolveLocal checks the WQE's SG list against the local keys and fetches
// its memory. On a bad key the WQE completes with LOC_PROT_ERR and the QP
// goes to the error state, as rxe.
func (e *Engine) resolveLocal(qp *queue.QP, w *queue.SendWQE) bool {
	if w.WR.Flags&ibv.SendInline != 0 {
		// Inline data was copied at post time.
		w.Segs, w.Seg1, w.Single = nil, localSpan(w.Inline), true
		return true
	}
	needWrite := queue.IsReadOrAtomic(w.WR.Opcode)
	w.Segs = w.Segs[:0]
	sgl := w.WR.SGList
	if w.Single {
		sgl = []ibv.SGE{w.SGE1}
	}
	for _, s := range sgl {
		mr := e.LookupMR(s.LKey)
		if mr == nil || mr.PD() != qp.PD || (needWrite && mr.Access()&ibv.AccessLocalWrite == 0) {
			e.failHead(qp, ibv.WCLocProtErr)
			return false
		}
		b, ok := spanOf(mr, s.Addr, s.Length)
		if !ok {
			e.failHead(qp, ibv.WCLocProtErr)
			return false
		}
		if w.Single {
			w.Seg1 = b
		} else {
			w.Segs = append(w.Segs, b)
		}
	}
	return true
}

// sendNext emits the next packet of w (a READ or atomic request is one packet).
func (e *Engine) sendNext(qp *queue.QP, w *queue.SendWQE) {
	t := &qp.Transport
	wr := &w.WR
	if queue.IsReadOrAtomic(wr.Opcode) {
		e.sendReadAtomic(qp, w)
		if w.Retried && wr.Opcode == ibv.WRRDMARead && t.Timeouts > 0 { // asked again by go-back-N
			e.Counters.ReadReaskTimer++
		} else if w.Retried && wr.Opcode == ibv.WRRDMARead {
			e.Counters.ReadReaskNAK++ // or an ACK
		}
		w.SentAll = true
		t.ReqPSN = (w.LastPSN + 1) & 0xffffff
		t.NoAckPkts = 0
		return
	}
	mtu := uint32(t.MTU)
	off := w.SentOff
	n := min(mtu, w.Length-off)
	first, last := off == 0, off+n == w.Length
	op := queue.DataOpcode(wr.Opcode, first, last, qp.QPType == ibv.QPTypeUC)
	if qp.QPType == ibv.QPTypeUD {
		op = wire.UDSendOnly // one packet: checkSendWR bounds it by the MTU
		if wr.Opcode == ibv.WRSendWithImm {
			op = wire.UDSendOnlyImm
		}
	}
	psn := (w.FirstPSN + off/mtu) & 0xffffff
	if queue.PSNCmp(psn, t.SentEnd) < 0 && !t.Asking {
		e.Counters.RetransmittedPkts++
	}
	t.NoAckPkts++
	// The packet that fills the window asks for an ACK: nothing else would open it before the timer.
	// With AckCoalesce a last packet asks only if something goes out behind it or nobody waits for it (queue/ackpolicy.go).
	fills := queue.PSNCmp((psn+1)&0xffffff, t.CompPSN+t.Window()) >= 0
	coalesce := e.dev.Cfg.AckCoalesce && qp.QPType == ibv.QPTypeRC
	lazy := coalesce && last && t.Lazy(qp.SigAll, qp.Caps.MaxSendWR)
	ackReq := qp.QPType == ibv.QPTypeRC && (last && !(coalesce && (lazy || t.SendsOnNow())) || t.NoAckPkts > ibv.MaxPktsPerAck || t.Probing || fills || t.Asking)
	if ackReq {
		t.NoAckPkts = 0
	}
	if ackReq || !lazy && t.AskAt.IsZero() {
		e.rttStart(t, psn) // a sample from a packet no ACK answers would hold the idle time
	}
	if coalesce {
		e.noteAsk(qp, ackReq, lazy, last && (qp.SigAll || wr.Flags&ibv.SendSignaled != 0))
	}
	var p *wire.Packet
	if qp.QPType == ibv.QPTypeUD {
		p = e.udHeader(qp, wr, op, psn)
	} else {
		p = e.header(qp, op, psn, ackReq)
	}
	info, _ := op.Info()
	if info.Headers&wire.HasRETH != 0 {
		p.RETH = wire.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, Len: w.Length}
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
	var one [1]queue.Span
	segs := w.Local(&one)
	e.fastSending(qp, (psn+1)&0xffffff)
	e.send(int(n), func(dst []byte) { queue.Gather(dst, segs, off, &e.reads) })
	w.SentOff = off + n
	w.SentAll = last
	t.ReqPSN = (psn + 1) & 0xffffff
	t.MarkSent(t.ReqPSN)
	if first && !t.Asking && wr.Opcode != ibv.WRRDMAWrite && wr.Opcode != ibv.WRRDMAWriteWithImm {
		e.Counters.RDMASends++
	}
}

// sendReadAtomic sends the request of a READ or atomic WQE. A READ asks
// for what has not arrived yet: after a loss it asks for its lowest hole,
// from the first missing byte to the next response placed (or its end),
// with RETH adjusted (a responder treats it as a duplicate and replays
// that range: recovery.go).
func (e *Engine) sendReadAtomic(qp *queue.QP, w *queue.SendWQE) {
	t := &qp.Transport
	wr := &w.WR
	e.rttStart(t, w.FirstPSN)
	if w.Retried {
		e.Counters.RetransmittedPkts++
	}
	w.AskAt = e.now()
	if wr.Opcode == ibv.WRRDMARead {
		psn := w.NextRespPSN(t.MTU)
		to := w.HoleEnd(psn)
		n := w.Length
		if to != (w.LastPSN+1)&0xffffff {
			n = ((to - w.FirstPSN) & 0xffffff) * uint32(t.MTU)
		}
		p := e.header(qp, wire.RCReadRequest, psn, true)
		p.RETH = wire.RETH{VA: wr.RemoteAddr + uint64(w.ReadDone), RKey: wr.RKey, Len: n - w.ReadDone}
		w.ReadFrom, w.ReadTo, w.TailLost, w.AskSeen = psn, to, false, psn
	} else {
		p := e.header(qp, wire.RCFetchAdd, w.FirstPSN, true)
		p.AtomicETH = wire.AtomicETH{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.CompareAdd}
		if wr.Opcode == ibv.WRAtomicCmpAndSwp {
			p.BTH.Opcode = wire.RCCompareSwap
			p.AtomicETH.SwapAdd, p.AtomicETH.Compare = wr.Swap, wr.CompareAdd
		}
		w.ReadFrom = w.FirstPSN
	}
	e.noteAsk(qp, true, false, false)
	e.fastSending(qp, (w.LastPSN+1)&0xffffff)
	e.send(0, nil)
	t.MarkSent((w.LastPSN + 1) & 0xffffff)
}

// noteAsk keeps the lazy AckReq policy's state (queue/ackpolicy.go) once
// a packet asked (ask) or not; an ask after packets that did not re-arms
// the poke, which their silence does not run.
func (e *Engine) noteAsk(qp *queue.QP, ask, lazy, signaled bool) {
	if qp.Transport.NoteAsk(ask, lazy, signaled, e.now()) {
		e.armPoke(qp)
	}
}
