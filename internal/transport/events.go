package transport

import "sync"

// maxAsyncEvents bounds the events kept until the application reads them;
// beyond it the oldest are dropped and counted.
const maxAsyncEvents = 1024

// eventQueue holds events until GetAsyncEvent takes them. Events are rare
// (errors, limits), so a mutex is fine here.
type eventQueue struct {
	mu      sync.Mutex
	q       []Event
	dropped uint64
	ready   chan struct{} // one token while q is non-empty
}

func (eq *eventQueue) post(ev Event) {
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
