// Timers and retry, as rxe's retry path: the retransmission timer and its
// RTO, round-trip samples, the retry and RNR counters, and go-back-N.

package engine

import (
	"time"

	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// progress re-arms the retransmission timer while anything is outstanding.
func (e *Engine) progress(qp *queue.QP) {
	t := &qp.Transport
	if len(t.SQ) > 0 && t.SQ[0].Started && t.Attr.Timeout > 0 {
		t.TimerAt = e.now().Add(t.RTO())
	} else {
		t.TimerAt = time.Time{}
	}
}

// ResetRetry restores the retry counters and ends a retry episode (rxe's
// reset_retry_counters): the responder has shown progress.
func (e *Engine) resetRetry(qp *queue.QP) {
	t := &qp.Transport
	t.RetryLeft, t.RNRLeft = t.Attr.RetryCnt, t.Attr.RNRRetry
	t.StartedRetry = false
	t.Timeouts, t.Probing, t.NAKEpisode = 0, false, false
	t.PokedAt = time.Time{}
	e.armPoke(qp) // a probe timeout from the last progress
}

// checkTimers runs the retransmission and RNR timers of an RC QP.
func (e *Engine) checkTimers(qp *queue.QP) {
	t := &qp.Transport
	if qp.QPType != ibv.QPTypeRC || t.State != ibv.StateRTS && t.State != ibv.StateSQD {
		return
	}
	now := e.now()
	if !t.RNRAt.IsZero() && !now.Before(t.RNRAt) {
		t.RNRAt = time.Time{}
		e.goBackN(qp, false)
	}
	if !t.AskAt.IsZero() {
		if !now.Before(t.AskAt) {
			e.ask(qp)
		}
		return // the retransmission timer and the poke run from the ask (queue/ackpolicy.go)
	}
	if !t.PokeAt.IsZero() && !now.Before(t.PokeAt) {
		t.PokeAt = time.Time{}
		e.poke(qp)
	}
	if t.TimerAt.IsZero() || now.Before(t.TimerAt) {
		return
	}
	if len(t.SQ) == 0 || !t.SQ[0].Started {
		t.TimerAt = time.Time{}
		return
	}
	e.Counters.TransportTimeouts++
	if t.TimerAt.Equal(t.ReadTailAt) {
		e.Counters.ReadTailProbes++
	}
	t.CountTimeout(&e.Counters)
	e.retry(qp, true, false)
}

// armPoke arms the stalled requester's poke (queue's timer.go) a probe
// timeout from now, or disarms it. The requester calls it when it has
// sent, resetRetry on progress.
func (e *Engine) armPoke(qp *queue.QP) {
	t := &qp.Transport
	t.PokeAt = time.Time{}
	if qp.QPType == ibv.QPTypeRC && e.dev.Cfg.Recovery&port.NoProbe == 0 && t.Pokeable() && t.Stalled() {
		t.PokeAt = e.now().Add(t.PTO())
	}
}

// ask has the responder acknowledge the packets that went without AckReq
// (queue/ackpolicy.go): the requester sends its last packet again, asking.
func (e *Engine) ask(qp *queue.QP) {
	t := &qp.Transport
	w := t.AskWith()
	if w == nil {
		e.noteAsk(qp, true, false, false) // nothing to ask with, or it asked already
		return
	}
	e.Counters.AckAsks++
	e.sendNext(qp, w)
	t.Asking = false
	t.AskSent(e.now())
}

// poke probes with the oldest unacknowledged packet, as after a NAK.
func (e *Engine) poke(qp *queue.QP) {
	t := &qp.Transport
	if e.dev.Cfg.Recovery&port.NoProbe == 0 && t.Pokeable() && t.Stalled() {
		e.Counters.StallPokes++
		e.Counters.CompleterRetryErr++ // a retry, as a timer expiry's
		t.Probing, t.StartedRetry = true, true
		t.PokedAt = e.now()
		e.goBackN(qp, true)
	}
}

// lateForPoke reports whether an ACK arriving now left the responder
// before the poke's probe could have reached it (sooner than srtt after
// the poke): the poke fired early, the ACKs were merely late, and this one
// says nothing about what the probe found.
func (e *Engine) lateForPoke(t *queue.Transport) bool {
	return !t.PokedAt.IsZero() && e.now().Sub(t.PokedAt) < t.SRTT
}

// retry counts a transport retry (timeout, sequence NAK, lost response) and
// goes back to the oldest unacknowledged PSN; with none left the oldest WQE
// fails with RETRY_EXC_ERR. retry_cnt 7 retries forever. As rxe's
// COMPST_ERROR_RETRY, one retry episode counts once: until the responder
// shows progress (ResetRetry), further NAKs and lost responses neither
// count nor rewind again; only the timer (timeout) starts another retry.
// With nak (a sequence NAK) only the NAKed packet is resent at first: the
// ACK it asks for says how far the responder has everything (ACKThrough)
// before the requester goes back over the rest.
func (e *Engine) retry(qp *queue.QP, timeout, nak bool) {
	t := &qp.Transport
	if t.StartedRetry && !timeout {
		return
	}
	e.Counters.CompleterRetryErr++
	if t.RetryLeft == 0 {
		e.Counters.RetryExceededErr++
		e.failHead(qp, ibv.WCRetryExcErr)
		return
	}
	if t.Attr.RetryCnt != 7 {
		t.RetryLeft--
	}
	if timeout {
		t.Timeouts++
		t.PokedAt = time.Time{}
	}
	// SentEnd, not ReqPSN: a go-back-N that skipped a READ or atomic
	// (below) leaves ReqPSN at it although it was sent and is unanswered.
	if t.SentEnd != t.CompPSN {
		t.StartedRetry = true
		t.ShrinkWindow()
		// After a timeout nothing says what got through: with retry_cnt 7
		// probe with the oldest unacknowledged packet before resending
		// the window. A finite retry_cnt keeps rxe's whole-window resend:
		// a probe costs a round trip, and on a peer slower than a short
		// timer those round trips would each count against the retries.
		t.Probing = timeout && t.Attr.RetryCnt == 7 || nak
		if timeout && t.Probing {
			// An expiry can be as early as a poke (ACKs merely late):
			// the same late-ACK rule (lateForPoke) keeps it from chaining.
			t.PokedAt = e.now()
		}
		// After a timeout only the oldest READ or atomic is asked again:
		// the responses of the others may well be on their way (a slow
		// peer), and a lost one shows itself by a later response or ACK
		// (rerequest) or by the next expiry. After a sequence NAK too: a
		// responder that holds what arrived past the hole (ooo.go) answers
		// the READs behind it once the hole fills; one that dropped them
		// NAKs the next request that follows them.
		t.Reo.Forget() // a READ hole asked for twice: its second copy proves no reordering
		e.goBackN(qp, timeout || nak)
		return
	}
	// Nothing sent is unacknowledged: no point in resending (rxe).
	e.progress(qp)
}

// goBackN rewinds the requester to CompPSN: every unacknowledged packet is
// sent again, resuming mid-message where the acknowledged part ends; a
// READ or atomic asks again for the responses it still lacks (with
// headReadsOnly, only the oldest WQE does), and one whose responses are
// all in, or a SEND or WRITE the responder has acknowledged, is not sent
// again. Outside a timer episode a READ asking for a hole is passed over (AskingHole).
func (e *Engine) goBackN(qp *queue.QP, headReadsOnly bool) {
	t := &qp.Transport
	t.ReqIdx = 0
	t.ReqPSN = t.CompPSN
	t.RTTAt = time.Time{} // Karn: no round-trip sample across a retransmission
	mtu := uint32(t.MTU)
	head := true
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started {
			break
		}
		if queue.IsReadOrAtomic(w.WR.Opcode) {
			if !head && headReadsOnly && w.SentAll || t.AskingHole(w) {
				continue
			}
			head = false
			w.SentAll = w.RespDone
			w.Retried = true
			continue
		}
		head = false
		from := (t.AckedReq + 1) & 0xffffff
		switch {
		case t.PSNAfter(from, w.LastPSN):
			w.SentAll = true
		case t.PSNAfter(from, w.FirstPSN):
			w.SentAll, w.SentOff = false, ((from-w.FirstPSN)&0xffffff)*mtu
		default:
			w.SentAll, w.SentOff = false, 0
		}
	}
	if len(t.SQ) > 0 && t.SQ[0].Started && t.Attr.Timeout > 0 {
		t.TimerAt = e.now().Add(t.RTO())
	}
}

