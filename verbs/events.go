package verbs

import (
	"context"
	"sync"
)

// AsyncEventType is the kind of an asynchronous event (ibv_event_type values).
type AsyncEventType uint8

// The events xdproce raises, with their ibv_event_type numbers.
const (
	EventCQErr           AsyncEventType = 0  // IBV_EVENT_CQ_ERR: a CQ overflowed
	EventQPFatal         AsyncEventType = 1  // IBV_EVENT_QP_FATAL
	EventSQDrained       AsyncEventType = 5  // IBV_EVENT_SQ_DRAINED: an SQD drain ended (en_sqd_async_notify)
	EventDeviceFatal     AsyncEventType = 8  // IBV_EVENT_DEVICE_FATAL: the daemon serving the device is gone
	EventSRQErr          AsyncEventType = 14 // IBV_EVENT_SRQ_ERR: a daemon's client wrote a malformed WQE to the SRQ
	EventSRQLimitReached AsyncEventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
)

func (t AsyncEventType) String() string {
	switch t {
	case EventCQErr:
		return "CQ_ERR"
	case EventQPFatal:
		return "QP_FATAL"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	case EventDeviceFatal:
		return "DEVICE_FATAL"
	case EventSRQErr:
		return "SRQ_ERR"
	}
	return "UNKNOWN"
}

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
