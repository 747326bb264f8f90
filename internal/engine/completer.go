// The completer, as rxe_comp.c: it matches ACKs, NAKs and READ/atomic
// responses to the send queue and retires WQEs into the send CQ (retire,
// failHead); all completion of send work happens here.

package engine

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// compState is a step of the completer's state machine, named after
// rxe_comp.c's states.
type compState uint8

const (
	compCheckPSN   compState = iota // is the response's PSN outstanding at all (rxe's check_psn)?
	compCheckAck                    // classify the response by opcode and AETH (rxe's check_ack)
	compWriteSend                   // an ACK: complete SEND/WRITE WQEs through its PSN
	compRNRNAK                      // an RNR NAK: count it against rnr_retry
	compRNRRetry                    // wait the RNR timer, then resend from the NAKed PSN
	compSeqNAK                      // a PSN sequence error NAK
	compErrorRetry                  // a transport retry: go back N, or RETRY_EXC_ERR
	compNAKError                    // a fatal NAK: the WQEs before its PSN are done, the next fails
	compCheckHead                   // a READ response or atomic ACK: does it belong to the head WQE, at its next PSN?
	compRead                        // place READ response data
	compAtomic                      // place an atomic's original value
	compError                       // complete the head WQE with an error; the QP goes to ERR
	compDrop                        // not a response to anything outstanding: drop and count it
	compDone
)

var compStateNames = [...]string{
	compCheckPSN: "CHECK_PSN", compCheckAck: "CHECK_ACK", compWriteSend: "WRITE_SEND", compRNRNAK: "RNR_NAK",
	compRNRRetry: "RNR_RETRY", compSeqNAK: "SEQ_NAK", compErrorRetry: "ERROR_RETRY", compNAKError: "NAK_ERROR",
	compCheckHead: "CHECK_HEAD", compRead: "READ", compAtomic: "ATOMIC",
	compError: "ERROR", compDrop: "DROP", compDone: "DONE",
}

func (s compState) String() string {
	if int(s) < len(compStateNames) {
		return compStateNames[s]
	}
	return fmt.Sprintf("compState(%d)", uint8(s))
}

// completion is the completer's work on one response packet.
type completion struct {
	e      *Engine
	qp     *queue.QP
	t      *queue.Transport
	p      *wire.Packet
	info   wire.OpInfo
	w      *queue.SendWQE // the READ or atomic a response belongs to
	status ibv.WCStatus   // of the head WQE, for CompError
	probe  bool           // CompErrorRetry after a sequence NAK: resend the NAKed packet first
}

// completer handles a response (ACK, NAK, READ response, atomic ACK) for an
// RC QP, as rxe_comp.c: every response is first checked against the PSNs
// actually outstanding, then classified, then acted on; in-order
// completion, implicit ACKs, go-back-N. One method per state; the loop
// dispatches until CompDone.
func (e *Engine) completer(qp *queue.QP, p *wire.Packet, info wire.OpInfo) {
	c := completion{e: e, qp: qp, t: &qp.Transport, p: p, info: info}
	for s := compCheckPSN; s != compDone; {
		s = c.step(s)
	}
}

// step runs one state and returns the next.
func (c *completion) step(s compState) compState {
	switch s {
	case compCheckPSN:
		return c.checkPSN()
	case compCheckAck:
		return c.checkAck()
	case compWriteSend:
		c.e.ackThrough(c.qp, c.p.BTH.PSN)
		return compDone
	case compRNRNAK:
		return c.rnrNAK()
	case compRNRRetry:
		return c.rnrRetry()
	case compSeqNAK:
		return c.seqNAK()
	case compErrorRetry:
		c.e.retry(c.qp, false, c.probe)
		return compDone
	case compNAKError:
		return c.nakError()
	case compCheckHead:
		return c.checkHead()
	case compRead:
		return c.read()
	case compAtomic:
		return c.atomic()
	case compError:
		c.e.failHead(c.qp, c.status)
		return compDone
	case compDrop:
		return compDone
	}
	return compDone
}

