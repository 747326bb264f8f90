package verbs

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/uverbs"
)

// The daemon's side of the shared rings (package uverbs): CQs whose
// completions the engines write into a client's ring, and QPs and SRQs
// whose work requests the engines take from a client's rings (package
// sharedring, behind transport's QueueSource, SRQSource and CQSink). Only
// an in-process device has them (ErrNotSup attached to a daemon).

// CreateSharedCQ creates a CQ of depth completions whose completions go to
// ring, memory shared with a client, which reads them itself. notify runs,
// on an engine, when a completion matches the request the client armed in
// the ring.
func (d *Device) CreateSharedCQ(depth int, ring *uverbs.Ring, notify func()) (*CQ, error) {
	if depth < 1 || depth > MaxCQE {
		return nil, fmt.Errorf("verbs: shared CQ of depth %d: %w", depth, ErrInvalid)
	}
	cq := &CQ{dev: d, depth: depth}
	ops, err := d.ops.CreateSharedCQ(depth, ring, notify, cq)
	if err != nil {
		return nil, err
	}
	cq.ops = ops
	return cq, nil
}

// CreateSharedQP creates a QP whose work requests a client posts to sq and
// rq, memory it shares: slots of the sizes uverbs.SendSlotSize and
// RecvSlotSize give for the QP's capabilities. For a UD QP, ahs finds the
// address handle a send slot names by its handle (the engines call it).
func (pd *PD) CreateSharedQP(attr QPInitAttr, sq, rq *uverbs.Ring, ahs func(h uint32) *AddressHandle) (*QP, error) {
	if attr.Type == QPTypeUD && ahs == nil {
		return nil, fmt.Errorf("verbs: a shared UD QP needs its client's address handles: %w", ErrInvalid)
	}
	qp, init, err := pd.newQP(attr, false)
	if err != nil {
		return nil, err
	}
	var av func(h uint32) *ibv.AH
	if ahs != nil {
		// A handle the slot names that is not a live one of this device
		// fails the send, as a stale pointer would in-process.
		av = func(h uint32) *ibv.AH {
			a := ahs(h)
			if a == nil || a.pd.dev != pd.dev || a.gone() {
				return nil
			}
			return &a.attr
		}
	}
	ops, err := pd.ops.CreateSharedQP(init, sq, rq, av, qp)
	if err != nil {
		return nil, err
	}
	qp.setOps(ops)
	return qp, nil
}

// PublishState writes the QP's state where its client reads it.
func (qp *QP) PublishState() { qp.ops.PublishState() }

// CreateSharedSRQ creates an SRQ whose receive work requests a client posts
// to ring (receive slots for attr.MaxSGE, at least attr.MaxWR of them). It
// cannot grow past the ring.
func (pd *PD) CreateSharedSRQ(attr SRQInitAttr, ring *uverbs.Ring) (*SRQ, error) {
	if err := checkSRQ(attr); err != nil {
		return nil, err
	}
	s := &SRQ{dev: pd.dev, pd: pd}
	ops, err := pd.ops.CreateSharedSRQ(attr, ring, s)
	if err != nil {
		return nil, err
	}
	s.ops = ops
	return s, nil
}

// ResizeShared makes a shared CQ hold depth completions in ring, a new ring
// shared with its client, its unpolled completions moved there in order
// (sharedring.CQ.MoveTo): EINVAL for a depth below them. The engines write
// only ring once it returns; the old ring is the caller's to unmap.
func (cq *CQ) ResizeShared(depth int, ring *uverbs.Ring) error {
	if depth < 1 || depth > MaxCQE {
		return fmt.Errorf("verbs: shared CQ of depth %d: %w", depth, ErrInvalid)
	}
	if err := cq.ops.ResizeShared(depth, ring); err != nil {
		return err
	}
	cq.depth = depth
	return nil
}
