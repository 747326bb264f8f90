package queue

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
	// Progress runs a round of the engines: set on a BusyPoll device,
	// where an empty poll drives them.
	Progress func()
	// Events is the device's queue of asynchronous events (CQ overflow).
	Events *EventQueue
	// Capacity is how many completions the CQ holds (changed by Resize under
	// both locks).
	Capacity atomic.Int64
	Ring     []ibv.WorkCompletion
	// sink, if set, takes the completions instead of ring: a daemon's
	// client's ring (shared.go).
	Sink CQSink
	head atomic.Uint64 // completions polled (advanced under pollMu)
	Tail atomic.Uint64 // completions added (advanced under PushMu)
	// PushMu orders the engines that complete into the CQ; pollers never
	// take it.
	PushMu sync.Mutex
	// pollMu orders concurrent pollers among themselves, as ibv_poll_cq's
	// lock does; engines never take it.
	pollMu sync.Mutex
	err    atomic.Bool
	armed  atomic.Uint32 // notifyOff, notifyAny or notifySolicited
	Event  chan struct{}

	// Owner is the API's object for this CQ, which events name.
	Owner any
}

// Resize makes the CQ hold depth completions, keeping the unpolled ones in
// order, as rxe_cq_resize_queue: EINVAL if more than depth are unpolled.
// Engines and pollers wait while it copies (it holds both their locks).
func (cq *CQ) Resize(depth int) error {
	cq.PushMu.Lock()
	defer cq.PushMu.Unlock()
	if cq.Sink != nil {
		return fmt.Errorf("transport: a CQ with a sink resizes with ResizeSink: %w", ibv.ErrInvalid)
	}
	cq.pollMu.Lock()
	defer cq.pollMu.Unlock()
	h, t := cq.head.Load(), cq.Tail.Load()
	if depth < 1 || uint64(depth) < t-h {
		return fmt.Errorf("transport: CQ of %d completions with %d unpolled: %w", depth, t-h, ibv.ErrInvalid)
	}
	// Each completion keeps its index: head and tail stay as they are.
	ring := make([]ibv.WorkCompletion, depth)
	for i := h; i != t; i++ {
		ring[i%uint64(depth)] = cq.Ring[i%uint64(len(cq.Ring))]
	}
	cq.Ring = ring
	cq.Capacity.Store(int64(depth))
	return nil
}

// Poll moves up to len(wcs) completions into wcs and returns how many. On a
// BusyPoll NIC an empty CQ first runs a round of the engine (Progress).
func (cq *CQ) Poll(wcs []ibv.WorkCompletion) int {
	if cq.Tail.Load() == cq.head.Load() {
		// A busy-polling application runs the engine as it spins.
		if cq.Progress == nil {
			return 0
		}
		cq.Progress()
		if cq.Tail.Load() == cq.head.Load() {
			return 0
		}
	}
	cq.pollMu.Lock()
	h := cq.head.Load()
	k := int(min(uint64(len(wcs)), cq.Tail.Load()-h))
	n := uint64(len(cq.Ring))
	for i := range k {
		wcs[i] = cq.Ring[(h+uint64(i))%n]
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
	case <-cq.Event:
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

// Push adds a completion; false means the CQ overflowed (it is then in error
// and the caller moves the QP to the error state, as ibverbs). Engines call
// it, under PushMu: QPs of several engines may share the CQ.
func (cq *CQ) Push(wc ibv.WorkCompletion, solicited bool) bool {
	cq.PushMu.Lock()
	defer cq.PushMu.Unlock()
	if cq.Sink != nil {
		return cq.pushSink(wc, solicited)
	}
	t := cq.Tail.Load()
	if cq.err.Load() || t-cq.head.Load() >= uint64(len(cq.Ring)) {
		if !cq.err.Swap(true) {
			cq.Events.Post(Event{Type: ibv.EventCQErr, CQ: cq})
		}
		return false
	}
	cq.Ring[t%uint64(len(cq.Ring))] = wc
	cq.Tail.Store(t + 1)
	if a := cq.armed.Load(); a != notifyOff && (a == notifyAny || solicited || wc.Status != ibv.WCSuccess) &&
		cq.armed.CompareAndSwap(a, notifyOff) {
		select {
		case cq.Event <- struct{}{}:
		default:
		}
	}
	return true
}

// pending is how many completions the CQ holds.
func (cq *CQ) pending() int { return int(cq.Tail.Load() - cq.head.Load()) }

// Depth is how many completions the CQ holds.
func (cq *CQ) Depth() int { return int(cq.Capacity.Load()) }

// Unpolled is how many completions the CQ holds that no poller took yet.
func (cq *CQ) Unpolled() int { return cq.pending() }
