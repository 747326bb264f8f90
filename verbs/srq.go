package verbs

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/transport"
)

// SRQ is a shared receive queue: QPs created with it take their receive WQEs
// from it. When the WQEs waiting in it drop below the armed limit, the device
// raises EventSRQLimitReached once and disarms the limit, as rxe's responder
// does when it takes a WQE.
type SRQ struct {
	dev *Device
	pd  *PD
	c   *transport.SRQ // the engines' SRQ, in-process
	att *attachedSRQ   // a client's side: the SRQ lives in the daemon (attached.go)
}

// CreateSRQ creates a shared receive queue in pd.
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	if attr.MaxWR < 1 || attr.MaxWR > MaxQPWR || attr.MaxSGE < 0 || attr.MaxSGE > MaxSGE || attr.Limit < 0 || attr.Limit > attr.MaxWR {
		return nil, fmt.Errorf("verbs: SRQ attributes %+v exceed the device's: %w", attr, ErrInvalid)
	}
	if pd.dev.att != nil {
		return pd.createAttachedSRQ(attr)
	}
	s := &SRQ{dev: pd.dev, pd: pd, c: pd.c.CreateSRQ(attr)}
	s.c.Owner = s
	return s, nil
}

// PostRecv queues receive work requests on the SRQ; like QP.PostRecv it
// returns how many were queued and, on failure, the index of the bad one is
// that count.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	if s.dev.closing.Load() {
		return 0, ErrClosed
	}
	if s.att != nil {
		return s.postRecvAttached(wrs)
	}
	return s.c.PostRecv(wrs)
}

// Modify resizes the SRQ (never below the WQEs it holds) or arms its limit
// (ibv_modify_srq). A limit above MaxWR is EINVAL.
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	if mask&^(SRQAttrMaxWR|SRQAttrLimit) != 0 {
		return fmt.Errorf("verbs: SRQ attribute mask %#x: %w", mask, ErrInvalid)
	}
	if s.att != nil {
		return s.modifyAttached(attr, mask)
	}
	return s.c.Modify(attr, mask)
}

// Query returns the SRQ's attributes; Limit is 0 once the event has fired.
func (s *SRQ) Query() SRQAttr {
	if s.att != nil {
		return s.queryAttached()
	}
	return s.c.Query()
}

// Destroy releases the SRQ; EBUSY while QPs still use it, as ibv_destroy_srq.
func (s *SRQ) Destroy() error {
	if s.att != nil {
		return s.destroyAttached()
	}
	return s.c.Destroy()
}
