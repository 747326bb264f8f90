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

package transport

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// Recovery turns pieces of selective recovery off, to measure what each
// is worth (verbs' BenchmarkLoss): the zero value runs them all, and all
// three off is go-back-N as rxe recovers.
type Recovery uint8

const (
	// NoReadHoles: a READ response past a gap is dropped and the READ asked
	// again from the gap to its end.
	NoReadHoles Recovery = 1 << iota
	// NoHold: the responder drops request packets past a hole.
	NoHold
	// NoProbe: a sequence NAK sends the requester back over every packet
	// from the NAKed one on.
	NoProbe
)

// placeRead places READ response p (already checked: it belongs to w, at
// or past the PSN w waits for, inside ReadMapBits) and moves w's
// contiguous part on past the responses placed before.
func (e *engine) placeRead(qp *queue.QP, w *queue.SendWQE, pkt *wire.Packet, segs []queue.Span) bool {
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
		e.counters.OOOHeld++
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

// askHoles asks again for the lowest hole of w's responses once it is
// known lost: responses past it (the QP's reorder window of them, or the
// end of a request's answer) arrived, or TailLost says its answer is over.
// At most one request per hole per round trip: while the request for the
// hole at the PSN w waits for is out, nothing more is asked; once its
// first responses are in, the rest of its answer is on its way in order,
// and only responses of that answer past a hole show it lost (those placed
// before the request arrived before it).
func (e *engine) askHoles(qp *queue.QP, w *queue.SendWQE) {
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
	e.counters.LostResponseRetry++
	if w.TailLost {
		e.counters.ReadReaskEnd++
	} else {
		e.counters.ReadReaskReorder++
	}
	t.RTTAt = time.Time{} // Karn: no round-trip sample across a retransmission
	e.sendReadAtomic(qp, w)
	t.Reo.Asked(w.ReadFrom, w.ReadTo)
}

// answerSeen notes READ response psn of w arriving, placed or not: one of
// the answer to w's latest request, if inside it. A second copy of a
// response the latest re-ask asked for shows the re-ask was spurious.
func (e *engine) answerSeen(qp *queue.QP, w *queue.SendWQE, psn uint32, dup bool) {
	if w != nil && queue.PSNCmp(psn, w.ReadFrom) >= 0 && queue.PSNCmp(psn, w.ReadTo) < 0 && queue.PSNCmp((psn+1)&0xffffff, w.AskSeen) > 0 {
		if w.AskSeen == w.ReadFrom && !w.AskAt.IsZero() {
			e.readRTTSample(&qp.Transport, e.dev.clock.Now().Sub(w.AskAt))
		}
		w.AskSeen = (psn + 1) & 0xffffff
	}
	if dup && qp.Transport.Reo.Duplicate(psn) {
		e.counters.SpuriousRetry++
	}
}

// askingHole reports whether go-back-N, outside a timer episode, leaves
// READ w alone: its lowest hole's request is out and its answer may be on
// its way (askHoles: at most one request per hole per round trip). A NAK
// or an ACK past w says nothing of that answer, which the responder sends
// after whatever it queued before the request came; asking again
// duplicated it (a NAK for a READ behind a hole sent every READ again,
// each answered in full). A lost request or answer is the timer's.
func askingHole(t *queue.Transport, w *queue.SendWQE) bool {
	return t.Timeouts == 0 && w.WR.Opcode == ibv.WRRDMARead && w.Retried && !w.RespDone && w.ReadFrom == w.NextRespPSN(t.MTU)
}

// readRTTSample takes the time from a READ request to its answer's first
// response into ReadRTT: the lowest recent one, which is the path's round
// trip and the responder's turnaround without a queue in front of the
// answer (most answers wait behind others'). A higher sample moves it up
// by a sixteenth of the difference, so a path that slowed is followed.
func (e *engine) readRTTSample(t *queue.Transport, d time.Duration) {
	switch {
	case d <= 0:
	case t.ReadRTT == 0 || d < t.ReadRTT:
		t.ReadRTT = d
	default:
		t.ReadRTT += (d - t.ReadRTT) / 16
	}
}

// readTailMin is the least a READ tail probe waits past the answer's due
// time: above an engine's wakeup latency (the tail-loss probe's floor).
const readTailMin = 100 * time.Microsecond

// readTailProbe shortens the transport timer once every READ outstanding
// waits only for the answer to its hole's request (askingHole), nothing
// else being on its way: the responder queues that answer behind what it
// was sending when the request came, so it is due one READ round trip
// after the request left, or at once if responses were still arriving
// then; past that by half a round trip (at least readTailMin) it was lost,
// or the request was. Without this such a stall waited the RTO (at least
// 1 ms, srtt counting each READ's wait behind the others'), which at 5%
// loss was a third of a 64 KiB READ stream's time. The expiry is the
// timer's (retry: the oldest READ's hole asked again, the timer backed
// off until a response comes). Only with retry_cnt 7: a finite one counts
// each expiry against the application's retries. A READ whose original
// request is unanswered is never a tail: a slow responder (rxe in a guest
// starts a 1 MiB READ's answer after a second) would be asked again.
func (e *engine) readTailProbe(qp *queue.QP) {
	t := &qp.Transport
	t.ReadTailAt = time.Time{}
	if t.Attr.RetryCnt != 7 || t.ReadRTT == 0 || t.TimerAt.IsZero() || t.Timeouts > 0 {
		return
	}
	now := e.dev.clock.Now()
	var at time.Time
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started {
			break
		}
		if w.RespDone {
			continue
		}
		var due time.Time
		switch {
		case w.WR.Opcode != ibv.WRRDMARead || !w.SentAll:
			return
		case w.AskSeen != w.ReadFrom:
			// Its latest request's answer began: the rest of it comes
			// back to back, behind this response.
			due = now.Add(max(t.ReadRTT, readTailMin))
		case askingHole(t, w):
			due = w.AskAt.Add(t.ReadRTT)
			if due.Before(now) {
				due = now
			}
			due = due.Add(max(t.ReadRTT/2, readTailMin))
		default:
			return // an answer not begun yet: perhaps a slow responder's
		}
		if due.After(at) {
			at = due
		}
	}
	if !at.IsZero() && at.Before(t.TimerAt) {
		t.TimerAt, t.ReadTailAt = at, at
	}
}

// shortReadsFrom reports whether every WQE started from PSN psn on is a
// READ answered by one packet.
func shortReadsFrom(t *queue.Transport, psn uint32) bool {
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started {
			break
		}
		if queue.PSNCmp(w.LastPSN, psn) < 0 {
			continue
		}
		if w.WR.Opcode != ibv.WRRDMARead || w.FirstPSN != w.LastPSN {
			return false
		}
	}
	return true
}
