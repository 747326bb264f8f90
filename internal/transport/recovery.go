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

// readMapBits bounds how far past the next expected response a READ's
// responses are placed out of order: a response further ahead is dropped
// (ooo_dropped) and asked for again with the hole before it. Twice the
// request window: a window's worth of READs' responses fit.
const readMapBits = 256

// dupThresh is how many responses past a hole must arrive before the hole
// counts as lost rather than reordered (TCP's duplicate-ACK threshold): a
// response overtaken by one or two others costs nothing.
const dupThresh = 3

// readMap records which responses past the next expected one have been
// placed, a ring indexed by PSN.
type readMap [readMapBits / 64]uint64

func (m *readMap) has(psn uint32) bool {
	i := psn % readMapBits
	return m[i/64]&(1<<(i%64)) != 0
}

func (m *readMap) set(psn uint32) {
	i := psn % readMapBits
	m[i/64] |= 1 << (i % 64)
}

func (m *readMap) clear(psn uint32) {
	i := psn % readMapBits
	m[i/64] &^= 1 << (i % 64)
}

// heldAfter is the first PSN at or after from and before end whose
// response is placed; false if none is.
func (w *sendWQE) heldAfter(from uint32) (uint32, bool) {
	for p := from; psnCmp(p, w.seenEnd) < 0; p = (p + 1) & 0xffffff {
		if w.got.has(p) {
			return p, true
		}
	}
	return 0, false
}

// holeEnd is one past the last PSN w's next request asks for, from the PSN
// it waits for: the lowest hole's end (the next response placed), or the
// READ's end when nothing past it is placed or when more is missing than
// placed (a path that overflowed loses most of a burst, not single
// packets: one request for the rest costs less than a round trip per
// hole, and a responder paces what follows: pacing.go).
func (w *sendWQE) holeEnd(from uint32) uint32 {
	end := (w.lastPSN + 1) & 0xffffff
	x, ok := w.heldAfter(from)
	if !ok {
		return end
	}
	held := 0
	for p := x; psnCmp(p, w.seenEnd) < 0; p = (p + 1) & 0xffffff {
		if w.got.has(p) {
			held++
		}
	}
	if missing := int((w.seenEnd-from)&0xffffff) - held; missing > held {
		return end
	}
	return x
}

// placeRead places READ response p (already checked: it belongs to w, at
// or past the PSN w waits for, inside readMapBits) and moves w's
// contiguous part on past the responses placed before.
func (e *engine) placeRead(qp *QP, w *sendWQE, pkt *wire.Packet, segs []span) bool {
	t := &qp.t
	p := pkt.BTH.PSN
	mtu := uint32(t.mtu)
	off := ((p - w.firstPSN) & 0xffffff) * mtu
	if !scatterPayload(segs, off, pkt, &e.pending) {
		return false
	}
	if psnCmp((p+1)&0xffffff, w.seenEnd) > 0 {
		w.seenEnd = (p + 1) & 0xffffff
	}
	base := w.nextRespPSN(t.mtu)
	if p != base {
		e.counters.OOOHeld++
		w.got.set(p)
		return true
	}
	next := (p + 1) & 0xffffff
	for psnCmp(next, w.seenEnd) < 0 && w.got.has(next) {
		w.got.clear(next)
		next = (next + 1) & 0xffffff
	}
	if psnCmp(next, w.seenEnd) > 0 {
		w.seenEnd = next
	}
	w.readDone = min(w.length, ((next-w.firstPSN)&0xffffff)*mtu)
	w.respDone = next == (w.lastPSN+1)&0xffffff
	return true
}

// askHoles asks again for the lowest hole of w's responses once it is
// known lost: responses past it (dupThresh of them, or the end of a
// request's answer) arrived, or tailLost says its answer is over. At most
// one request per hole per round trip: while the request for the hole at
// the PSN w waits for is out, nothing more is asked.
func (e *engine) askHoles(qp *QP, w *sendWQE) {
	if w.respDone || !w.started || !w.sentAll {
		return
	}
	base := w.nextRespPSN(qp.t.mtu)
	if w.retried && w.readFrom == base {
		return
	}
	if x, ok := w.heldAfter(base); ok {
		if !w.tailLost && (w.seenEnd-x)&0xffffff < dupThresh {
			return // perhaps only overtaken
		}
	} else if !w.tailLost {
		return
	}
	w.retried = true
	e.counters.LostResponseRetry++
	qp.t.rttAt = time.Time{} // Karn: no round-trip sample across a retransmission
	e.sendReadAtomic(qp, w)
}
