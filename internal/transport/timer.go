// Timers and retry, as rxe's retry path: the retransmission timer and its
// RTO, round-trip samples, the retry and RNR counters, and go-back-N.

package transport

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
)

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
	t.timeouts, t.probing, t.nakEpisode = 0, false, false
}

// checkTimers runs the retransmission and RNR timers of an RC QP.
func (e *engine) checkTimers(qp *QP, now time.Time) {
	t := &qp.t
	if qp.typ != ibv.QPTypeRC || t.state != ibv.StateRTS && t.state != ibv.StateSQD {
		return
	}
	if !t.rnrAt.IsZero() && !now.Before(t.rnrAt) {
		t.rnrAt = time.Time{}
		e.goBackN(qp, false)
	}
	if t.timerAt.IsZero() || now.Before(t.timerAt) {
		return
	}
	if len(t.sq) == 0 || !t.sq[0].started {
		t.timerAt = time.Time{}
		return
	}
	e.counters.TransportTimeouts++
	e.retry(qp, true, false)
}

// retry counts a transport retry (timeout, sequence NAK, lost response) and
// goes back to the oldest unacknowledged PSN; with none left the oldest WQE
// fails with RETRY_EXC_ERR. retry_cnt 7 retries forever. As rxe's
// COMPST_ERROR_RETRY, one retry episode counts once: until the responder
// shows progress (resetRetry), further NAKs and lost responses neither
// count nor rewind again; only the timer (timeout) starts another retry.
// With nak (a sequence NAK) only the NAKed packet is resent at first: the
// ACK it asks for says how far the responder has everything (ackThrough)
// before the requester goes back over the rest.
func (e *engine) retry(qp *QP, timeout, nak bool) {
	t := &qp.t
	if t.startedRetry && !timeout {
		return
	}
	e.counters.CompleterRetryErr++
	if t.retryLeft == 0 {
		e.counters.RetryExceededErr++
		e.failHead(qp, ibv.WCRetryExcErr)
		return
	}
	if t.attr.RetryCnt != 7 {
		t.retryLeft--
	}
	if timeout {
		t.timeouts++
	}
	// sentEnd, not reqPSN: a go-back-N that skipped a READ or atomic
	// (below) leaves reqPSN at it although it was sent and is unanswered.
	if t.sentEnd != t.compPSN {
		t.startedRetry = true
		t.shrinkWindow()
		// After a timeout nothing says what got through: with retry_cnt 7
		// probe with the oldest unacknowledged packet before resending
		// the window. A finite retry_cnt keeps rxe's whole-window resend:
		// a probe costs a round trip, and on a peer slower than a short
		// timer those round trips would each count against the retries.
		t.probing = timeout && t.attr.RetryCnt == 7 || nak
		// After a timeout only the oldest READ or atomic is asked again:
		// the responses of the others may well be on their way (a slow
		// peer), and a lost one shows itself by a later response or ACK
		// (rerequest) or by the next expiry. After a sequence NAK too: a
		// responder that holds what arrived past the hole (ooo.go) answers
		// the READs behind it once the hole fills; one that dropped them
		// NAKs the next request that follows them.
		t.reo.forget() // a READ hole asked for twice: its second copy proves no reordering
		e.goBackN(qp, timeout || nak)
		return
	}
	// Nothing sent is unacknowledged: no point in resending (rxe).
	e.progress(qp)
}

// goBackN rewinds the requester to compPSN: every unacknowledged packet is
// sent again, resuming mid-message where the acknowledged part ends; a
// READ or atomic asks again for the responses it still lacks (with
// headReadsOnly, only the oldest WQE does), and one whose responses are
// all in, or a SEND or WRITE the responder has acknowledged, is not sent
// again.
func (e *engine) goBackN(qp *QP, headReadsOnly bool) {
	t := &qp.t
	t.reqIdx = 0
	t.reqPSN = t.compPSN
	t.rttAt = time.Time{} // Karn: no round-trip sample across a retransmission
	mtu := uint32(t.mtu)
	for i := range t.sq {
		w := &t.sq[i]
		if !w.started {
			break
		}
		if isReadOrAtomic(w.wr.Opcode) {
			if i > 0 && headReadsOnly && w.sentAll {
				continue
			}
			w.sentAll = w.respDone
			w.retried = true
			continue
		}
		from := (t.ackedReq + 1) & 0xffffff
		switch {
		case t.psnAfter(from, w.lastPSN):
			w.sentAll = true
		case t.psnAfter(from, w.firstPSN):
			w.sentAll, w.sentOff = false, ((from-w.firstPSN)&0xffffff)*mtu
		default:
			w.sentAll, w.sentOff = false, 0
		}
	}
	if len(t.sq) > 0 && t.sq[0].started && t.attr.Timeout > 0 {
		t.timerAt = e.dev.clock.Now().Add(t.rto())
	}
}

