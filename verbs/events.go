package verbs

import (
	"context"
	"sync"
)

// AsyncEvent is one asynchronous event (struct ibv_async_event); the field
// matching the type names the object.
type AsyncEvent struct {
	Type AsyncEventType
	CQ   *CQ
	QP   *QP
	SRQ  *SRQ
}

// maxAsyncEvents bounds the events kept until the application reads them;
// beyond it the oldest are dropped and counted.
const maxAsyncEvents = 1024

// eventQueue holds events until GetAsyncEvent takes them. Events are rare
// (errors, limits), so a mutex is fine here.
type eventQueue struct {
	mu      sync.Mutex
	q       []AsyncEvent
	dropped uint64
	ready   chan struct{} // one token while q is non-empty
}

func (eq *eventQueue) post(ev AsyncEvent) {
	eq.mu.Lock()
	if len(eq.q) == maxAsyncEvents {
		eq.q = append(eq.q[:0], eq.q[1:]...)
		eq.dropped++
	}
	eq.q = append(eq.q, ev)
	eq.mu.Unlock()
	select {
	case eq.ready <- struct{}{}:
	default:
	}
}

// GetAsyncEvent returns the oldest asynchronous event, waiting for one until
// ctx ends (ibv_get_async_event).
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	if d.rem != nil {
		return d.rem.getEvent(ctx)
	}
	eq := &d.objs.events
	for {
		eq.mu.Lock()
		if len(eq.q) > 0 {
			ev := eq.q[0]
			eq.q = append(eq.q[:0], eq.q[1:]...)
			more := len(eq.q) > 0
			eq.mu.Unlock()
			if more {
				select {
				case eq.ready <- struct{}{}:
				default:
				}
			}
			return ev, nil
		}
		eq.mu.Unlock()
		select {
		case <-eq.ready:
		case <-ctx.Done():
			return AsyncEvent{}, ctx.Err()
		}
	}
}