// RerequestBefore asks again at once for the READs and atomics that end
// before psn and still wait for responses: a response or ACK for psn came
// after theirs, so theirs were lost. A READ response (slack) shows that
// only from the QP's reorder window (DupThresh, or wider) past a READ's end: one overtaken by a response
// or two of the next READ is late, not lost (recovery.go).
func (e *Engine) rerequestBefore(qp *queue.QP, psn uint32, slack bool) {
	t := &qp.Transport
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started || queue.PSNCmp(w.LastPSN, psn) >= 0 {
			return
		}
		if slack && w.WR.Opcode == ibv.WRRDMARead && (psn-w.LastPSN)&0xffffff < t.Reo.Threshold() {
			continue
		}
		if queue.IsReadOrAtomic(w.WR.Opcode) && !w.RespDone {
			e.rerequest(qp, w)
		}
	}
}

// rerequest asks again for what w still lacks, now that a later response
// or ACK showed its responses were lost: its lowest hole (recovery.go),
// unless such a request is already out and its first response has not
// come back: at most one per READ per round trip, so the rest of a lost
// stream, arriving behind the request, asks nothing more. The responder
// answers a READ from its responder resources (rxe replays it) and an
// atomic from the saved result; nothing is executed twice.
func (e *Engine) rerequest(qp *queue.QP, w *queue.SendWQE) {
	w.TailLost = true
	e.askHoles(qp, w)
}

// rttStart times the packet psn, sent now for the first time, unless a
// sample is already being taken.
func (e *Engine) rttStart(t *queue.Transport, psn uint32) {
	if t.RTTAt.IsZero() && t.Attr.RetryCnt == 7 && queue.PSNCmp(psn, t.SentEnd) >= 0 {
		t.RTTPSN, t.RTTAt = psn, e.now()
	}
}

// rttSample ends the sample once CompPSN has passed the timed packet.
func (e *Engine) rttSample(t *queue.Transport) {
	if t.RTTAt.IsZero() || queue.PSNCmp(t.CompPSN, t.RTTPSN) <= 0 {
		return
	}
	r := e.now().Sub(t.RTTAt)
	t.RTTAt = time.Time{}
	if t.SRTT == 0 {
		t.SRTT, t.RTTVar = r, r/2
		return
	}
	t.RTTVar += (max(t.SRTT-r, r-t.SRTT) - t.RTTVar) / 4
	t.SRTT += (r - t.SRTT) / 8
}
