package daemon

import (
	"context"
	"sync"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// Asynchronous events go to the client that owns the object they name:
// the device's one event queue is read by the server, which finds the
// owner in its table and queues the event, by the client's own handle, on
// the client's session; the session's events pipe tells the client to fetch
// it (GET_EVENT).

// owner is a session's object as events name it.
type owner struct {
	ss     *session
	kind   uint8 // uverbs.EventQP, EventCQ, EventSRQ
	handle uint32
}

// own records obj (a *verbs.QP, *verbs.CQ or *verbs.SRQ) as ss's.
func (s *Server) own(obj any, o owner) {
	s.mu.Lock()
	s.owners[obj] = o
	s.mu.Unlock()
}

// disown forgets obj.
func (s *Server) disown(obj any) {
	s.mu.Lock()
	delete(s.owners, obj)
	s.mu.Unlock()
}

// routeEvents hands each of the device's asynchronous events to its owner.
func (s *Server) routeEvents(ctx context.Context) {
	defer s.wg.Done()
	for {
		ev, err := s.cfg.Device.GetAsyncEvent(ctx)
		if err != nil {
			return
		}
		var obj any
		switch {
		case ev.QP != nil:
			obj = ev.QP
		case ev.CQ != nil:
			obj = ev.CQ
		case ev.SRQ != nil:
			obj = ev.SRQ
		}
		s.mu.Lock()
		o, ok := s.owners[obj]
		s.mu.Unlock()
		if !ok {
			continue // an object of no client (destroyed since)
		}
		o.ss.events.post(uverbs.Event{Type: uint8(ev.Type), Kind: o.kind, Handle: o.handle})
	}
}

// eventQueue is a session's undelivered events.
type eventQueue struct {
	mu      sync.Mutex
	q       []uverbs.Event
	dropped uint64
	fd      *ipc.Signaler // signalled when an event is queued; never blocks
}

// maxEvents bounds a client's undelivered events; beyond it the oldest go.
const maxEvents = 1024

func (eq *eventQueue) post(ev uverbs.Event) {
	eq.mu.Lock()
	if len(eq.q) == maxEvents {
		eq.q = append(eq.q[:0], eq.q[1:]...)
		eq.dropped++
	}
	eq.q = append(eq.q, ev)
	fd := eq.fd
	eq.mu.Unlock()
	if fd != nil {
		fd.Signal()
	}
}

func (eq *eventQueue) take() (uverbs.Event, bool) {
	eq.mu.Lock()
	defer eq.mu.Unlock()
	if len(eq.q) == 0 {
		return uverbs.Event{}, false
	}
	ev := eq.q[0]
	eq.q = eq.q[1:]
	return ev, true
}

// close drops the events pipe (the session is gone): the client sees its
// end hang up.
func (eq *eventQueue) close() {
	eq.mu.Lock()
	fd := eq.fd
	eq.fd = nil
	eq.mu.Unlock()
	if fd != nil {
		fd.Close()
	}
}
