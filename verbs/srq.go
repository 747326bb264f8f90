package verbs

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
)

// SRQ is a shared receive queue: QPs created with it take their receive WQEs
// from it. When the WQEs waiting in it drop below the armed limit, the device
// raises EventSRQLimitReached once and disarms the limit, as rxe's responder
// does when it takes a WQE.
type SRQ struct {
	dev *Device
	pd  *PD
	ops ibv.SRQOps
}

// CreateSRQ creates a shared receive queue in pd.
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	if err := checkSRQ(attr); err != nil {
		return nil, err
	}
	s := &SRQ{dev: pd.dev, pd: pd}
	ops, err := pd.ops.CreateSRQ(attr, s)
	if err != nil {
		return nil, err
	}
	s.ops = ops
	return s, nil
}

// checkSRQ checks an SRQ's attributes against the device's limits.
func checkSRQ(attr SRQInitAttr) error {
	if attr.MaxWR < 1 || attr.MaxWR > MaxQPWR || attr.MaxSGE < 0 || attr.MaxSGE > MaxSGE || attr.Limit < 0 || attr.Limit > attr.MaxWR {
		return fmt.Errorf("verbs: SRQ attributes %+v exceed the device's: %w", attr, ErrInvalid)
	}
	return nil
}

// PostRecv queues receive work requests on the SRQ; like QP.PostRecv it
// returns how many were queued and, on failure, the index of the bad one is
// that count.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	if s.dev.closing.Load() {
		return 0, ErrClosed
	}
	return s.ops.PostRecv(wrs)
}

// Modify resizes the SRQ (never below the WQEs it holds) or arms its limit
// (ibv_modify_srq). A limit above MaxWR is EINVAL.
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	if mask&^(SRQAttrMaxWR|SRQAttrLimit) != 0 {
		return fmt.Errorf("verbs: SRQ attribute mask %#x: %w", mask, ErrInvalid)
	}
	return s.ops.Modify(attr, mask)
}

// Query returns the SRQ's attributes; Limit is 0 once the event has fired.
func (s *SRQ) Query() SRQAttr { return s.ops.Query() }

// Destroy releases the SRQ; EBUSY while QPs still use it, as ibv_destroy_srq.
func (s *SRQ) Destroy() error { return s.ops.Destroy() }
