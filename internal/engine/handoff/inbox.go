package handoff

import (
	"sync"
	"sync/atomic"
)

// Inbox holds frames other engines received for this engine's QPs. On a
// NIC whose RSS picks the queue by a hash of the addresses and ports, a
// QP's frames may all arrive on another queue than the one its flow
// transmits on; the receiving engine copies each into the QP's engine's
// inbox, and that engine handles it in its next step, so only the QP's
// own engine ever touches its transport state.
type Inbox struct {
	mu     sync.Mutex
	frames [][]byte // waiting, oldest first
	free   [][]byte // buffers to reuse
	Max    int      // the longest frame, the size of a buffer
	// waiting is set by put: take looks at it before taking the lock, so
	// an engine with nothing handed to it pays one atomic load per step.
	waiting atomic.Bool
}

// inboxCap bounds the frames waiting in an inbox, as an RX ring bounds
// a queue's: an engine that falls behind drops, it does not queue without
// bound.
const inboxCap = 1024

// Put copies the frame, in its pieces, into the inbox; false if the inbox
// is full.
func (in *Inbox) Put(head, tail []byte) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.frames) >= inboxCap || len(head)+len(tail) > in.Max {
		return false
	}
	var b []byte
	if n := len(in.free); n > 0 {
		b, in.free = in.free[n-1], in.free[:n-1]
	} else {
		b = make([]byte, 0, in.Max)
	}
	in.frames = append(in.frames, append(append(b[:0], head...), tail...))
	in.waiting.Store(true)
	return true
}

// Take swaps the waiting frames for dst (empty, to be filled next time).
func (in *Inbox) Take(dst [][]byte) [][]byte {
	if !in.waiting.Swap(false) {
		return dst[:0]
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	got := in.frames
	in.frames = dst[:0]
	return got
}

// Recycle gives the buffers of frames taken back to the inbox.
func (in *Inbox) Recycle(frames [][]byte) {
	in.mu.Lock()
	in.free = append(in.free, frames...)
	in.mu.Unlock()
}
