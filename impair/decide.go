package impair

import (
	"math"
	"time"
)

// Independent draws per packet, so changing one rate never shifts the
// decisions of another.
const (
	streamDrop = iota + 1
	streamDuplicate
	streamCorrupt
	streamReorder
	streamCorruptWhere
)

// threshold turns a probability into a comparison against a uniform 64-bit
// draw: the event happens when draw < limit, or always.
type threshold struct {
	limit  uint64
	always bool
}

func newThreshold(p float64) threshold {
	switch {
	case p <= 0:
		return threshold{}
	case p >= 1:
		return threshold{always: true}
	}
	v := math.Ldexp(p, 64)
	if v >= math.Ldexp(1, 64) {
		return threshold{limit: math.MaxUint64}
	}
	return threshold{limit: uint64(v)}
}

func (t threshold) hit(draw uint64) bool { return t.always || draw < t.limit }

// settings is Config compiled for the per-packet path; the forwarder loads
// a new one atomically once per batch.
type settings struct {
	seed                              uint64
	drop, duplicate, corrupt, reorder threshold
	distance                          uint64
	holdTimeout                       time.Duration
	active                            bool // any rate above zero
}

func compile(c Config) *settings {
	s := &settings{
		seed:        c.Seed,
		drop:        newThreshold(c.Drop),
		duplicate:   newThreshold(c.Duplicate),
		corrupt:     newThreshold(c.Corrupt),
		reorder:     newThreshold(c.Reorder),
		distance:    uint64(c.ReorderDistance),
		holdTimeout: c.HoldTimeout,
		active:      c.Drop > 0 || c.Duplicate > 0 || c.Corrupt > 0 || c.Reorder > 0,
	}
	if s.distance == 0 {
		s.distance = DefaultReorderDistance
	}
	if s.holdTimeout == 0 {
		s.holdTimeout = DefaultHoldTimeout
	}
	return s
}

// mix64 is SplitMix64's finaliser: a bijection with good avalanche, so
// consecutive inputs give independent-looking outputs.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// draw is the stream'th uniform 64-bit value for packet seq: a pure
// function of (seed, seq, stream), which is what makes runs replayable.
func draw(seed, seq uint64, stream uint64) uint64 {
	base := mix64(seed + 0x9e3779b97f4a7c15*(seq+1))
	return mix64(base ^ (stream * 0xd1b54a32d192ed03))
}

// decide fills in what to do with packet seq whose UDP payload is
// payloadLen bytes long. No allocation, no state.
func (s *settings) decide(seq uint64, payloadLen int) (a Action, off int, mask byte) {
	if !s.active {
		return 0, 0, 0
	}
	if s.drop.hit(draw(s.seed, seq, streamDrop)) {
		return Dropped, 0, 0
	}
	if s.duplicate.hit(draw(s.seed, seq, streamDuplicate)) {
		a |= Duplicated
	}
	if payloadLen > 0 && s.corrupt.hit(draw(s.seed, seq, streamCorrupt)) {
		w := draw(s.seed, seq, streamCorruptWhere)
		a |= Corrupted
		off = int(w % uint64(payloadLen))
		mask = 1 << ((w >> 32) & 7)
	}
	if s.reorder.hit(draw(s.seed, seq, streamReorder)) {
		a |= Reordered
	}
	return a, off, mask
}

// Decide returns the decision an injector configured with c makes for its
// seq'th RoCEv2 packet (counting from 0 at Attach) whose UDP payload is
// payloadLen bytes long. Digest is left zero. It lets a test predict or
// check an injector's log; c must be valid.
func Decide(c Config, seq uint64, payloadLen int) Decision {
	a, off, mask := compile(c).decide(seq, payloadLen)
	return Decision{Seq: seq, Action: a, Offset: off, Mask: mask, Len: payloadLen}
}
