package verbs

import (
	"context"
	"fmt"
	"sync"
)

// CQ is a completion queue. The engine adds completions; the application
// polls them, from any goroutine.
type CQ struct {
	dev   *Device
	mu    sync.Mutex
	ring  []WorkCompletion
	head  int // next to poll
	n     int // completions queued
	err   bool
	armed bool
	solic bool // armed for solicited completions only
	event chan struct{}
}

// CreateCQ creates a completion queue holding up to depth completions.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if depth < 1 || depth > MaxCQE {
		return nil, fmt.Errorf("verbs: CQ depth %d: %w", depth, ErrInvalid)
	}
	return &CQ{dev: d, ring: make([]WorkCompletion, depth), event: make(chan struct{}, 1)}, nil
}

// Poll moves up to len(wcs) completions into wcs and returns how many.
func (cq *CQ) Poll(wcs []WorkCompletion) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	k := min(len(wcs), cq.n)
	for i := range k {
		wcs[i] = cq.ring[cq.head]
		cq.head = (cq.head + 1) % len(cq.ring)
	}
	cq.n -= k
	return k
}

// ReqNotify arms the completion channel: the next completion added (with
// solicitedOnly, the next solicited or error one) signals Wait once.
func (cq *CQ) ReqNotify(solicitedOnly bool) {
	cq.mu.Lock()
	cq.armed, cq.solic = true, solicitedOnly
	cq.mu.Unlock()
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

// push adds a completion; false means the CQ overflowed (it is then in error
// and the caller moves the QP to the error state, as ibverbs).
func (cq *CQ) push(wc WorkCompletion, solicited bool) bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.err || cq.n == len(cq.ring) {
		if !cq.err {
			cq.dev.e.events.post(AsyncEvent{Type: EventCQErr, CQ: cq})
		}
		cq.err = true
		return false
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = wc
	cq.n++
	if cq.armed && (!cq.solic || solicited || wc.Status != WCSuccess) {
		cq.armed = false
		select {
		case cq.event <- struct{}{}:
		default:
		}
	}
	return true
}

// Overflowed reports whether completions were lost because the CQ was full.
func (cq *CQ) Overflowed() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.err
}
