package queue

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
)

// SRQ is a shared receive queue: QPs created with it take their receive WQEs
// from it. When the WQEs waiting in it drop below the armed limit, the NIC
// raises EventSRQLimitReached once and disarms the limit, as rxe's responder
// does when it takes a WQE.
type SRQ struct {
	Dev     Device
	Closing *atomic.Bool // the device's
	PD      *memory.PD
	MaxSGE  int

	Mu    sync.Mutex // guards post, MaxWR and limit against the engine
	Post  []RecvWQE  // posted by the application, not yet taken by the engine
	MaxWR int
	Limit int

	used        atomic.Int32 // WQEs posted and not yet completed
	AttachedQPs atomic.Int32 // QPs using the SRQ
	Destroyed   atomic.Bool

	Q []RecvWQE // engine-owned: WQEs taken from post, in order

	Src SRQSource // a daemon's client's ring (shared.go)

	// Owner is the API's object for this SRQ, which events name.
	Owner any
}

// PostRecv queues receive work requests on the SRQ; like QP.PostRecv it
// returns how many were queued and, on failure, the index of the bad one is
// that count.
func (s *SRQ) PostRecv(wrs []ibv.RecvWR) (int, error) {
	if s.Closing.Load() {
		return 0, ibv.ErrClosed
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	for i := range wrs {
		if len(wrs[i].SGList) > s.MaxSGE {
			return i, fmt.Errorf("verbs: SRQ receive WR %d: %d SGEs, SRQ allows %d: %w", wrs[i].ID, len(wrs[i].SGList), s.MaxSGE, ibv.ErrInvalid)
		}
		if int(s.used.Load()) >= s.MaxWR {
			return i, fmt.Errorf("verbs: SRQ full (%d WRs): %w", s.MaxWR, ibv.ErrNoMem)
		}
		s.used.Add(1)
		s.Post = append(s.Post, newRecvWQE(&wrs[i]))
	}
	s.Dev.PostedSRQ()
	return len(wrs), nil
}

// Modify resizes the SRQ (never below the WQEs it holds) or arms its limit
// (ibv_modify_srq); the caller checked the mask.
func (s *SRQ) Modify(attr ibv.SRQAttr, mask ibv.SRQAttrMask) error {
	if s.Src != nil && mask&ibv.SRQAttrMaxWR != 0 && attr.MaxWR > int(s.Src.Slots()) {
		return fmt.Errorf("verbs: a shared SRQ cannot grow past its ring's %d slots: %w", s.Src.Slots(), ibv.ErrInvalid)
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	maxWR := s.MaxWR
	if mask&ibv.SRQAttrMaxWR != 0 {
		if attr.MaxWR < 1 || attr.MaxWR > ibv.MaxQPWR || attr.MaxWR < int(s.used.Load()) {
			return fmt.Errorf("verbs: SRQ size %d (holding %d): %w", attr.MaxWR, s.used.Load(), ibv.ErrInvalid)
		}
		maxWR = attr.MaxWR
	}
	if mask&ibv.SRQAttrLimit != 0 && (attr.Limit < 0 || attr.Limit > maxWR) {
		return fmt.Errorf("verbs: SRQ limit %d above its size %d: %w", attr.Limit, maxWR, ibv.ErrInvalid)
	}
	s.MaxWR = maxWR
	if mask&ibv.SRQAttrLimit != 0 {
		s.Limit = attr.Limit
	}
	return nil
}

// Query returns the SRQ's attributes; Limit is 0 once the event has fired.
func (s *SRQ) Query() ibv.SRQAttr {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return ibv.SRQAttr{MaxWR: s.MaxWR, MaxSGE: s.MaxSGE, Limit: s.Limit}
}
