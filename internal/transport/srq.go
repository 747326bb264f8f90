package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// CreateSRQ creates a shared receive queue in pd with checked attributes.
func (d *NIC) CreateSRQ(pd *PD, attr ibv.SRQInitAttr) *queue.SRQ {
	pd.AddUsers(1)
	return &queue.SRQ{Dev: d, Closing: &d.dev.CloseBegun, PD: pd, MaxSGE: max(attr.MaxSGE, 1), MaxWR: attr.MaxWR, Limit: attr.Limit}
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
			d.dev.Objs.ForgetSharedSRQ(s)
			return nil
		})
	}
	return nil
}