// checkPSN admits only responses whose PSN is outstanding: from the oldest
// unacknowledged PSN to the last PSN sent. IBTA has a requester ignore the
// rest; here they are counted, as duplicates (behind the window: a
// retransmission's answer, or an old copy) or as out of window (ahead of
// anything sent: forged, or from another connection). Nothing else about
// the QP changes, so a blind attacker has to hit the window.
func (c *completion) checkPSN() compState {
	t, psn := c.t, c.p.BTH.PSN
	if age := t.PSNAge(psn); age <= t.PSNAge(t.SentEnd) || age > t.PSNAge(t.CompPSN) {
		// Outside [CompPSN, SentEnd): behind (counted as a duplicate) or
		// ahead, as far as serial arithmetic tells.
		if queue.PSNCmp(psn, t.CompPSN) < 0 {
			c.e.Counters.DuplicateResponse++
			if op := c.p.BTH.Opcode; op >= wire.RCReadResponseFirst && op <= wire.RCReadResponseOnly {
				c.e.Counters.DuplicateReadResponse++
				c.e.answerSeen(c.qp, nil, psn, true) // perhaps a spurious re-ask's, its READ done
			}
		} else {
			c.e.Counters.ResponseOutOfWindow++
		}
		return compDrop
	}
	if len(t.SQ) == 0 || !t.SQ[0].Started {
		c.e.Counters.ResponseOutOfWindow++
		return compDrop
	}
	return compCheckAck
}

// checkAck classifies a response (rxe's check_ack).
func (c *completion) checkAck() compState {
	p := c.p
	switch p.BTH.Opcode {
	case wire.RCAck:
		a := p.AETH
		if !c.answersRequest(a.IsACK()) {
			c.e.Counters.ResponseOutOfWindow++
			return compDrop
		}
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
				c.status = ibv.WCRemInvReqErr
			case wire.NAKRemoteAccessError:
				c.status = ibv.WCRemAccessErr
			default:
				c.status = ibv.WCRemOpErr
			}
			return compNAKError
		}
		c.status = ibv.WCRemOpErr
		return compNAKError
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
		if c.info.Headers&wire.HasAETH != 0 && !p.AETH.IsACK() {
			c.status = ibv.WCRemOpErr
			return compNAKError
		}
		return compCheckHead
	case wire.RCAtomicAck:
		return compCheckHead
	}
	c.e.Counters.ResponseOutOfWindow++
	return compDrop
}

// answersRequest reports whether an ACK or NAK names a PSN a responder can
// acknowledge: a responder ACKs or NAKs a request's PSN (a SEND or WRITE
// packet's, or a READ's or atomic's), never one of the PSNs a READ's
// response takes past its request. Inside a READ only its first PSN, the
// PSN it was last asked again from, and, for an ACK, its last PSN (the
// expected PSN minus one, with which a responder answers a duplicate SEND
// or WRITE) qualify, as rxe's check_psn/check_ack accept an ACK only at a
// request's PSN. Without this, a forger who hit anywhere in a 1 MiB READ's
// 4096 PSNs (at PMTU 256) ended it with its NAK's error: the window is a
// READ's few request PSNs, not its length.
func (c *completion) answersRequest(ack bool) bool {
	t, psn := c.t, c.p.BTH.PSN
	if t.RdAtomicOut == 0 {
		return true
	}
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started || queue.PSNCmp(w.FirstPSN, psn) > 0 {
			return true
		}
		if queue.PSNCmp(psn, w.LastPSN) > 0 {
			continue
		}
		return w.WR.Opcode != ibv.WRRDMARead || psn == w.FirstPSN || psn == w.ReadFrom || (ack && psn == w.LastPSN)
	}
	return true
}

// nakTarget takes what a NAK for psn says, that the responder received
// every request PSN before it, and reports whether the NAK names the head
// WQE. It does not when the head is then a READ or atomic that ends before
// psn: its responses were lost, and what the NAK reports lies behind them.
func (c *completion) nakTarget() bool {
	psn := c.p.BTH.PSN
	c.e.acknowledge(c.qp, (psn-1)&0xffffff)
	t := c.t
	if len(t.SQ) == 0 || !t.SQ[0].Started {
		return false
	}
	w := &t.SQ[0]
	return !queue.IsReadOrAtomic(w.WR.Opcode) || queue.PSNCmp(psn, w.LastPSN) <= 0
}

