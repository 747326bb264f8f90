package verbs

import (
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/sharedring"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/uverbs"
)

// The daemon's side of the shared rings (package uverbs): CQs whose
// completions the engines write into a client's ring, and QPs and SRQs
// whose work requests the engines take from a client's rings (package
// sharedring, behind transport's QueueSource, SRQSource and CQSink).

// CreateSharedCQ creates a CQ of depth completions whose completions go to
// ring, memory shared with a client, which reads them itself. notify runs,
// on an engine, when a completion matches the request the client armed in
// the ring.
func (d *Device) CreateSharedCQ(depth int, ring *uverbs.Ring, notify func()) (*CQ, error) {
	if d.att != nil {
		return nil, errDaemonSide("a shared CQ")
	}
	if depth < 1 || depth > MaxCQE || int(ring.Slots()) < depth || ring.SlotSize() < uverbs.CQESize {
		return nil, fmt.Errorf("verbs: shared CQ of depth %d on %d slots: %w", depth, ring.Slots(), ErrInvalid)
	}
	return newCQ(d, d.nic.CreateCQSink(depth, sharedring.NewCQ(ring, notify))), nil
}

// CreateSharedQP creates a QP whose work requests a client posts to sq and
// rq, memory it shares: slots of the sizes uverbs.SendSlotSize and
// RecvSlotSize give for the QP's capabilities. For a UD QP, ahs finds the
// address handle a send slot names by its handle (the engines call it).
func (pd *PD) CreateSharedQP(attr QPInitAttr, sq, rq *uverbs.Ring, ahs func(h uint32) *AddressHandle) (*QP, error) {
	if pd.dev.att != nil {
		return nil, errDaemonSide("a shared QP")
	}
	if attr.Type == QPTypeUD && ahs == nil {
		return nil, fmt.Errorf("verbs: a shared UD QP needs its client's address handles: %w", ErrInvalid)
	}
	c := attr.Cap
	if sq == nil || rq == nil || int(sq.Slots()) < c.MaxSendWR || int(rq.Slots()) < c.MaxRecvWR ||
		sq.SlotSize() < uverbs.SendSlotSize(c.MaxSendSGE, c.MaxInlineData) || rq.SlotSize() < uverbs.RecvSlotSize(max(c.MaxRecvSGE, 1)) {
		return nil, fmt.Errorf("verbs: shared rings too small for %+v: %w", c, ErrInvalid)
	}
	qp, err := pd.CreateQP(attr)
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
	if err := qp.c.SetSource(sharedring.NewQP(sq, rq, av)); err != nil {
		return nil, errors.Join(err, qp.Destroy())
	}
	return qp, nil
}

// PublishState writes the QP's state where its client reads it.
func (qp *QP) PublishState() {
	if qp.c != nil {
		qp.c.PublishState()
	}
}

// CreateSharedSRQ creates an SRQ whose receive work requests a client posts
// to ring (receive slots for attr.MaxSGE, at least attr.MaxWR of them). It
// cannot grow past the ring.
func (pd *PD) CreateSharedSRQ(attr SRQInitAttr, ring *uverbs.Ring) (*SRQ, error) {
	if pd.dev.att != nil {
		return nil, errDaemonSide("a shared SRQ")
	}
	if ring == nil || int(ring.Slots()) < attr.MaxWR || ring.SlotSize() < uverbs.RecvSlotSize(max(attr.MaxSGE, 1)) {
		return nil, fmt.Errorf("verbs: shared ring too small for SRQ %+v: %w", attr, ErrInvalid)
	}
	s, err := pd.CreateSRQ(attr)
	if err != nil {
		return nil, err
	}
	return s, s.c.SetSource(sharedring.NewSRQ(ring))
}

// errDaemonSide refuses, on a device attached to a daemon, what only the
// daemon's own (in-process) device does: its engines serve the rings.
func errDaemonSide(what string) error {
	return fmt.Errorf("verbs: %s on a device attached to a daemon: %w", what, ErrNotSup)
}

// ResizeShared makes a shared CQ hold depth completions in ring, a new ring
// shared with its client, its unpolled completions moved there in order
// (sharedring.CQ.MoveTo): EINVAL for a depth below them. The engines write
// only ring once it returns; the old ring is the caller's to unmap.
func (cq *CQ) ResizeShared(depth int, ring *uverbs.Ring) error {
	if cq.c == nil {
		return errDaemonSide("a shared CQ")
	}
	if depth < 1 || depth > MaxCQE || int(ring.Slots()) < depth || ring.SlotSize() < uverbs.CQESize {
		return fmt.Errorf("verbs: shared CQ of depth %d on %d slots: %w", depth, ring.Slots(), ErrInvalid)
	}
	return cq.c.ResizeSink(depth, func(sink transport.CQSink, tail uint32) (transport.CQSink, error) {
		old, ok := sink.(*sharedring.CQ)
		if !ok {
			return nil, fmt.Errorf("verbs: CQ is not shared: %w", ErrInvalid)
		}
		return old.MoveTo(ring, depth, tail)
	})
}
