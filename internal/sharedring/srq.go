package sharedring

import (
	"errors"
	"sync"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/uverbs"
)

// SRQ is what the engines keep of an SRQ's shared ring: a
// transport.SRQSource. Whichever engine gets its mutex first pumps it.
type SRQ struct {
	mu     sync.Mutex
	ring   *uverbs.Ring
	taken  uint32
	broken bool // a malformed WQE: the SRQ takes no more (SRQ_ERR raised)
	slotDecoder
}

// NewSRQ is the source of an SRQ whose client posts to ring (checked by
// the caller).
func NewSRQ(ring *uverbs.Ring) *SRQ {
	return &SRQ{ring: ring, slotDecoder: slotDecoder{slot: make([]byte, ring.SlotSize())}}
}

// Slots is how many work requests the ring holds: the SRQ cannot grow
// past it.
func (sh *SRQ) Slots() uint32 { return sh.ring.Slots() }

// Pump takes what the client posted into s, on the engine p, unless
// another engine is at it.
func (sh *SRQ) Pump(p queue.Port, s *queue.SRQ) bool {
	if !sh.mu.TryLock() {
		return false // another engine is at it
	}
	busy := !sh.broken && sh.pump(p, s)
	sh.publishConsumer(s)
	sh.mu.Unlock()
	return busy
}

// Pending reports whether the client posted since the engines last looked.
func (sh *SRQ) Pending() bool {
	if !sh.mu.TryLock() {
		return false
	}
	pending := !sh.broken && sh.ring.Producer() != sh.taken
	sh.mu.Unlock()
	return pending
}

// publishConsumer stores the ring's consumer index: the slots taken from
// it less the receives taken and not yet retired. The caller holds sh.mu,
// so the stores of several engines go in order and never go back (taken
// and used move together under it; retirements only raise the index).
func (sh *SRQ) publishConsumer(s *queue.SRQ) {
	if c := sh.taken - uint32(s.Outstanding()); sh.ring.Consumer() != c {
		sh.ring.SetConsumer(c)
	}
}

// Free publishes the slot of a receive the SRQ's QP just retired, before
// its completion becomes visible, as QP.Free does for a QP's own rings: a
// client that polls the completion and posts into a full SRQ at once must
// find room. It waits for the SRQ's mutex: the engine holding it (pumping,
// or retiring a receive of a QP it serves) may have read the count before
// this retirement, so skipping the store when TryLock fails could leave
// the completion ahead of the index. The holder never waits for anything
// an engine holds while it retires.
func (sh *SRQ) Free(s *queue.SRQ) {
	sh.mu.Lock()
	sh.publishConsumer(s)
	sh.mu.Unlock()
}

func (sh *SRQ) pump(p queue.Port, s *queue.SRQ) bool {
	prod := sh.ring.Producer()
	if prod-sh.taken > sh.ring.Slots() {
		sh.malformed(p, s)
		return false
	}
	busy := false
	for sh.taken != prod {
		one := [1]ibv.RecvWR{}
		var err error
		if one[0], err = sh.recv(sh.ring, sh.taken); err == nil {
			_, err = s.PostRecv(one[:])
		}
		if errors.Is(err, ibv.ErrNoMem) {
			break
		}
		sh.taken++
		busy = true
		if err != nil {
			sh.malformed(p, s)
			break
		}
	}
	return busy
}

// malformed stops taking from an SRQ whose client wrote a malformed WQE,
// and tells the client (IBV_EVENT_SRQ_ERR).
func (sh *SRQ) malformed(p queue.Port, s *queue.SRQ) {
	sh.broken = true
	p.MalformedSRQ(s)
}
