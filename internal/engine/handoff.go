package engine

import (
	"sync"
	"sync/atomic"
)

// inbox holds frames other engines received for this engine's QPs. On a
// NIC whose RSS picks the queue by a hash of the addresses and ports, a
// QP's frames may all arrive on another queue than the one its flow
// transmits on; the receiving engine copies each into the QP's engine's
// inbox, and that engine handles it in its next step, so only the QP's
// own engine ever touches its transport state.
type inbox struct {
	mu     sync.Mutex
	frames [][]byte // waiting, oldest first
	free   [][]byte // buffers to reuse
	max    int      // the longest frame, the size of a buffer
	// waiting is set by put: take looks at it before taking the lock, so
	// an engine with nothing handed to it pays one atomic load per step.
	waiting atomic.Bool
}

// inboxCap bounds the frames waiting in an inbox, as an RX ring bounds
// a queue's: an engine that falls behind drops, it does not queue without
// bound.
const inboxCap = 1024

// put copies the frame, in its pieces, into the inbox; false if the inbox
// is full.
func (in *inbox) put(head, tail []byte) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.frames) >= inboxCap || len(head)+len(tail) > in.max {
		return false
	}
	var b []byte
	if n := len(in.free); n > 0 {
		b, in.free = in.free[n-1], in.free[:n-1]
	} else {
		b = make([]byte, 0, in.max)
	}
	in.frames = append(in.frames, append(append(b[:0], head...), tail...))
	in.waiting.Store(true)
	return true
}

// take swaps the waiting frames for dst (empty, to be filled next time).
func (in *inbox) take(dst [][]byte) [][]byte {
	if !in.waiting.Swap(false) {
		return dst[:0]
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	got := in.frames
	in.frames = dst[:0]
	return got
}

// recycle gives the buffers of frames taken back to the inbox.
func (in *inbox) recycle(frames [][]byte) {
	in.mu.Lock()
	in.free = append(in.free, frames...)
	in.mu.Unlock()
}

// handOff passes the frame being handled to the engine of its QP and rings
// it. The frame is counted there when handled, and here as handed off.
func (e *Engine) handOff(owner *Engine) {
	if !owner.inbox.put(e.rxHead, e.rxTail) {
		e.Counters.HandOffDrops++
		return
	}
	e.Counters.HandedOff++
	owner.ring()
}

// receiveHandedOff handles the frames other engines passed to this one and
// returns how many.
func (e *Engine) receiveHandedOff() int {
	frames := e.inbox.take(e.inFrames)
	if len(frames) == 0 {
		e.inFrames = frames // the inbox may have kept the other array
		return 0
	}
	e.handingOff = true
	for _, f := range frames {
		e.handleFrame(f)
	}
	e.handingOff = false
	e.pending.Flush() // the frames are recycled next
	e.inbox.recycle(frames)
	clear(frames)
	e.inFrames = frames[:0]
	return len(frames)
}
