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
		e.counters.RcvdSeqErr++
		e.implicitAck(qp, psn)
		return compErrorRetry
	case compErrorRetry:
		e.retry(qp)
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