// rnrNAK: the responder had no receive WQE for the SEND (or WRITE with
// immediate) at the NAK's PSN. Only a NAK naming a packet of the head WQE
// counts against rnr_retry.
func (c *completion) rnrNAK() compState {
	if !c.nakTarget() {
		return compErrorRetry
	}
	c.e.Counters.RcvdRNRErr++
	if c.t.RNRLeft == 0 {
		c.e.Counters.RetryRNRExceededErr++
		c.status = ibv.WCRNRRetryExcErr
		return compError
	}
	return compRNRRetry
}

func (c *completion) rnrRetry() compState {
	t := c.t
	if t.Attr.RNRRetry != 7 {
		t.RNRLeft--
	}
	t.RNRAt = c.e.now().Add(c.p.AETH.RNRTimer())
	t.TimerAt = time.Time{}
	return compDone
}

// seqNAK: the responder expects the NAK's PSN. As rxe's check_psn and
// check_ack, the NAK acknowledges the PSNs before its own; past a READ or
// atomic still waiting for responses it means those were lost; either way
// a retry starts from the oldest unacknowledged PSN.
func (c *completion) seqNAK() compState {
	t := c.t
	before := t.CompPSN
	if !c.nakTarget() {
		// Past a READ still waiting, whose lost holes are asked for; then
		// probe, unless only one-packet READs follow (docs/recovery.md).
		c.e.rerequestBefore(c.qp, c.p.BTH.PSN, false)
		c.probe = c.e.dev.Cfg.Recovery&port.NoProbe == 0 && !t.ShortReadsFrom(c.p.BTH.PSN)
		return compErrorRetry
	}
	if t.CompPSN == before && t.StartedRetry && t.NAKEpisode && t.Attr.RetryCnt == 7 {
		// The responder NAKs the same PSN again: it saw the resent
		// packets after that PSN, not that one. Lost again; go back again.
		// Only with retry_cnt 7 (forever): with a finite count each such
		// episode would count, and rxe's rule, one count per episode
		// until the timer or progress, is what applications tuned.
		t.StartedRetry = false
	}
	if t.PSNAfter(t.CompPSN, before) {
		// The NAK acknowledged PSNs past the oldest unacknowledged one:
		// progress, which resets the retry counter as an ACK there would
		// (rxe resets only on an explicit ACK, so there a loss rate above
		// about one packet per AckReq interval exhausts a retry_cnt below
		// 7 while data still moves). A NAK that repeats the oldest
		// unacknowledged PSN is no progress: inside a retry episode it is
		// ignored, as in rxe.
		c.e.Counters.RcvdSeqErr++
		c.e.resetRetry(c.qp)
	}
	if !t.StartedRetry {
		t.NAKEpisode = true
	}
	c.probe = c.e.dev.Cfg.Recovery&port.NoProbe == 0
	return compErrorRetry
}

// nakError: a fatal NAK (invalid request, remote access or operational
// error) for a packet of the head WQE: the WQEs before it are done, the
// head fails and the QP goes to the error state.
func (c *completion) nakError() compState {
	if !c.nakTarget() {
		return compErrorRetry
	}
	return compError
}

