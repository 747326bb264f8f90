package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
)

// CQ is a completion queue: a ring the engines fill and applications
// drain, from any goroutine. Pollers and engines never wait for each other;
// an empty poll costs two atomic loads.
type CQ struct {
	// progress runs a round of the engines: set on a BusyPoll device,
	// where an empty poll drives them.
	progress func()
	// events is the device's queue of asynchronous events (CQ overflow).
	events *eventQueue
	// depth is how many completions the CQ holds (changed by Resize under
	// both locks).
	depth atomic.Int64
	ring  []ibv.WorkCompletion
	// sink, if set, takes the completions instead of ring: a daemon's
	// client's ring (shared.go).
	sink CQSink
	head atomic.Uint64 // completions polled (advanced under pollMu)
	tail atomic.Uint64 // completions added (advanced under pushMu)
	// pushMu orders the engines that complete into the CQ; pollers never
	// take it.
	pushMu sync.Mutex
	// pollMu orders concurrent pollers among themselves, as ibv_poll_cq's
	// lock does; engines never take it.
	pollMu sync.Mutex
	err    atomic.Bool
	armed  atomic.Uint32 // notifyOff, notifyAny or notifySolicited
	event  chan struct{}

	// Owner is the API's object for this CQ, which events name.
	Owner any
}

// CreateCQ creates a completion queue holding up to depth completions.
func (d *NIC) CreateCQ(depth int) *CQ {
	cq := d.newCQ()
	cq.ring = make([]ibv.WorkCompletion, depth)
	cq.depth.Store(int64(depth))
	return cq
}

// newCQ is a CQ of the device, without its ring or sink.
func (d *NIC) newCQ() *CQ {
	cq := &CQ{events: &d.objs.events, event: make(chan struct{}, 1)}
	if d.cfg.BusyPoll {
		cq.progress = func() { d.Progress() }
	}
	return cq
}

// Resize makes the CQ hold depth completions, keeping the unpolled ones in
// order, as rxe_cq_resize_queue: EINVAL if more than depth are unpolled.
// Engines and pollers wait while it copies (it holds both their locks).
func (cq *CQ) Resize(depth int) error {
	cq.pushMu.Lock()
	defer cq.pushMu.Unlock()
	if cq.sink != nil {
		return fmt.Errorf("transport: a CQ with a sink resizes with ResizeSink: %w", ibv.ErrInvalid)
	}
	cq.pollMu.Lock()
	defer cq.pollMu.Unlock()
	h, t := cq.head.Load(), cq.tail.Load()
	if depth < 1 || uint64(depth) < t-h {
		return fmt.Errorf("transport: CQ of %d completions with %d unpolled: %w", depth, t-h, ibv.ErrInvalid)
	}
	// Each completion keeps its index: head and tail stay as they are.
	ring := make([]ibv.WorkCompletion, depth)
	for i := h; i != t; i++ {
		ring[i%uint64(depth)] = cq.ring[i%uint64(len(cq.ring))]
	}
	cq.ring = ring
	cq.depth.Store(int64(depth))
	return nil
}

// Poll moves up to len(wcs) completions into wcs and returns how many. On a
// BusyPoll NIC an empty CQ first runs a round of the engine (Progress).
func (cq *CQ) Poll(wcs []ibv.WorkCompletion) int {
	if cq.tail.Load() == cq.head.Load() {
		// A busy-polling application runs the engine as it spins.
		if cq.progress == nil {
			return 0
		}
		cq.progress()
		if cq.tail.Load() == cq.head.Load() {
			return 0
		}
	}
	cq.pollMu.Lock()
	h := cq.head.Load()
	k := int(min(uint64(len(wcs)), cq.tail.Load()-h))
	n := uint64(len(cq.ring))
	for i := range k {
		wcs[i] = cq.ring[(h+uint64(i))%n]
	}
	cq.head.Store(h + uint64(k))
	cq.pollMu.Unlock()
	return k
}

// ReqNotify arms the completion channel: the next completion added (with
// solicitedOnly, the next solicited or error one) signals Wait once.
func (cq *CQ) ReqNotify(solicitedOnly bool) {
	if solicitedOnly {
		cq.armed.Store(notifySolicited)
	} else {
		cq.armed.Store(notifyAny)
	}
}

// Wait blocks until the armed notification fires or ctx ends.
func (cq *CQ) Wait(ctx context.Context) error {
	select {
	case <-cq.event:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Overflowed reports whether completions were lost because the CQ was full.
func (cq *CQ) Overflowed() bool { return cq.err.Load() }

const (
	notifyOff uint32 = iota
	notifyAny
	notifySolicited
)

// push adds a completion; false means the CQ overflowed (it is then in error
// and the caller moves the QP to the error state, as ibverbs). Engines call
// it, under pushMu: QPs of several engines may share the CQ.
func (cq *CQ) push(wc ibv.WorkCompletion, solicited bool) bool {
	cq.pushMu.Lock()
	defer cq.pushMu.Unlock()
	if cq.sink != nil {
		return cq.pushSink(wc, solicited)
	}
	t := cq.tail.Load()
	if cq.err.Load() || t-cq.head.Load() >= uint64(len(cq.ring)) {
		if !cq.err.Swap(true) {
			cq.events.post(Event{Type: ibv.EventCQErr, CQ: cq})
		}
		return false
	}
	cq.ring[t%uint64(len(cq.ring))] = wc
	cq.tail.Store(t + 1)
	if a := cq.armed.Load(); a != notifyOff && (a == notifyAny || solicited || wc.Status != ibv.WCSuccess) &&
		cq.armed.CompareAndSwap(a, notifyOff) {
		select {
		case cq.event <- struct{}{}:
		default:
		}
	}
	return true
}

// pending is how many completions the CQ holds.
func (cq *CQ) pending() int { return int(cq.tail.Load() - cq.head.Load()) }

// Depth is how many completions the CQ holds.
func (cq *CQ) Depth() int { return int(cq.depth.Load()) }

// Unpolled is how many completions the CQ holds that no poller took yet.
func (cq *CQ) Unpolled() int { return cq.pending() }
