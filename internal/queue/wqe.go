package queue

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// NamesLKey reports whether the WQE's SG list names lkey (INLINE data was
// copied when posted and names nothing).
func (w *SendWQE) NamesLKey(lkey uint32) bool {
	if w.WR.Flags&ibv.SendInline != 0 {
		return false
	}
	if w.Single {
		return w.SGE1.LKey == lkey
	}
	for _, s := range w.WR.SGList {
		if s.LKey == lkey {
			return true
		}
	}
	return false
}

// ReadMapBits bounds how far past the next expected response a READ's
// responses are placed out of order: a response further ahead is dropped
// (ooo_dropped) and asked for again with the hole before it. Twice the
// request window: a window's worth of READs' responses fit.
const ReadMapBits = 256

// DupThresh is how many responses past a hole must arrive before the hole
// counts as lost rather than reordered (TCP's duplicate-ACK threshold): a
// response overtaken by one or two others costs nothing. It is where the
// QP's reorder window starts.
const DupThresh = 3

// A path that reorders deeper than DupThresh makes a requester ask again
// for responses that were only late. As TCP's RACK (RFC 8985) with DSACK,
// each QP learns how deep its path reorders: a re-ask proves spurious when
// a second copy of a packet it asked for arrives (the original came after
// all, then the replay), and the window grows to twice the depth by which
// that original was overtaken (at least twice the window before), so that
// reordering about as deep costs nothing more. It returns to DupThresh
// after ReoPersist re-asks without a spurious one (RACK's reo_wnd_persist):
// a path that stopped reordering gets its prompt loss detection back.
// ReoMax bounds it: a hole past which ReoMax responses arrived is lost on
// any path, and a forged duplicate response can delay loss detection by no
// more than that.
const (
	ReoMax     = 32
	ReoPersist = 16
)