// checkHead finds the READ or atomic WQE a READ response or atomic ACK
// belongs to: the one whose PSNs hold it, of the right kind. Its responses
// are placed in order, each READ on its own, so a loss in one READ does
// not discard the responses of the READs behind it; completions still
// come in order. The response says the responder received every request
// before its WQE. A response past the one a READ or atomic waits for,
// in it or in a later one, shows that responses were lost: that READ or
// atomic is asked again at once from its first missing PSN (rerequest).
func (c *completion) checkHead() compState {
	t, p, psn := c.t, c.p, c.p.BTH.PSN
	isAtomicAck := p.BTH.Opcode == wire.RCAtomicAck
	var w *queue.SendWQE
	for i := range t.SQ {
		x := &t.SQ[i]
		if !x.Started || queue.PSNCmp(x.FirstPSN, psn) > 0 {
			break
		}
		if queue.PSNCmp(psn, x.LastPSN) <= 0 {
			w = x
			break
		}
	}
	if w == nil || !queue.IsReadOrAtomic(w.WR.Opcode) || (w.WR.Opcode == ibv.WRRDMARead) == isAtomicAck {
		c.e.Counters.ResponseOutOfWindow++ // no READ or atomic of ours holds this PSN
		if !isAtomicAck {
			c.e.answerSeen(c.qp, nil, psn, true) // perhaps a spurious re-ask's, its READ done
		}
		return compDrop
	}
	c.e.acknowledge(c.qp, (w.FirstPSN-1)&0xffffff)
	c.e.rerequestBefore(c.qp, psn, true)
	base := w.NextRespPSN(t.MTU)
	dup := w.RespDone || queue.PSNCmp(psn, base) < 0 || (psn != base && w.Got.Has(psn))
	if !isAtomicAck {
		c.e.answerSeen(c.qp, w, psn, dup)
	}
	if dup {
		c.e.Counters.DuplicateResponse++
		if !isAtomicAck {
			c.e.Counters.DuplicateReadResponse++
		}
		return compDrop
	}
	if psn != base && (isAtomicAck || (psn-base)&0xffffff >= queue.ReadMapBits || c.e.dev.Cfg.Recovery&port.NoReadHoles != 0) {
		// Too far past the hole to keep: asked again with it.
		c.e.Counters.OOODropped++
		w.TailLost = true
		c.e.askHoles(c.qp, w)
		return compDrop
	}
	c.w = w
	if isAtomicAck {
		return compAtomic
	}
	return compRead
}

// read places a READ response at the offset its PSN gives (at the PSN its
// READ waits for, or past a hole: recovery.go), after checking that it is
// the packet that belongs there: LAST or ONLY at the READ's last PSN, or
// at the last PSN of a request that asked for a hole only (a responder
// ends that answer with LAST, as rxe's replay does); FIRST or ONLY only
// where a request for it started (the READ's first PSN, or where it was
// asked again: a responder may answer a re-request as a new READ, as IBTA
// has it, or as a replay, as rxe does), MIDDLE elsewhere; FIRST and
// MIDDLE, and a hole's LAST, carry exactly one path MTU, and the READ's
// LAST or ONLY the rest. Anything else is dropped and counted: the READ
// stays as it was.
func (c *completion) read() compState {
	t, p, psn, w := c.t, c.p, c.p.BTH.PSN, c.w
	mtu := uint32(t.MTU)
	start, end := c.info.Flags&wire.FlagStart != 0, c.info.Flags&wire.FlagEnd != 0
	n := queue.PayloadLen(p)
	holeEnd := end && psn != w.LastPSN && psn == (w.ReadTo-1)&0xffffff
	ok := (end == (psn == w.LastPSN) || holeEnd) && (!start || psn == w.FirstPSN || psn == w.ReadFrom) && (start || psn != w.FirstPSN)
	if end && !holeEnd {
		ok = ok && n == w.Length-((psn-w.FirstPSN)&0xffffff)*mtu
	} else {
		ok = ok && n == mtu
	}
	if !ok {
		c.e.Counters.ResponseOutOfWindow++
		return compDrop
	}
	var one [1]queue.Span
	if !c.e.placeRead(c.qp, w, p, w.Local(&one)) {
		c.status = ibv.WCLocProtErr
		return compError
	}
	if holeEnd {
		// The answer to a hole's request is complete, and it came after
		// everything the responder sent before it: what is still missing
		// is lost. (The READ's own LAST proves nothing: a response just
		// before it may be late, not lost.)
		w.TailLost = true
	}
	c.e.askHoles(c.qp, w)
	c.e.resetRetry(c.qp) // a response it waited for: progress (rxe's check_ack)
	c.e.completeInOrder(c.qp)
	c.e.progress(c.qp)
	t.ArmReadTail(c.e.now()) // a READ tail probe, if due
	return compDone
}

