package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// CreateSRQ creates a shared receive queue in pd with checked attributes.
func (d *NIC) CreateSRQ(pd *PD, attr ibv.SRQInitAttr) *queue.SRQ {
	pd.AddUsers(1)
	return &queue.SRQ{Dev: d, Closing: &d.closing, PD: pd, MaxSGE: max(attr.MaxSGE, 1), MaxWR: attr.MaxWR, Limit: attr.Limit}
}

// DestroySRQ releases the SRQ; EBUSY while QPs still use it, as
// ibv_destroy_srq.
func (d *NIC) DestroySRQ(s *queue.SRQ) error {
	if n := s.AttachedQPs.Load(); n > 0 {
		return fmt.Errorf("verbs: SRQ used by %d QPs: %w", n, ibv.ErrBusy)
	}
	if s.Destroyed.Swap(true) {
		return fmt.Errorf("verbs: SRQ already destroyed: %w", ibv.ErrInvalid)
	}
	s.PD.AddUsers(-1)
	if s.Src != nil {
		// No engine reads the client's ring once this returns.
		return d.do(func() error {
			d.objs.forgetSharedSRQ(s)
			return nil
		})
	}
	return nil
}

// take removes the next receive WQE for a QP of the SRQ (engine goroutine),
// raising the limit event when the WQEs left drop below the armed limit.
func (e *engine) takeSRQ(s *queue.SRQ) (queue.RecvWQE, bool) {
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
		e.events.Post(queue.Event{Type: ibv.EventSRQLimitReached, SRQ: s})
	}
	return wr, true
}
