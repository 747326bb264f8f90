package engine

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// take removes the next receive WQE for a QP of the SRQ (engine goroutine),
// raising the limit event when the WQEs left drop below the armed limit.
func (e *Engine) takeSRQ(s *queue.SRQ) (queue.RecvWQE, bool) {
	s.Mu.Lock()
	if len(s.Post) > 0 {
		s.Q = append(s.Q, s.Post...)
		clear(s.Post)
		s.Post = s.Post[:0]
	}
	if len(s.Q) == 0 {
		s.Mu.Unlock()
		return queue.RecvWQE{}, false
	}
	wr := s.Q[0]
	s.Q[0] = queue.RecvWQE{}
	s.Q = s.Q[1:]
	fire := s.Limit > 0 && len(s.Q) < s.Limit
	if fire {
		s.Limit = 0
	}
	s.Mu.Unlock()
	if fire {
		e.Events.Post(queue.Event{Type: ibv.EventSRQLimitReached, SRQ: s})
	}
	return wr, true
}