// atomic places an atomic's original value.
func (c *completion) atomic() compState {
	c.e.pending.Flush() // earlier writes to the same memory first
	putAtomicResult(c.w, c.p.AtomicAck)
	c.w.RespDone = true
	c.e.resetRetry(c.qp)
	c.e.completeInOrder(c.qp)
	c.e.progress(c.qp)
	return compDone
}

// ACKThrough handles an ACK of every PSN up to psn. As rxe's check_psn and
// check_ack, an ACK that acknowledges requests not acknowledged before is
// progress and resets the retry counters; one inside a READ or atomic
// waiting for responses does not pass it (only its own responses
// acknowledge it), and one past it means its responses were lost: it is
// asked again at once.
//
// An ACK that answers a probe (the packet resent first after a sequence
// NAK or a timeout) and acknowledges past it shows a responder that kept
// what arrived past the hole (ooo.go): the oldest PSN it still lacks was
// lost as well, and is probed in turn, instead of going back over the
// packets it holds. One that acknowledges the probe only goes back N.
func (e *Engine) ackThrough(qp *queue.QP, psn uint32) {
	t := &qp.Transport
	before := t.AckedReq
	probe := t.Probing
	probed := t.CompPSN
	late := e.lateForPoke(t)
	e.rerequestBefore(qp, (psn+1)&0xffffff, false)
	e.acknowledge(qp, psn)
	if t.PSNAfter(t.AckedReq, before) {
		if late {
			t.Resume() // not the probe's answer: the poke was early
		}
		e.resetRetry(qp)
		if probe && !late && t.PSNAfter(t.AckedReq, probed) && t.CompPSN != t.SentEnd && len(t.SQ) > 0 && !queue.IsReadOrAtomic(t.SQ[0].WR.Opcode) {
			e.Counters.CompleterRetryErr++
			t.Probing, t.StartedRetry = true, true
			e.goBackN(qp, true)
		}
	}
	e.progress(qp)
}

// acknowledge records that the responder received every request PSN up to
// psn, and completes what that completes.
func (e *Engine) acknowledge(qp *queue.QP, psn uint32) {
	t := &qp.Transport
	if t.PSNAfter(psn, t.AckedReq) {
		t.AckedReq = psn
	}
	e.completeInOrder(qp)
}

// CompleteInOrder retires the WQEs at the head that are done, oldest first
// (a SEND or WRITE once the responder has all of it, a READ or atomic once
// its responses are all placed), and moves CompPSN to the oldest PSN still
// unacknowledged. If that is beyond where a go-back-N had got to, the
// requester resumes from there instead (an ACK for packets sent before
// it, or of a probe the responder already had).
func (e *Engine) completeInOrder(qp *queue.QP) {
	t := &qp.Transport
	for len(t.SQ) > 0 && t.SQ[0].Started {
		w := &t.SQ[0]
		if queue.IsReadOrAtomic(w.WR.Opcode) {
			if !w.RespDone {
				break
			}
			// Its responses all in, the responder had its request: a
			// SEND behind a 2^23-PSN READ must not compare with an
			// AckedReq from before it (PSNAge's bound).
			if t.PSNAfter(w.LastPSN, t.AckedReq) {
				t.AckedReq = w.LastPSN
			}
		} else if t.PSNAfter(w.LastPSN, t.AckedReq) {
			break
		}
		e.retire(qp, ibv.WCSuccess)
	}
	comp := t.SentEnd // with no WQE started, everything sent is acknowledged
	if len(t.SQ) > 0 && t.SQ[0].Started {
		w := &t.SQ[0]
		comp = w.NextRespPSN(t.MTU)
		if !queue.IsReadOrAtomic(w.WR.Opcode) {
			comp = (t.AckedReq + 1) & 0xffffff
			if t.PSNAfter(w.FirstPSN, comp) {
				comp = w.FirstPSN
			}
		}
	}
	if t.PSNAfter(comp, t.CompPSN) {
		t.GrowWindow((comp - t.CompPSN) & 0xffffff)
		t.CompPSN = comp
		e.rttSample(t)
	}
	if t.PSNAfter(t.CompPSN, t.ReqPSN) {
		if h := t.SQ[:min(len(t.SQ), 1)]; len(h) == 1 && h[0].Started && h[0].WR.Opcode == ibv.WRRDMARead && h[0].SentAll && !h[0].RespDone {
			// The walk passed over this READ (sent, unanswered) without
			// moving ReqPSN, and its first responses just took CompPSN
			// past it: resume behind it, not ask again for the rest of
			// an answer that is arriving (each such re-ask came back in
			// full, behind the original: most duplicate READ responses
			// at 1% loss). Its own losses show as holes (recovery.go).
			t.ReqIdx, t.ReqPSN = 0, t.CompPSN
			return
		}
		e.goBackN(qp, true)
	}
}

