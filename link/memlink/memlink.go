// Package memlink is an in-memory link.Link: a pair of connected ends that
// carry Ethernet frames between two devices in one process, with seeded
// loss, duplication, reordering and corruption, for tests and benchmarks
// of the transport (as gVisor's link/channel).
package memlink

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/xdproce/xdproce/link"
)

// Impairment says what a Link does to frames it carries, per frame, from a
// seeded generator: the same seed and frame sequence give the same faults.
type Impairment struct {
	Drop, Duplicate, Corrupt, Reorder float64
	Seed                              uint64
}

// Link is one end of an in-memory link made by NewPair.
type Link struct {
	peer  *Link
	mu    sync.Mutex
	woken chan struct{} // Wake's signal, apart from frames' signal
	queue [][]byte      // frames waiting to be received here, at most QueueCap
	// overflow counts frames dropped because the queue was full, as a
	// NIC's RX ring drops them (RingDrops).
	overflow uint64
	held     []byte // a frame held back to be delivered after the next one
	// releaseHook runs before a receive batch's frames go back to the pool.
	releaseHook func()
	signal      chan struct{}
	imp         Impairment
	rng         *rand.Rand
	max         int
	stats       Stats
	// drop, if set, drops the frames it returns true for (tests' hook, under mu).
	drop func(frame []byte) bool

	// Frame buffers are recycled so that the link itself does not allocate
	// per frame (the engine benchmarks measure the engine). poolMu is a leaf
	// lock: the sending end takes it while holding its own mu.
	poolMu sync.Mutex
	pool   [][]byte
	// Receive-side scratch, used by the single receiving goroutine.
	batch [][]byte
	timer *time.Timer
}

// QueueCap bounds the frames waiting at a Link's receiving end, as an
// AF_XDP socket is bounded by the 2048 chunks it gives the kernel
// (ring.Config.RXFrames): a receiver that falls behind drops frames
// (Counters.RingDrops) instead of queueing them without bound, which no
// real link does.
const QueueCap = 2048

// Stats counts what a Link did to the frames sent through it.
type Stats struct {
	Sent, Dropped, Duplicated, Corrupted, Reordered uint64
}

// NewPair returns two connected in-memory links carrying frames of up
// to maxFrame bytes.
func NewPair(maxFrame int) (*Link, *Link) {
	a := &Link{signal: make(chan struct{}, 1), woken: make(chan struct{}, 1), max: maxFrame}
	b := &Link{signal: make(chan struct{}, 1), woken: make(chan struct{}, 1), max: maxFrame}
	a.peer, b.peer = b, a
	a.SetImpairment(Impairment{})
	b.SetImpairment(Impairment{})
	return a, b
}

// SetImpairment sets the faults applied to frames sent from this end.
func (l *Link) SetImpairment(imp Impairment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.imp = imp
	l.rng = rand.New(rand.NewPCG(imp.Seed, imp.Seed^0x9e3779b97f4a7c15))
}

// Stats returns what this end did to the frames it sent.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Send implements link.Link.
func (l *Link) Send(frames [][]byte) error {
	var small [32][]byte
	out := small[:0]
	l.mu.Lock()
	for _, f := range frames {
		l.stats.Sent++
		if l.drop != nil && l.drop(f) {
			l.stats.Dropped++
			continue
		}
		if l.imp.Drop > 0 && l.rng.Float64() < l.imp.Drop {
			l.stats.Dropped++
			continue
		}
		c := l.peer.copyFrame(f)
		if l.imp.Corrupt > 0 && l.rng.Float64() < l.imp.Corrupt && len(c) > 60 {
			c[42+l.rng.IntN(len(c)-42)] ^= 1 << l.rng.IntN(8)
			l.stats.Corrupted++
		}
		dup := l.imp.Duplicate > 0 && l.rng.Float64() < l.imp.Duplicate
		if l.imp.Reorder > 0 && l.held == nil && l.rng.Float64() < l.imp.Reorder {
			l.held = c
			l.stats.Reordered++
		} else {
			out = append(out, c)
			if l.held != nil {
				out = append(out, l.held)
				l.held = nil
			}
		}
		if dup {
			out = append(out, l.peer.copyFrame(f))
			l.stats.Duplicated++
		}
	}
	if l.held != nil && len(frames) == 0 {
		out, l.held = append(out, l.held), nil
	}
	l.mu.Unlock()
	if len(out) > 0 {
		l.peer.deliver(out)
	}
	return nil
}

