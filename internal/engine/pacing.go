package engine

import (
	"time"

	"github.com/xdproce/xdproce/internal/queue"
)

// readStarting notes, with one clock read, the READ response about to be
// sent for qp, of res's PSNs from on: a new READ ends the previous
// response's sample.
func (e *Engine) readStarting(qp *queue.QP, res *queue.RespResource, from uint32, kind readKind) {
	p := &qp.Transport.Pace
	last := res.LastPSN
	alone := !qp.Transport.Replying()
	now := time.Now()
	if kind == readNew {
		p.Requested(now, alone)
		p.Ep = queue.LossEpisode{First: from, Pkts: (last-from)&0xffffff + 1}
	}
	if (kind == readResume || kind == readHole) && alone && from != res.FirstPSN {
		// Every response had left, and one is asked for again from
		// past its start: its head arrived, its tail (or a run inside
		// it) did not (a request duplicated on the way, or a requester
		// whose timer found nothing at all, asks from the start). Only
		// a request that resumes the READ or asks for a hole exactly
		// (address and length as a requester computes them) counts: a
		// third party who learnt an rkey and guessed a PSN inside a held
		// READ would otherwise turn the pace on, and cut it by a quarter
		// with each further copy, for nothing but a forged packet; it
		// must know the READ's address as well.
		if p.AskedAgain(res.FirstPSN, res.LastPSN, from, last) {
			e.Counters.ReadRetryPaced++
		}
	}
	p.Started(now, from, last, alone)
}

// paceAllows reports whether qp may send a READ response packet now; if
// not, the engine's next wait ends when it may.
func (e *Engine) paceAllows(qp *queue.QP) bool {
	p := &qp.Transport.Pace
	if !p.Pacing() {
		return true
	}
	if p.Take(time.Now()) {
		return true
	}
	if due := p.Due(); e.paceDue.IsZero() || due.Before(e.paceDue) {
		e.paceDue = due
	}
	return false
}