// ReorderWindow is a QP's adaptive DupThresh, and the latest re-asks it
// watches for a second copy (several may be out before the first copy of
// one comes back twice: all of them count).
type ReorderWindow struct {
	thresh  uint32 // zero: DupThresh
	persist uint8  // re-asks left before thresh returns to DupThresh
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

func (r *ReorderWindow) Threshold() uint32 {
	if r.thresh == 0 {
		return DupThresh
	}
	return r.thresh
}

// Asked notes a re-ask for PSNs from up to to.
func (r *ReorderWindow) Asked(from, to uint32) {
	if r.persist > 0 {
		r.persist--
		if r.persist == 0 {
			r.thresh = 0
		}
	}
	r.asks[r.next] = reAsk{from: from, to: to, open: true}
	r.next = (r.next + 1) % reoWatch
}

// Forget stops watching the re-asks out: the transport timer is about to
// ask again for what they asked for, and a second copy will prove nothing
// (Karn's ambiguity).
func (r *ReorderWindow) Forget() {
	for i := range r.asks {
		r.asks[i].open = false
	}
}

// find is the open re-ask that asked for psn, or nil.
func (r *ReorderWindow) find(psn uint32) *reAsk {
	for i := range r.asks {
		a := &r.asks[i]
		if a.open && PSNCmp(psn, a.from) >= 0 && PSNCmp(psn, a.to) < 0 {
			return a
		}
	}
	return nil
}

// Filled notes that the lowest hole, at psn, filled with depth PSNs past
// it already placed: if a re-ask asked for it and this was the original,
// that is how late it was.
func (r *ReorderWindow) Filled(psn, depth uint32) {
	if a := r.find(psn); a != nil && a.depth == 0 {
		a.depth = depth
	}
}

// Duplicate notes a READ response for psn that was already placed (or
// whose READ is complete); it reports whether that proved a re-ask
// spurious, and if so widens the window.
func (r *ReorderWindow) Duplicate(psn uint32) bool {
	a := r.find(psn)
	if a == nil {
		return false
	}
	a.open = false
	r.thresh = min(ReoMax, max(2*r.Threshold(), 2*a.depth))
	r.persist = ReoPersist
	return true
}

// ReadMap records which responses past the next expected one have been
// placed, a ring indexed by PSN.
type ReadMap [ReadMapBits / 64]uint64

func (m *ReadMap) Has(psn uint32) bool {
	i := psn % ReadMapBits
	return m[i/64]&(1<<(i%64)) != 0
}

func (m *ReadMap) Set(psn uint32) {
	i := psn % ReadMapBits
	m[i/64] |= 1 << (i % 64)
}

func (m *ReadMap) Clear(psn uint32) {
	i := psn % ReadMapBits
	m[i/64] &^= 1 << (i % 64)
}

// HeldAfter is the first PSN at or after from and before end whose
// response is placed; false if none is.
func (w *SendWQE) HeldAfter(from uint32) (uint32, bool) {
	for p := from; PSNCmp(p, w.SeenEnd) < 0; p = (p + 1) & 0xffffff {
		if w.Got.Has(p) {
			return p, true
		}
	}
	return 0, false
}

// HoleEnd is one past the last PSN w's next request asks for, from the PSN
// it waits for: the lowest hole's end (the next response placed), or the
// READ's end when nothing past it is placed. Holes only, never responses
// already placed: a run lost to an overflowing path is asked for run by
// run, and the responder's pace counts the runs of one READ together
// (pacing.go).
func (w *SendWQE) HoleEnd(from uint32) uint32 {
	if x, ok := w.HeldAfter(from); ok {
		return x
	}
	return (w.LastPSN + 1) & 0xffffff
}

// SendWQE is a posted send work request and its progress.
type SendWQE struct {
	WR       WR
	Length   uint32
	Segs     []Span // the memory of its SG list, resolved when it starts
	Single   bool   // one SGE, kept in sge1 and resolved into seg1 (no allocation)
	SGE1     ibv.SGE
	Seg1     Span
	Started  bool
	FirstPSN uint32
	LastPSN  uint32
	SentOff  uint32 // SEND/WRITE bytes packetised
	SentAll  bool
	ReadDone uint32 // READ bytes received
	// RespDone: every response of this READ or atomic has been placed; it
	// completes once the WQEs before it have.
	RespDone bool
	// ReadFrom is the PSN the latest request of this READ or atomic asked
	// from, ReadTo one past the last it asked for; retried says it was
	// asked again (see rerequest).
	ReadFrom, ReadTo uint32
	Retried          bool
	// A READ's responses past a hole (recovery.go): got marks those
	// placed past the one it waits for, SeenEnd is one past the highest
	// placed, and TailLost says the responses not yet placed are not on
	// their way any more (a later response, an ACK or the timer showed it).
	Got      ReadMap
	SeenEnd  uint32
	TailLost bool
	// AskSeen is one past the highest response of the latest request's
	// answer seen since it was sent (recovery.go, askHoles); AskAt is
	// when that request left, on the transport clock.
	AskSeen uint32
	AskAt   time.Time
	Inline  []byte // INLINE data, copied when posted
}

// Local returns the WQE's resolved local memory; buf backs the single-SGE case.
func (w *SendWQE) Local(buf *[1]Span) []Span {
	if !w.Single {
		return w.Segs
	}
	buf[0] = w.Seg1
	return buf[:]
}

// NextRespPSN is the PSN of the next response a READ or atomic WQE waits for.
func (w *SendWQE) NextRespPSN(mtu int) uint32 {
	return (w.FirstPSN + w.ReadDone/uint32(mtu)) & 0xffffff
}

// DataOpcode picks the SEND or WRITE opcode for a packet's place in its message.
func DataOpcode(op ibv.WROpcode, first, last, uc bool) wire.Opcode {
	var o wire.Opcode
	switch op {
	case ibv.WRSend, ibv.WRSendWithImm, ibv.WRSendWithInv:
		o = SegmentOpcode(first, last, wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast)
		if last && op == ibv.WRSendWithImm {
			o++ // SEND_LAST → LAST_WITH_IMM, SEND_ONLY → ONLY_WITH_IMM
		}
		if last && op == ibv.WRSendWithInv {
			o = wire.RCSendLastInv
			if first {
				o = wire.RCSendOnlyInv
			}
		}
	default:
		o = SegmentOpcode(first, last, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast)
		if last && op == ibv.WRRDMAWriteWithImm {
			o++
		}
	}
	if uc {
		o |= 0x20
	}
	return o
}

// SegmentOpcode picks ONLY, FIRST, MIDDLE or LAST for a packet's place in its message.
func SegmentOpcode(first, last bool, only, firstOp, middle, lastOp wire.Opcode) wire.Opcode {
	switch {
	case first && last:
		return only
	case first:
		return firstOp
	case last:
		return lastOp
	}
	return middle
}

// Seek has w's next packet be the one at PSN from: nothing of it if from
// is past it, the rest of it from there, or all of it.
func (w *SendWQE) Seek(from, mtu uint32) {
	switch {
	case PSNCmp(from, w.LastPSN) > 0:
		w.SentAll = true
	case IsReadOrAtomic(w.WR.Opcode):
		w.SentAll = w.RespDone
	case PSNCmp(from, w.FirstPSN) > 0:
		w.SentAll, w.SentOff = false, ((from-w.FirstPSN)&0xffffff)*mtu
	default:
		w.SentAll, w.SentOff = false, 0
	}
}
