package verbs

import (
	"context"
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
)

// CQ is a completion queue: a ring the engines fill and applications
// drain, from any goroutine. Pollers and engines never wait for each other;
// an empty poll costs two atomic loads.
type CQ struct {
	dev   *Device
	depth int
	ops   ibv.CQOps
}

// CreateCQ creates a completion queue holding up to depth completions.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if depth < 1 || depth > MaxCQE {
		return nil, fmt.Errorf("verbs: CQ depth %d: %w", depth, ErrInvalid)
	}
	cq := &CQ{dev: d, depth: depth}
	ops, err := d.ops.CreateCQ(depth, cq)
	if err != nil {
		return nil, err
	}
	cq.ops = ops
	return cq, nil
}

// Poll moves up to len(wcs) completions into wcs and returns how many. On a
// BusyPoll device an empty CQ first runs a round of the engine (Progress).
func (cq *CQ) Poll(wcs []WorkCompletion) int {
	if len(wcs) == 0 {
		return 0
	}
	return cq.ops.Poll(wcs)
}

// ReqNotify arms the completion channel: the next completion added (with
// solicitedOnly, the next solicited or error one) signals Wait once.
func (cq *CQ) ReqNotify(solicitedOnly bool) { cq.ops.ReqNotify(solicitedOnly) }

// Wait blocks until the armed notification fires or ctx ends; attached to a
// daemon that is gone, ErrDeviceFatal (EIO), as the kernel's completion
// channel of a disassociated device.
func (cq *CQ) Wait(ctx context.Context) error { return cq.ops.Wait(ctx) }

// Overflowed reports whether completions were lost because the CQ was full.
func (cq *CQ) Overflowed() bool { return cq.ops.Overflowed() }

// Resize makes the CQ hold depth completions, keeping those not yet polled
// in order (ibv_resize_cq, as rxe): EINVAL for a depth below them, below 1
// or above MaxCQE. Through a daemon, not yet: the Go client does not remap
// its ring (the C library does): ErrNotSup.
func (cq *CQ) Resize(depth int) error {
	if depth < 1 || depth > MaxCQE {
		return fmt.Errorf("verbs: CQ depth %d: %w", depth, ErrInvalid)
	}
	if err := cq.ops.Resize(depth); err != nil {
		return err
	}
	cq.depth = depth
	return nil
}
