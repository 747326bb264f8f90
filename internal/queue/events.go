package queue

import (
	"sync"

	"github.com/xdproce/xdproce/internal/ibv"
)

// maxAsyncEvents bounds the events kept until the application reads them;
// beyond it the oldest are dropped and counted.
const maxAsyncEvents = 1024

// EventQueue holds events until GetAsyncEvent takes them. Events are rare
// (errors, limits), so a mutex is fine here.
type EventQueue struct {
	Mu      sync.Mutex
	Q       []Event
	dropped uint64
	Ready   chan struct{} // one token while q is non-empty
}

func (eq *EventQueue) Post(ev Event) {
	eq.Mu.Lock()
	if len(eq.Q) == maxAsyncEvents {
		eq.Q = append(eq.Q[:0], eq.Q[1:]...)
		eq.dropped++
	}
	eq.Q = append(eq.Q, ev)
	eq.Mu.Unlock()
	select {
	case eq.Ready <- struct{}{}:
	default:
	}
}

// Event is an asynchronous event; the field matching its type names the
// object.
type Event struct {
	Type ibv.AsyncEventType
	CQ   *CQ
	QP   *QP
	SRQ  *SRQ
}