// Flush delivers a frame held back for reordering.
func (l *Link) Flush() { _ = l.Send(nil) }

// copyFrame copies a frame in flight into a recycled buffer of the receiving
// end. It takes only the leaf poolMu: Send calls it while holding its own mu,
// and the two ends send concurrently.
func (l *Link) copyFrame(f []byte) []byte {
	l.poolMu.Lock()
	var b []byte
	if n := len(l.pool); n > 0 {
		b, l.pool = l.pool[n-1], l.pool[:n-1]
	}
	l.poolMu.Unlock()
	if cap(b) < len(f) {
		b = make([]byte, 0, max(len(f), l.max))
	}
	return append(b[:0], f...)
}

func (l *Link) deliver(frames [][]byte) {
	l.mu.Lock()
	n := min(len(frames), QueueCap-len(l.queue))
	l.queue = append(l.queue, frames[:n]...)
	l.overflow += uint64(len(frames) - n)
	l.mu.Unlock()
	if n < len(frames) {
		l.poolMu.Lock()
		l.pool = append(l.pool, frames[n:]...)
		l.poolMu.Unlock()
	}
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

// RingDrops is how many frames arrived to a full queue and were dropped.
func (l *Link) RingDrops() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.overflow
}

// Receive implements link.Link.
func (l *Link) Receive(max int, fn func(frame []byte)) (int, error) {
	l.mu.Lock()
	n := min(max, len(l.queue))
	l.batch = append(l.batch[:0], l.queue[:n]...)
	l.queue = append(l.queue[:0], l.queue[n:]...)
	l.mu.Unlock()
	for _, f := range l.batch {
		fn(f)
	}
	// A frame is valid only until Receive returns: the buffers go back to
	// the pool.
	if l.releaseHook != nil {
		l.releaseHook()
	}
	l.poolMu.Lock()
	l.pool = append(l.pool, l.batch...)
	l.poolMu.Unlock()
	clear(l.batch)
	return n, nil
}

// Wake implements link.Link.
func (l *Link) Wake() {
	select {
	case l.woken <- struct{}{}:
	default:
	}
}

// Wait implements link.Link.
func (l *Link) Wait(d time.Duration) {
	l.mu.Lock()
	ready := len(l.queue) > 0
	l.mu.Unlock()
	if ready {
		return
	}
	if l.timer == nil {
		l.timer = time.NewTimer(d)
	} else {
		l.timer.Reset(d)
	}
	defer l.timer.Stop()
	select {
	case <-l.signal:
	case <-l.woken:
	case <-l.timer.C:
	}
}

// MaxFrame implements link.Link.
func (l *Link) MaxFrame() int { return l.max }

// SetReleaseHook implements link.ReleaseHooker.
func (l *Link) SetReleaseHook(f func()) { l.releaseHook = f }

// SetDropFilter makes this end drop, before any impairment, the frames f
// returns true for (nil: none); tests use it to lose chosen packets.
func (l *Link) SetDropFilter(f func(frame []byte) bool) {
	l.mu.Lock()
	l.drop = f
	l.mu.Unlock()
}

var (
	_ link.Link          = (*Link)(nil)
	_ link.ReleaseHooker = (*Link)(nil)
	_ link.RingDropper   = (*Link)(nil)
)

// Inject queues frames at this end as if its peer had sent them, past the
// impairments: tests forge packets with it.
func (l *Link) Inject(frames [][]byte) { l.deliver(frames) }

// Peer is the other end of the pair.
func (l *Link) Peer() *Link { return l.peer }

// Queued is how many frames wait to be received at this end.
func (l *Link) Queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}
