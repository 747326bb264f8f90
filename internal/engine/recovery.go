// Selective recovery of READ responses (docs/recovery.md): a requester
// places a READ response that arrives after a gap at the offset its PSN
// gives, and asks again only for the holes, lowest first, with a new READ
// request for the missing range (PSN the hole's first, RETH the hole's
// address and length). A go-back-N responder (rxe) answers a READ request
// that repeats part of an earlier one from its responder resources, and
// it accepts only requests whose address does not go below the last one
// it answered (rxe's duplicate_request resets the resource's va_org):
// holes are asked for in ascending order, the next one once the one below
// it has filled, so no request goes below an earlier one.

package engine

import (
	"time"

	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// PlaceRead places READ response p (already checked: it belongs to w, at
// or past the PSN w waits for, inside ReadMapBits) and moves w's
// contiguous part on past the responses placed before.
func (e *Engine) placeRead(qp *queue.QP, w *queue.SendWQE, pkt *wire.Packet, segs []queue.Span) bool {
	t := &qp.Transport
	p := pkt.BTH.PSN
	mtu := uint32(t.MTU)
	off := ((p - w.FirstPSN) & 0xffffff) * mtu
	if !queue.ScatterPayload(segs, off, pkt, &e.pending) {
		return false
	}
	if queue.PSNCmp((p+1)&0xffffff, w.SeenEnd) > 0 {
		w.SeenEnd = (p + 1) & 0xffffff
	}
	base := w.NextRespPSN(t.MTU)
	if p != base {
		e.Counters.OOOHeld++
		w.Got.Set(p)
		return true
	}
	t.Reo.Filled(p, (w.SeenEnd-p-1)&0xffffff)
	next := (p + 1) & 0xffffff
	for queue.PSNCmp(next, w.SeenEnd) < 0 && w.Got.Has(next) {
		w.Got.Clear(next)
		next = (next + 1) & 0xffffff
	}
	if queue.PSNCmp(next, w.SeenEnd) > 0 {
		w.SeenEnd = next
	}
	w.ReadDone = min(w.Length, ((next-w.FirstPSN)&0xffffff)*mtu)
	w.RespDone = next == (w.LastPSN+1)&0xffffff
	return true
}

// AskHoles asks again for the lowest hole of w's responses once it is
// known lost: responses past it (the QP's reorder window of them, or the
// end of a request's answer) arrived, or TailLost says its answer is over.
// At most one request per hole per round trip: while the request for the
// hole at the PSN w waits for is out, nothing more is asked; once its
// first responses are in, the rest of its answer is on its way in order,
// and only responses of that answer past a hole show it lost (those placed
// before the request arrived before it).
func (e *Engine) askHoles(qp *queue.QP, w *queue.SendWQE) {
	if w.RespDone || !w.Started || !w.SentAll {
		return
	}
	t := &qp.Transport
	base := w.NextRespPSN(t.MTU)
	if w.Retried && w.ReadFrom == base {
		return
	}
	if !w.TailLost {
		x, ok := w.HeldAfter(base)
		if !ok {
			return
		}
		seen := w.SeenEnd
		if queue.PSNCmp(base, w.ReadTo) < 0 {
			seen = w.AskSeen
		}
		if queue.PSNCmp(seen, x) <= 0 || (seen-x)&0xffffff < t.Reo.Threshold() {
			return // perhaps only overtaken
		}
	}
	w.Retried = true
	e.Counters.LostResponseRetry++
	if w.TailLost {
		e.Counters.ReadReaskEnd++
	} else {
		e.Counters.ReadReaskReorder++
	}
	t.RTTAt = time.Time{} // Karn: no round-trip sample across a retransmission
	e.sendReadAtomic(qp, w)
	t.Reo.Asked(w.ReadFrom, w.ReadTo)
}

// AnswerSeen notes READ response psn of w arriving, placed or not: one of
// the answer to w's latest request, if inside it. A second copy of a
// response the latest re-ask asked for shows the re-ask was spurious.
func (e *Engine) answerSeen(qp *queue.QP, w *queue.SendWQE, psn uint32, dup bool) {
	if w != nil && queue.PSNCmp(psn, w.ReadFrom) >= 0 && queue.PSNCmp(psn, w.ReadTo) < 0 && queue.PSNCmp((psn+1)&0xffffff, w.AskSeen) > 0 {
		qp.Transport.ReadRTTSample(w, e.now()) // its answer's first response?
		w.AskSeen = (psn + 1) & 0xffffff
	}
	if dup && qp.Transport.Reo.Duplicate(psn) {
		e.Counters.SpuriousRetry++
	}
}
