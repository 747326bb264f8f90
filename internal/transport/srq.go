package transport

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
)

// SRQ is a shared receive queue: QPs created with it take their receive WQEs
// from it. When the WQEs waiting in it drop below the armed limit, the NIC
// raises EventSRQLimitReached once and disarms the limit, as rxe's responder
// does when it takes a WQE.
type SRQ struct {
	dev     Device
	closing *atomic.Bool // the device's
	pd      *PD
	maxSGE  int

	mu    sync.Mutex // guards post, maxWR and limit against the engine
	post  []recvWQE  // posted by the application, not yet taken by the engine
	maxWR int
	limit int

	used      atomic.Int32 // WQEs posted and not yet completed
	attached  atomic.Int32 // QPs using the SRQ
	destroyed atomic.Bool

	q []recvWQE // engine-owned: WQEs taken from post, in order

	src SRQSource // a daemon's client's ring (shared.go)

	// Owner is the API's object for this SRQ, which events name.
	Owner any
}

// CreateSRQ creates a shared receive queue in pd with checked attributes.
func (d *NIC) CreateSRQ(pd *PD, attr ibv.SRQInitAttr) *SRQ {
	pd.AddUsers(1)
	return &SRQ{dev: d, closing: &d.closing, pd: pd, maxSGE: max(attr.MaxSGE, 1), maxWR: attr.MaxWR, limit: attr.Limit}
}

// PostRecv queues receive work requests on the SRQ; like QP.PostRecv it
// returns how many were queued and, on failure, the index of the bad one is
// that count.
func (s *SRQ) PostRecv(wrs []ibv.RecvWR) (int, error) {
	if s.closing.Load() {
		return 0, ibv.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range wrs {
		if len(wrs[i].SGList) > s.maxSGE {
			return i, fmt.Errorf("verbs: SRQ receive WR %d: %d SGEs, SRQ allows %d: %w", wrs[i].ID, len(wrs[i].SGList), s.maxSGE, ibv.ErrInvalid)
		}
		if int(s.used.Load()) >= s.maxWR {
			return i, fmt.Errorf("verbs: SRQ full (%d WRs): %w", s.maxWR, ibv.ErrNoMem)
		}
		s.used.Add(1)
		s.post = append(s.post, newRecvWQE(&wrs[i]))
	}
	s.dev.PostedSRQ()
	return len(wrs), nil
}

// Modify resizes the SRQ (never below the WQEs it holds) or arms its limit
// (ibv_modify_srq); the caller checked the mask.
func (s *SRQ) Modify(attr ibv.SRQAttr, mask ibv.SRQAttrMask) error {
	if s.src != nil && mask&ibv.SRQAttrMaxWR != 0 && attr.MaxWR > int(s.src.Slots()) {
		return fmt.Errorf("verbs: a shared SRQ cannot grow past its ring's %d slots: %w", s.src.Slots(), ibv.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	maxWR := s.maxWR
	if mask&ibv.SRQAttrMaxWR != 0 {
		if attr.MaxWR < 1 || attr.MaxWR > ibv.MaxQPWR || attr.MaxWR < int(s.used.Load()) {
			return fmt.Errorf("verbs: SRQ size %d (holding %d): %w", attr.MaxWR, s.used.Load(), ibv.ErrInvalid)
		}
		maxWR = attr.MaxWR
	}
	if mask&ibv.SRQAttrLimit != 0 && (attr.Limit < 0 || attr.Limit > maxWR) {
		return fmt.Errorf("verbs: SRQ limit %d above its size %d: %w", attr.Limit, maxWR, ibv.ErrInvalid)
	}
	s.maxWR = maxWR
	if mask&ibv.SRQAttrLimit != 0 {
		s.limit = attr.Limit
	}
	return nil
}

// Query returns the SRQ's attributes; Limit is 0 once the event has fired.
func (s *SRQ) Query() ibv.SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ibv.SRQAttr{MaxWR: s.maxWR, MaxSGE: s.maxSGE, Limit: s.limit}
}

// DestroySRQ releases the SRQ; EBUSY while QPs still use it, as
// ibv_destroy_srq.
func (d *NIC) DestroySRQ(s *SRQ) error {
	if n := s.attached.Load(); n > 0 {
		return fmt.Errorf("verbs: SRQ used by %d QPs: %w", n, ibv.ErrBusy)
	}
	if s.destroyed.Swap(true) {
		return fmt.Errorf("verbs: SRQ already destroyed: %w", ibv.ErrInvalid)
	}
	s.pd.AddUsers(-1)
	if s.src != nil {
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
func (e *engine) takeSRQ(s *SRQ) (recvWQE, bool) {
	s.mu.Lock()
	if len(s.post) > 0 {
		s.q = append(s.q, s.post...)
		clear(s.post)
		s.post = s.post[:0]
	}
	if len(s.q) == 0 {
		s.mu.Unlock()
		return recvWQE{}, false
	}
	wr := s.q[0]
	s.q[0] = recvWQE{}
	s.q = s.q[1:]
	fire := s.limit > 0 && len(s.q) < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		e.events.post(Event{Type: ibv.EventSRQLimitReached, SRQ: s})
	}
	return wr, true
}