// rerequestBefore asks again at once for the READs and atomics that end
// before psn and still wait for responses: a response or ACK for psn came
// after theirs, so theirs were lost. A READ response (slack) shows that
// only from the QP's reorder window (dupThresh, or wider) past a READ's end: one overtaken by a response
// or two of the next READ is late, not lost (recovery.go).
func (e *engine) rerequestBefore(qp *QP, psn uint32, slack bool) {
	t := &qp.t
	for i := range t.sq {
		w := &t.sq[i]
		if !w.started || psnCmp(w.lastPSN, psn) >= 0 {
			return
		}
		if slack && w.wr.Opcode == ibv.WRRDMARead && (psn-w.lastPSN)&0xffffff < t.reo.threshold() {
			continue
		}
		if isReadOrAtomic(w.wr.Opcode) && !w.respDone {
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
func (e *engine) rerequest(qp *QP, w *sendWQE) {
	w.tailLost = true
	e.askHoles(qp, w)
}

// ackTimeout is the local ACK timeout: 4.096 µs × 2^timeout.
func ackTimeout(code uint8) time.Duration { return time.Duration(4096<<code) * time.Nanosecond }

// maxBackoff caps the doubling of the transport timer: 2^4 times its
// first period.
const maxBackoff = 4

// minRTO is the shortest period the adaptive timer uses: above a Go
// scheduler's or garbage collector's pauses, so that a spurious expiry
// stays rare (and costs one probe packet when it happens).
const minRTO = time.Millisecond

// rto is the transport timer's current period. With a finite retry_cnt the
// application chose how soon a dead peer is reported, (retry_cnt+1) ×
// timeout, and the period is the local ACK timeout, fixed, as rxe's. With
// retry_cnt 7, which retries forever, the timer adapts as adaptive
// retransmission on hardware RNICs does: it starts at the measured round
// trip (srtt + 4·rttvar, at least minRTO, at most the local ACK timeout),
// so a loss nothing else reveals (a lost NAK, a lost last packet) costs
// about a round trip instead of perftest's 67 ms; and each expiry without
// progress doubles it, up to maxBackoff doublings. Without the doubling a
// receiver slower than the timer (a deep queue, a loaded CPU) is fed
// retransmissions faster than it can drop them, and goodput collapses.
//
// A tail (at most tlpPkts outstanding: a ping-pong's message, the end of a
// burst) gets a shorter first period, a tail-loss probe as TCP's (RFC
// 8985): nothing sent behind it would draw a NAK for its loss, and the
// round trip is all a lost ACK or request should cost, not minRTO, ten
// round trips on veth. So does a probe resent after a NAK (recovery.go),
// alone in flight too. A probe that fires early costs one packet resent
// (the probe, retry_cnt 7) and no more.
func (t *qpTransport) rto() time.Duration {
	d := ackTimeout(t.attr.Timeout)
	if t.attr.RetryCnt != 7 {
		return d
	}
	if t.srtt > 0 {
		d = min(d, max(t.srtt+4*t.rttvar, minRTO))
		if t.timeouts == 0 && (t.probing || (t.sentEnd-t.compPSN)&0xffffff <= tlpPkts) {
			d = min(d, max(2*t.srtt, t.srtt+4*t.rttvar, tlpMin))
		}
	}
	return d << min(t.timeouts, uint32(maxBackoff))
}

// tlpPkts is the most packets outstanding that make a tail. The tail-loss
// probe's period is 2·srtt (RFC 8985's PTO), and at least srtt + 4·rttvar,
// so a host whose scheduling delays the answers (eight test sessions on
// two cores fired a fixed 200 µs probe spuriously in tests that count
// frames) shows it in rttvar and waits longer; tlpMin is its floor, above
// a wakeup's latency. A fixed floor of 500 µs, 3.6 times the loss-free
// p99 of a 4 KiB round trip on veth, was most of what a loss cost one
// (issue 33), and on the in-memory link, where a round trip takes tens of
// µs, each of the probes a 5% loss rate needs (a lost NAK, probe or ACK)
// cost twenty round trips.
const (
	tlpPkts = 2
	tlpMin  = 100 * time.Microsecond
)

// rttStart times the packet psn, sent now for the first time, unless a
// sample is already being taken.
func (e *engine) rttStart(t *qpTransport, psn uint32) {
	if t.rttAt.IsZero() && t.attr.RetryCnt == 7 && psnCmp(psn, t.sentEnd) >= 0 {
		t.rttPSN, t.rttAt = psn, e.dev.clock.Now()
	}
}

// rttSample ends the sample once compPSN has passed the timed packet.
func (e *engine) rttSample(t *qpTransport) {
	if t.rttAt.IsZero() || psnCmp(t.compPSN, t.rttPSN) <= 0 {
		return
	}
	r := e.dev.clock.Now().Sub(t.rttAt)
	t.rttAt = time.Time{}
	if t.srtt == 0 {
		t.srtt, t.rttvar = r, r/2
		return
	}
	t.rttvar += (max(t.srtt-r, r-t.srtt) - t.rttvar) / 4
	t.srtt += (r - t.srtt) / 8
}
