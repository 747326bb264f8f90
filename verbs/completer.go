package verbs

import (
	"fmt"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// compState is a step of the completer's state machine, named after
// rxe_comp.c's states.
type compState uint8

const (
	compCheckAck   compState = iota // classify the response by opcode and AETH
	compWriteSend                   // an ACK: complete SEND/WRITE WQEs through its PSN
	compRNRNAK                      // an RNR NAK: count it against rnr_retry
	compRNRRetry                    // wait the RNR timer, then resend from the NAKed PSN
	compSeqNAK                      // a PSN sequence error NAK
	compErrorRetry                  // a transport retry: go back N, or RETRY_EXC_ERR
	compNAKError                    // a fatal NAK: the WQEs before its PSN are done, the next fails
	compCheckPSN                    // a READ response or atomic ACK: is it the expected PSN of the head WQE?
	compRead                        // place READ response data
	compAtomic                      // place an atomic's original value
	compCompWQE                     // complete the head WQE successfully
	compError                       // complete the head WQE with an error; the QP goes to ERR
	compDone
)

var compStateNames = [...]string{
	compCheckAck: "CHECK_ACK", compWriteSend: "WRITE_SEND", compRNRNAK: "RNR_NAK", compRNRRetry: "RNR_RETRY",
	compSeqNAK: "SEQ_NAK", compErrorRetry: "ERROR_RETRY", compNAKError: "NAK_ERROR", compCheckPSN: "CHECK_PSN",
	compRead: "READ", compAtomic: "ATOMIC", compCompWQE: "COMP_WQE", compError: "ERROR", compDone: "DONE",
}

func (s compState) String() string {
	if int(s) < len(compStateNames) {
		return compStateNames[s]
	}
	return fmt.Sprintf("compState(%d)", uint8(s))
}

// completion is the completer's work on one response packet.
type completion struct {
	qp     *QP
	p      *wire.Packet
	info   wire.OpInfo
	status WCStatus // of the head WQE, for compError
}

// completer handles a response (ACK, NAK, READ response, atomic ACK) for an
// RC QP, as rxe_comp.c: in-order completion, implicit ACKs, go-back-N. It
// runs the state machine from compCheckAck to compDone.
func (e *engine) completer(qp *QP, p *wire.Packet, info wire.OpInfo) {
	c := completion{qp: qp, p: p, info: info}
	for s := compCheckAck; s != compDone; {
		s = e.compStep(&c, s)
	}
}

// compStep runs one state and returns the next.
func (e *engine) compStep(c *completion, s compState) compState {
	qp, p := c.qp, c.p
	t := &qp.t
	psn := p.BTH.PSN
	switch s {
	case compCheckAck:
		return c.checkAck()
	case compWriteSend:
		e.ackThrough(qp, psn)
		return compDone
	case compRNRNAK:
		e.counters.RcvdRNRErr++
		e.implicitAck(qp, psn)
		if t.rnrLeft == 0 {
			e.counters.RetryRNRExceededErr++
			c.status = WCRNRRetryExcErr
			return compError
		}
		return compRNRRetry
	case compRNRRetry:
		if t.attr.RNRRetry != 7 {
			t.rnrLeft--
		}
		t.rnrAt = e.dev.clock.Now().Add(p.AETH.RNRTimer())
		t.timerAt = time.Time{}
		return compDone
	case compSeqNAK:
		// As rxe's check_psn and check_ack: the NAK completes the SEND/WRITE
		// WQEs before its PSN; a stale NAK (below the oldest unacknowledged
		// PSN) or one past a READ/atomic at the head is ignored; else the
		// oldest unacknowledged PSN becomes the NAKed one and a retry
		// starts from it.
		e.retireBefore(qp, psn)
		if len(t.sq) == 0 || !t.sq[0].started {
			return compDone
		}
		d := psnCmp(psn, t.compPSN)
		if d < 0 || (d > 0 && t.sq[0].wr.Opcode.isReadOrAtomic()) {
			return compDone
		}
		if d > 0 {
			// The NAK acknowledges every PSN before its own, past the oldest
			// unacknowledged one: progress, which resets the retry counter
			// as an ACK there would (rxe resets only on an explicit ACK, so
			// there a loss rate above about one packet per AckReq interval
			// exhausts a retry_cnt below 7 while data still moves). A NAK
			// that repeats the oldest unacknowledged PSN is no progress:
			// inside a retry episode it is ignored, as in rxe.
			e.counters.RcvdSeqErr++
			t.compPSN = psn
			e.resetRetry(qp)
		}
		return compErrorRetry
	case compErrorRetry:
		e.retry(qp, false)
		return compDone
	case compNAKError:
		e.implicitAck(qp, psn)
		return compError
	case compCheckPSN:
		e.implicitAck(qp, psn)
		if len(t.sq) == 0 || psn != t.compPSN {
			return compDone // duplicate or a gap: the timer or a NAK recovers
		}
		w := &t.sq[0]
		wantRead := p.BTH.Opcode != wire.RCAtomicAck // only READ responses and atomic ACKs come here
		isRead := w.wr.Opcode == WRRDMARead
		isAtomic := w.wr.Opcode == WRAtomicCmpAndSwp || w.wr.Opcode == WRAtomicFetchAdd
		if !w.started || (wantRead && !isRead) || (!wantRead && !isAtomic) {
			c.status = WCFatalErr
			return compError
		}
		e.resetRetry(qp) // the expected response of the oldest WQE (rxe's check_ack)
		if wantRead {
			return compRead
		}
		return compAtomic
	case compRead:
		w := &t.sq[0]
		off := ((psn - w.firstPSN) & 0xffffff) * uint32(t.mtu)
		if off != w.readDone || uint32(len(p.Payload)) > w.length-off {
			return compDone
		}
		var one [1][]byte
		if !scatter(w.local(&one), off, p.Payload) {
			c.status = WCLocProtErr
			return compError
		}
		w.readDone += uint32(len(p.Payload))
		t.compPSN = (psn + 1) & 0xffffff
		e.progress(qp)
		if c.info.Flags&wire.FlagEnd == 0 {
			return compDone
		}
		if w.readDone != w.length {
			c.status = WCBadRespErr
			return compError
		}
		return compCompWQE
	case compAtomic:
		putAtomicResult(&t.sq[0], p.AtomicAck)
		t.compPSN = (psn + 1) & 0xffffff
		e.progress(qp)
		return compCompWQE
	case compCompWQE:
		e.retire(qp, WCSuccess)
		return compDone
	case compError:
		e.failHead(qp, c.status)
		return compDone
	}
	return compDone
}

// checkAck classifies a response (rxe's check_ack).
func (c *completion) checkAck() compState {
	p := c.p
	switch p.BTH.Opcode {
	case wire.RCAck:
		a := p.AETH
		switch {
		case a.IsACK():
			return compWriteSend
		case a.IsRNRNAK():
			return compRNRNAK
		case a.IsNAK():
			switch a.NAKCode() {
			case wire.NAKPSNSequenceError:
				return compSeqNAK
			case wire.NAKInvalidRequest:
				c.status = WCRemInvReqErr
			case wire.NAKRemoteAccessError:
				c.status = WCRemAccessErr
			default:
				c.status = WCRemOpErr
			}
			return compNAKError
		}
		c.status = WCRemOpErr
		return compNAKError
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
		if c.info.Headers&wire.HasAETH != 0 && !p.AETH.IsACK() {
			c.status = WCRemOpErr
			return compNAKError
		}
		return compCheckPSN
	case wire.RCAtomicAck:
		return compCheckPSN
	}
	return compDone
}

// ackThrough handles an ACK of every PSN up to psn. As rxe's check_psn and
// check_ack, the retry counters are reset by an ACK at or past the oldest
// unacknowledged PSN and by each WQE it completes past its last PSN; an
// older ACK (a duplicate's) resets nothing, so it cannot stretch a retry
// episode.
func (e *engine) ackThrough(qp *QP, psn uint32) {
	t := &qp.t
	fresh := psnCmp(psn, t.compPSN) >= 0
	for len(t.sq) > 0 && t.sq[0].started {
		w := &t.sq[0]
		d := psnCmp(psn, w.lastPSN)
		if w.wr.Opcode.isReadOrAtomic() {
			if d >= 0 {
				// Acknowledged past a READ/atomic whose response never came: lost, retry.
				e.retry(qp, false)
				return
			}
			if fresh {
				e.resetRetry(qp)
			}
			break
		}
		if d > 0 || fresh {
			e.resetRetry(qp)
		}
		if d < 0 {
			break
		}
		e.retire(qp, WCSuccess)
	}
	if psnCmp(psn+1, t.compPSN) > 0 && psnCmp(psn, t.nextPSN) < 0 {
		t.compPSN = (psn + 1) & 0xffffff
	}
	if psnCmp(t.reqPSN, t.compPSN) < 0 {
		// An ACK for packets sent before a go-back-N (or of a probe that
		// the responder had already): resend from the first PSN it lacks,
		// not from where the resending had got to.
		e.goBackN(qp)
	}
	e.progress(qp)
}

// retireBefore completes the started SEND/WRITE WQEs at the head whose last
// PSN is before psn: a response or NAK for psn acknowledges everything
// before it. Each completion resets the retry counters (rxe's check_psn).
func (e *engine) retireBefore(qp *QP, psn uint32) {
	t := &qp.t
	for len(t.sq) > 0 && t.sq[0].started && !t.sq[0].wr.Opcode.isReadOrAtomic() && psnCmp(t.sq[0].lastPSN, psn) < 0 {
		if psnCmp(t.sq[0].lastPSN, t.compPSN) >= 0 {
			t.compPSN = (t.sq[0].lastPSN + 1) & 0xffffff
		}
		e.resetRetry(qp)
		e.retire(qp, WCSuccess)
	}
}

// implicitAck completes SEND/WRITE WQEs that end before psn: a response or
// NAK for psn acknowledges everything before it.
func (e *engine) implicitAck(qp *QP, psn uint32) {
	t := &qp.t
	e.retireBefore(qp, psn)
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

// progress re-arms the retransmission timer while anything is outstanding.
func (e *engine) progress(qp *QP) {
	t := &qp.t
	if len(t.sq) > 0 && t.sq[0].started && t.attr.Timeout > 0 {
		t.timerAt = e.dev.clock.Now().Add(t.rto())
	} else {
		t.timerAt = time.Time{}
	}
}

// resetRetry restores the retry counters and ends a retry episode (rxe's
// reset_retry_counters): the responder has shown progress.
func (e *engine) resetRetry(qp *QP) {
	t := &qp.t
	t.retryLeft, t.rnrLeft = t.attr.RetryCnt, t.attr.RNRRetry
	t.startedRetry = false
	t.timeouts, t.probing = 0, false
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
	e.retry(qp, true)
}

// retry counts a transport retry (timeout, sequence NAK, lost response) and
// goes back to the oldest unacknowledged PSN; with none left the oldest WQE
// fails with RETRY_EXC_ERR. retry_cnt 7 retries forever. As rxe's
// COMPST_ERROR_RETRY, one retry episode counts once: until the responder
// shows progress (resetRetry), further NAKs and lost responses neither
// count nor rewind again; only the timer (timeout) starts another retry.
func (e *engine) retry(qp *QP, timeout bool) {
	t := &qp.t
	if t.startedRetry && !timeout {
		return
	}
	e.counters.CompleterRetryErr++
	if t.retryLeft == 0 {
		e.counters.RetryExceededErr++
		e.failHead(qp, WCRetryExcErr)
		return
	}
	if t.attr.RetryCnt != 7 {
		t.retryLeft--
	}
	if timeout {
		t.timeouts++
	}
	if psnCmp(t.reqPSN, t.compPSN) > 0 {
		t.startedRetry = true
		// After a timeout nothing says what got through: probe with the
		// oldest unacknowledged packet before resending the window.
		t.probing = timeout
		e.goBackN(qp)
		return
	}
	// Nothing sent is unacknowledged: no point in resending (rxe).
	e.progress(qp)
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
		t.timerAt = e.dev.clock.Now().Add(t.rto())
	}
}
