package verbs

import (
	"time"

	"github.com/xdproce/xdproce/wire"
)

// completer handles a response (ACK, NAK, READ response, atomic ACK) for an
// RC QP, as rxe_comp.c: in-order completion, implicit ACKs, go-back-N.
func (e *engine) completer(qp *QP, p *wire.Packet, info wire.OpInfo) {
	t := &qp.t
	psn := p.BTH.PSN
	switch p.BTH.Opcode {
	case wire.RCAck:
		a := p.AETH
		switch {
		case a.IsACK():
			e.ackThrough(qp, psn)
		case a.IsRNRNAK():
			e.counters.RcvdRNRErr++
			e.implicitAck(qp, psn)
			if t.rnrLeft == 0 {
				e.counters.RetryRNRExceededErr++
				e.failHead(qp, WCRNRRetryExcErr)
				return
			}
			if t.attr.RNRRetry != 7 {
				t.rnrLeft--
			}
			t.rnrAt = e.dev.clock.Now().Add(a.RNRTimer())
			t.timerAt = time.Time{}
		case a.IsNAK():
			switch a.NAKCode() {
			case wire.NAKPSNSequenceError:
				e.counters.RcvdSeqErr++
				e.implicitAck(qp, psn)
				e.retry(qp)
			case wire.NAKInvalidRequest:
				e.nakHead(qp, psn, WCRemInvReqErr)
			case wire.NAKRemoteAccessError:
				e.nakHead(qp, psn, WCRemAccessErr)
			default:
				e.nakHead(qp, psn, WCRemOpErr)
			}
		default:
			e.nakHead(qp, psn, WCRemOpErr)
		}
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
		if info.Headers&wire.HasAETH != 0 && !p.AETH.IsACK() {
			e.nakHead(qp, psn, WCRemOpErr)
			return
		}
		e.implicitAck(qp, psn)
		if len(t.sq) == 0 || psn != t.compPSN {
			return // duplicate or a gap: the timer or a NAK recovers
		}
		w := &t.sq[0]
		if !w.started || w.wr.Opcode != WRRDMARead {
			e.failHead(qp, WCFatalErr)
			return
		}
		off := ((psn - w.firstPSN) & 0xffffff) * uint32(t.mtu)
		if off != w.readDone || uint32(len(p.Payload)) > w.length-off {
			return
		}
		var one [1][]byte
		if !scatter(w.local(&one), off, p.Payload) {
			e.failHead(qp, WCLocProtErr)
			return
		}
		w.readDone += uint32(len(p.Payload))
		t.compPSN = (psn + 1) & 0xffffff
		e.progress(qp)
		if info.Flags&wire.FlagEnd != 0 {
			if w.readDone != w.length {
				e.failHead(qp, WCBadRespErr)
				return
			}
			e.retire(qp, WCSuccess)
		}
	case wire.RCAtomicAck:
		e.implicitAck(qp, psn)
		if len(t.sq) == 0 || psn != t.compPSN {
			return
		}
		w := &t.sq[0]
		if !w.started || (w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAdd) {
			e.failHead(qp, WCFatalErr)
			return
		}
		putAtomicResult(w, p.AtomicAck)
		t.compPSN = (psn + 1) & 0xffffff
		e.progress(qp)
		e.retire(qp, WCSuccess)
	}
}

// ackThrough handles an ACK of every PSN up to psn.
func (e *engine) ackThrough(qp *QP, psn uint32) {
	t := &qp.t
	for len(t.sq) > 0 && t.sq[0].started {
		w := &t.sq[0]
		if psnCmp(w.lastPSN, psn) > 0 {
			break
		}
		if w.wr.Opcode.isReadOrAtomic() {
			// Acknowledged past a READ/atomic whose response never came: lost, retry.
			e.retry(qp)
			return
		}
		e.retire(qp, WCSuccess)
	}
	if psnCmp(psn+1, t.compPSN) > 0 && psnCmp(psn, t.nextPSN) < 0 {
		t.compPSN = (psn + 1) & 0xffffff
	}
	if psnCmp(t.reqPSN, t.compPSN) < 0 {
		// An ACK for packets sent before a go-back-N: nothing below it needs resending.
		t.reqPSN = t.compPSN
	}
	e.progress(qp)
}

