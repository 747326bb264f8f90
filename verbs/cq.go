package verbs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// CQ is a completion queue: a ring the engines fill and applications
// drain, from any goroutine. Pollers and engines never wait for each other;
// an empty poll costs two atomic loads.
type CQ struct {
	dev   *Device
	depth int
	c     *transport.CQ // the engines' CQ, in-process
	att   *attachedCQ   // a client's side: the CQ lives in the daemon
}

// CreateCQ creates a completion queue holding up to depth completions.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if depth < 1 || depth > MaxCQE {
		return nil, fmt.Errorf("verbs: CQ depth %d: %w", depth, ErrInvalid)
	}
	if d.att != nil {
		return d.createAttachedCQ(depth)
	}
	return newCQ(d, d.nic.CreateCQ(depth)), nil
}

// newCQ is the API's CQ for the engines' c.
func newCQ(d *Device, c *transport.CQ) *CQ {
	cq := &CQ{dev: d, depth: c.Depth(), c: c}
	c.Owner = cq
	return cq
}

// Poll moves up to len(wcs) completions into wcs and returns how many. On a
// BusyPoll device an empty CQ first runs a round of the engine (Progress).
func (cq *CQ) Poll(wcs []WorkCompletion) int {
	if len(wcs) == 0 {
		return 0
	}
	if cq.att != nil {
		return cq.pollAttached(wcs)
	}
	return cq.c.Poll(wcs)
}

// ReqNotify arms the completion channel: the next completion added (with
// solicitedOnly, the next solicited or error one) signals Wait once.
func (cq *CQ) ReqNotify(solicitedOnly bool) {
	if cq.att != nil {
		// The daemon's engines read the request in the ring.
		if solicitedOnly {
			cq.att.ring.Aux().Store(uverbs.NotifySolicited)
		} else {
			cq.att.ring.Aux().Store(uverbs.NotifyAny)
		}
		return
	}
	cq.c.ReqNotify(solicitedOnly)
}

// Wait blocks until the armed notification fires or ctx ends.
func (cq *CQ) Wait(ctx context.Context) error {
	if cq.att != nil {
		err := cq.att.notify.Wait(ctx)
		if errors.Is(err, ipc.ErrHangup) {
			// The daemon is gone (or dropped the session): as the kernel's
			// completion channel of a disassociated device, EIO.
			return fmt.Errorf("verbs: completion channel: %w", ErrDeviceFatal)
		}
		return err
	}
	return cq.c.Wait(ctx)
}

// Overflowed reports whether completions were lost because the CQ was full.
func (cq *CQ) Overflowed() bool {
	if cq.att != nil {
		return cq.att.ring.Aux2().Load() != 0
	}
	return cq.c.Overflowed()
}

// attachedCQ is a client's side of a daemon's CQ: the ring the daemon's
// engines write completions to, read here.
type attachedCQ struct {
	h      uint32
	m      *ipc.Mapping
	notify *ipc.Waiter // hangs up when the daemon is gone
	ring   *uverbs.Ring
	head   atomic.Uint64 // completions polled (advanced under pollMu)
	// pollMu orders concurrent pollers among themselves, as ibv_poll_cq's
	// lock does.
	pollMu sync.Mutex
}

// Resize makes the CQ hold depth completions, keeping those not yet polled
// in order (ibv_resize_cq, as rxe): EINVAL for a depth below them, below 1
// or above MaxCQE. Through a daemon, not yet: the Go client does not remap
// its ring (the C library does).
func (cq *CQ) Resize(depth int) error {
	if depth < 1 || depth > MaxCQE {
		return fmt.Errorf("verbs: CQ depth %d: %w", depth, ErrInvalid)
	}
	if cq.att != nil {
		return fmt.Errorf("verbs: resizing a CQ through the Go client: %w", ErrNotSup)
	}
	return cq.c.Resize(depth)
}
