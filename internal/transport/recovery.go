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
// response overtaken by one or two others costs nothing. It is where the
// QP's reorder window starts.
const dupThresh = 3

// A path that reorders deeper than dupThresh makes a requester ask again
// for responses that were only late. As TCP's RACK (RFC 8985) with DSACK,
// each QP learns how deep its path reorders: a re-ask proves spurious when
// a second copy of a packet it asked for arrives (the original came after
// all, then the replay), and the window grows to twice the depth by which
// that original was overtaken (at least twice the window before), so that
// reordering about as deep costs nothing more. It returns to dupThresh
// after reoPersist re-asks without a spurious one (RACK's reo_wnd_persist):
// a path that stopped reordering gets its prompt loss detection back.
// reoMax bounds it: a hole past which reoMax responses arrived is lost on
// any path, and a forged duplicate response can delay loss detection by no
// more than that.
const (
	reoMax     = 32
	reoPersist = 16
)

// reorderWindow is a QP's adaptive dupThresh, and the latest re-asks it
// watches for a second copy (several may be out before the first copy of
// one comes back twice: all of them count).
type reorderWindow struct {
	thresh  uint32 // zero: dupThresh
	persist uint8  // re-asks left before thresh returns to dupThresh
	asks    [reoWatch]reAsk
	next    uint8 // the slot the next re-ask takes
}

// reoWatch is how many of the latest re-asks are watched.
const reoWatch = 4

// reAsk is one re-ask watched: the PSNs it asked for, from up to to; open
// says no copy of them has arrived twice yet; depth is how many PSNs past
// from had arrived when from filled.
type reAsk struct {
	from, to uint32
	open     bool
	depth    uint32
}

func (r *reorderWindow) threshold() uint32 {
	if r.thresh == 0 {
		return dupThresh
	}
	return r.thresh
}

// asked notes a re-ask for PSNs from up to to.
func (r *reorderWindow) asked(from, to uint32) {
	if r.persist > 0 {
		r.persist--
		if r.persist == 0 {
			r.thresh = 0
		}
	}
	r.asks[r.next] = reAsk{from: from, to: to, open: true}
	r.next = (r.next + 1) % reoWatch
}

// forget stops watching the re-asks out: the transport timer is about to
// ask again for what they asked for, and a second copy will prove nothing
// (Karn's ambiguity).
func (r *reorderWindow) forget() {
	for i := range r.asks {
		r.asks[i].open = false
	}
}

// find is the open re-ask that asked for psn, or nil.
func (r *reorderWindow) find(psn uint32) *reAsk {
	for i := range r.asks {
		a := &r.asks[i]
		if a.open && psnCmp(psn, a.from) >= 0 && psnCmp(psn, a.to) < 0 {
			return a
		}
	}
	return nil
}

// filled notes that the lowest hole, at psn, filled with depth PSNs past
// it already placed: if a re-ask asked for it and this was the original,
// that is how late it was.
func (r *reorderWindow) filled(psn, depth uint32) {
	if a := r.find(psn); a != nil && a.depth == 0 {
		a.depth = depth
	}
}

// duplicate notes a READ response for psn that was already placed (or
// whose READ is complete); it reports whether that proved a re-ask
// spurious, and if so widens the window.
func (r *reorderWindow) duplicate(psn uint32) bool {
	a := r.find(psn)
	if a == nil {
		return false
	}
	a.open = false
	r.thresh = min(reoMax, max(2*r.threshold(), 2*a.depth))
	r.persist = reoPersist
	return true
}

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
// READ's end when nothing past it is placed. Holes only, never responses
// already placed: a run lost to an overflowing path is asked for run by
// run, and the responder's pace counts the runs of one READ together
// (pacing.go).
func (w *sendWQE) holeEnd(from uint32) uint32 {
	if x, ok := w.heldAfter(from); ok {
		return x
	}
	return (w.lastPSN + 1) & 0xffffff
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
	t.reo.filled(p, (w.seenEnd-p-1)&0xffffff)
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
// known lost: responses past it (the QP's reorder window of them, or the
// end of a request's answer) arrived, or tailLost says its answer is over.
// At most one request per hole per round trip: while the request for the
// hole at the PSN w waits for is out, nothing more is asked; once its
// first responses are in, the rest of its answer is on its way in order,
// and only responses of that answer past a hole show it lost (those placed
// before the request arrived before it).
func (e *engine) askHoles(qp *QP, w *sendWQE) {
	if w.respDone || !w.started || !w.sentAll {
		return
	}
	t := &qp.t
	base := w.nextRespPSN(t.mtu)
	if w.retried && w.readFrom == base {
		return
	}
	if !w.tailLost {
		x, ok := w.heldAfter(base)
		if !ok {
			return
		}
		seen := w.seenEnd
		if psnCmp(base, w.readTo) < 0 {
			seen = w.askSeen
		}
		if psnCmp(seen, x) <= 0 || (seen-x)&0xffffff < t.reo.threshold() {
			return // perhaps only overtaken
		}
	}
	w.retried = true
	e.counters.LostResponseRetry++
	t.rttAt = time.Time{} // Karn: no round-trip sample across a retransmission
	e.sendReadAtomic(qp, w)
	t.reo.asked(w.readFrom, w.readTo)
}

// answerSeen notes READ response psn of w arriving, placed or not: one of
// the answer to w's latest request, if inside it. A second copy of a
// response the latest re-ask asked for shows the re-ask was spurious.
func (e *engine) answerSeen(qp *QP, w *sendWQE, psn uint32, dup bool) {
	if w != nil && psnCmp(psn, w.readFrom) >= 0 && psnCmp(psn, w.readTo) < 0 && psnCmp((psn+1)&0xffffff, w.askSeen) > 0 {
		w.askSeen = (psn + 1) & 0xffffff
	}
	if dup && qp.t.reo.duplicate(psn) {
		e.counters.SpuriousRetry++
	}
}