// retireSent completes UC WQEs whose packets all left.
func (e *Engine) retireSent(qp *queue.QP) {
	for len(qp.Transport.SQ) > 0 && qp.Transport.SQ[0].SentAll && qp.Transport.ReqIdx > 0 {
		e.retire(qp, ibv.WCSuccess)
	}
}

// FailHead completes the oldest WQE with an error status and moves the QP to
// the error state, which flushes the rest.
func (e *Engine) failHead(qp *queue.QP, status ibv.WCStatus) {
	// An application that polls the error completion and then queries the
	// QP must find it in the error state already.
	qp.StateMirror.Store(uint32(ibv.StateErr))
	if len(qp.Transport.SQ) > 0 {
		e.retire(qp, status)
	}
	e.toError(qp)
}

// retire completes the oldest send WQE with status.
func (e *Engine) retire(qp *queue.QP, status ibv.WCStatus) {
	t := &qp.Transport
	w := t.SQ[0]
	if w.Started && queue.IsReadOrAtomic(w.WR.Opcode) && t.RdAtomicOut > 0 {
		t.RdAtomicOut--
	}
	// The slot is free before the completion is visible: an application
	// that polls it and posts at once must find room, as with ibverbs.
	t.SQ[0] = queue.SendWQE{}
	t.SQ = t.SQ[1:]
	qp.SQUsed.Add(-1)
	qp.FreeSharedSlots()
	if t.ReqIdx > 0 {
		t.ReqIdx--
	}
	if status != ibv.WCSuccess || qp.SigAll || w.WR.Flags&ibv.SendSignaled != 0 {
		wc := ibv.WorkCompletion{WRID: w.WR.ID, Status: status, Opcode: queue.CompletionOf(w.WR.Opcode), QPNum: qp.Number}
		if status == ibv.WCSuccess {
			wc.ByteLen = w.Length
			// rxe flags a send's completion WITH_IMM too (rc_imm.jsonl, ud_imm.jsonl).
			if w.WR.Opcode == ibv.WRSendWithImm || w.WR.Opcode == ibv.WRRDMAWriteWithImm {
				wc.Flags = ibv.WCWithImm
			}
		}
		e.pending.Flush() // a READ's data before its completion
		if !qp.SendCQ.Push(wc, false) && t.State != ibv.StateErr {
			e.fatal(qp)
		}
	}
	if status == ibv.WCSuccess {
		e.CheckDrained(qp) // an error completion moves the QP to ERR instead
	}
}

// CheckDrained ends an SQD drain once every WQE started before it has
// completed, raising EventSQDrained if the QP asked for it
// (en_sqd_async_notify).
func (e *Engine) CheckDrained(qp *queue.QP) {
	t := &qp.Transport
	if !t.Draining || t.State != ibv.StateSQD || (len(t.SQ) > 0 && t.SQ[0].Started) {
		return
	}
	t.Draining = false
	if t.Attr.EnSQDAsyncNotify {
		e.Events.Post(queue.Event{Type: ibv.EventSQDrained, QP: qp})
	}
}

// putAtomicResult stores an atomic's original value into its 8-byte SGE.
func putAtomicResult(w *queue.SendWQE, orig uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], orig)
	var one [1]queue.Span
	queue.Scatter(w.Local(&one), 0, b[:], nil) // b is on the stack: written at once
}
