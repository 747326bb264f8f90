package verbs

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Link is the engine's only view of the network: it sends and receives whole
// Ethernet frames. AF_XDP sockets implement it for real devices; MemLink pairs
// do it in memory for tests.
type Link interface {
	// Send transmits the frames; they may be reused when Send returns.
	Send(frames [][]byte) error
	// Receive hands each frame that has arrived to fn, up to max frames,
	// without blocking, and returns how many it handed. A frame is valid only
	// during its call.
	Receive(max int, fn func(frame []byte)) (int, error)
	// Wait blocks until a frame may be ready, Wake is called, or d passes.
	Wait(d time.Duration)
	// Wake makes a Wait in progress, or the next one, return at once. Any
	// goroutine may call it: it is the device's doorbell.
	Wake()
	// MaxFrame is the largest frame Send accepts.
	MaxFrame() int
}

// frameLender is a Link that lends its own transmit buffers, so the engine
// builds each frame where the NIC reads it (for AF_XDP, in UMEM) instead of
// building it aside and having Send copy it.
type frameLender interface {
	// TXBuffer returns a buffer of at least MaxFrame bytes for the next
	// frame, or nil when none is free.
	TXBuffer() []byte
	// CommitTX queues the frame of n bytes built in the last TXBuffer.
	CommitTX(n int)
	// FlushTX transmits the committed frames.
	FlushTX() error
}

// Clock tells the engine the time; tests inject a fake one.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Impairment says what a MemLink does to frames it carries, per frame, from a
// seeded generator: the same seed and frame sequence give the same faults.
type Impairment struct {
	Drop, Duplicate, Corrupt, Reorder float64
	Seed                              uint64
}

// MemLink is one end of an in-memory link made by NewMemLinkPair.
type MemLink struct {
	peer  *MemLink
	mu    sync.Mutex
	woken chan struct{} // Wake's signal, apart from frames' signal
	queue [][]byte      // frames waiting to be received here, at most queueCap
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
	stats       MemLinkStats
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

// queueCap bounds the frames waiting at a MemLink's receiving end, as an
// AF_XDP socket is bounded by the 2048 chunks it gives the kernel
// (ring.Config.RXFrames): a receiver that falls behind drops frames
// (Counters.RingDrops) instead of queueing them without bound, which no
// real link does.
const queueCap = 2048

// MemLinkStats counts what a MemLink did to the frames sent through it.
type MemLinkStats struct {
	Sent, Dropped, Duplicated, Corrupted, Reordered uint64
}

// NewMemLinkPair returns two connected in-memory links carrying frames of up
// to maxFrame bytes.
func NewMemLinkPair(maxFrame int) (*MemLink, *MemLink) {
	a := &MemLink{signal: make(chan struct{}, 1), woken: make(chan struct{}, 1), max: maxFrame}
	b := &MemLink{signal: make(chan struct{}, 1), woken: make(chan struct{}, 1), max: maxFrame}
	a.peer, b.peer = b, a
	a.SetImpairment(Impairment{})
	b.SetImpairment(Impairment{})
	return a, b
}

// SetImpairment sets the faults applied to frames sent from this end.
func (l *MemLink) SetImpairment(imp Impairment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.imp = imp
	l.rng = rand.New(rand.NewPCG(imp.Seed, imp.Seed^0x9e3779b97f4a7c15))
}

// Stats returns what this end did to the frames it sent.
func (l *MemLink) Stats() MemLinkStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Send implements Link.
func (l *MemLink) Send(frames [][]byte) error {
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
func (l *MemLink) Flush() { _ = l.Send(nil) }

// copyFrame copies a frame in flight into a recycled buffer of the receiving
// end. It takes only the leaf poolMu: Send calls it while holding its own mu,
// and the two ends send concurrently.
func (l *MemLink) copyFrame(f []byte) []byte {
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

func (l *MemLink) deliver(frames [][]byte) {
	l.mu.Lock()
	n := min(len(frames), queueCap-len(l.queue))
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
func (l *MemLink) RingDrops() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.overflow
}

// Receive implements Link.
func (l *MemLink) Receive(max int, fn func(frame []byte)) (int, error) {
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

// Wake implements Link.
func (l *MemLink) Wake() {
	select {
	case l.woken <- struct{}{}:
	default:
	}
}

// Wait implements Link.
func (l *MemLink) Wait(d time.Duration) {
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

// MaxFrame implements Link.
func (l *MemLink) MaxFrame() int { return l.max }

// releaseHooker is a Link whose received frames stay valid until the end
// of the receive call; the hook runs just before they are released, so that
// an engine can act on the whole batch while its frames are still there.
type releaseHooker interface{ SetReleaseHook(func()) }

// SetReleaseHook implements releaseHooker.
func (l *MemLink) SetReleaseHook(f func()) { l.releaseHook = f }