// implicitAck completes SEND/WRITE WQEs that end before psn: a response or
// NAK for psn acknowledges everything before it.
func (e *engine) implicitAck(qp *QP, psn uint32) {
	t := &qp.t
	for len(t.sq) > 0 && t.sq[0].started && !t.sq[0].wr.Opcode.isReadOrAtomic() && psnCmp(t.sq[0].lastPSN, psn) < 0 {
		e.retire(qp, WCSuccess)
	}
	if psnCmp(psn, t.nextPSN) > 0 {
		return // names a PSN never sent: ignore
	}
	if len(t.sq) > 0 && t.sq[0].started && t.sq[0].wr.Opcode.isReadOrAtomic() {
		// Only the READ/atomic's own responses acknowledge its PSNs.
		if psnCmp(t.sq[0].firstPSN, t.compPSN) > 0 && psnCmp(t.sq[0].firstPSN, psn) <= 0 {
			t.compPSN = t.sq[0].firstPSN
		}
		return
	}
	if psnCmp(psn, t.compPSN) > 0 {
		t.compPSN = psn
	}
}

// nakHead ends the WQE a fatal NAK names with status; the QP goes to ERR.
func (e *engine) nakHead(qp *QP, psn uint32, status WCStatus) {
	e.implicitAck(qp, psn)
	e.failHead(qp, status)
}

// progress notes forward progress: retry counters are reset and the timer
// re-armed while anything is outstanding.
func (e *engine) progress(qp *QP) {
	t := &qp.t
	t.retryLeft, t.rnrLeft = t.attr.RetryCnt, t.attr.RNRRetry
	if len(t.sq) > 0 && t.sq[0].started && t.attr.Timeout > 0 {
		t.timerAt = e.dev.clock.Now().Add(ackTimeout(t.attr.Timeout))
	} else {
		t.timerAt = time.Time{}
	}
}

// checkTimers runs the retransmission and RNR timers of an RC QP.
func (e *engine) checkTimers(qp *QP, now time.Time) {
	t := &qp.t
	if qp.typ != QPTypeRC || t.state != StateRTS && t.state != StateSQD {
		return
	}
	if !t.rnrAt.IsZero() && !now.Before(t.rnrAt) {
		t.rnrAt = time.Time{}
		e.goBackN(qp)
	}
	if t.timerAt.IsZero() || now.Before(t.timerAt) {
		return
	}
	if len(t.sq) == 0 || !t.sq[0].started {
		t.timerAt = time.Time{}
		return
	}
	e.retry(qp)
}

// retry counts a transport retry (timeout, sequence NAK, lost response) and
// goes back to the oldest unacknowledged PSN; with none left the oldest WQE
// fails with RETRY_EXC_ERR. retry_cnt 7 retries forever, as rxe does.
func (e *engine) retry(qp *QP) {
	t := &qp.t
	e.counters.CompleterRetryErr++
	if t.retryLeft == 0 {
		e.counters.RetryExceededErr++
		e.failHead(qp, WCRetryExcErr)
		return
	}
	if t.attr.RetryCnt != 7 {
		t.retryLeft--
	}
	e.goBackN(qp)
}

// goBackN rewinds the requester to compPSN: every unacknowledged packet is
// sent again, resuming mid-message where the acknowledged part ends.
func (e *engine) goBackN(qp *QP) {
	t := &qp.t
	t.reqIdx = 0
	t.reqPSN = t.compPSN
	for i := range t.sq {
		w := &t.sq[i]
		if !w.started {
			break
		}
		w.sentAll = false
		if i == 0 && psnCmp(t.compPSN, w.firstPSN) > 0 {
			w.sentOff = ((t.compPSN - w.firstPSN) & 0xffffff) * uint32(t.mtu)
		} else {
			w.sentOff = 0
		}
	}
	if len(t.sq) > 0 && t.sq[0].started && t.attr.Timeout > 0 {
		t.timerAt = e.dev.clock.Now().Add(ackTimeout(t.attr.Timeout))
	}
}
