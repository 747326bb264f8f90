package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// CreateCQSink creates a CQ of depth completions whose completions go to
// sink instead of a ring of its own.
func (d *NIC) CreateCQSink(depth int, sink queue.CQSink) *queue.CQ {
	cq := d.newCQ()
	cq.Sink = sink
	cq.Capacity.Store(int64(depth))
	return cq
}

// ResizeCQSink makes a CQ with a sink hold depth completions: move, called
// with the engines held off (under the push lock), the current sink and the
// index of the next completion, returns the sink that takes the CQ's completions from then on,
// with the unpolled ones moved to it, or an error (EINVAL: more than depth
// are unpolled). No engine uses the old sink once ResizeSink returns. The
// engines first take the work posted before it (settle), so that the
// completions it counts are those rxe's would.
func (d *NIC) ResizeCQSink(cq *queue.CQ, depth int, move func(old queue.CQSink, tail uint32) (queue.CQSink, error)) error {
	d.settle()
	cq.PushMu.Lock()
	defer cq.PushMu.Unlock()
	if cq.Sink == nil {
		return fmt.Errorf("transport: a CQ without a sink resizes with Resize: %w", ibv.ErrInvalid)
	}
	sink, err := move(cq.Sink, uint32(cq.Tail.Load()))
	if err != nil {
		return err
	}
	cq.Sink = sink
	cq.Capacity.Store(int64(depth))
	return nil
}

// settle runs each engine until a step finds nothing to do (a few steps
// at most): work clients posted before the call has been taken, and what
// completes without a peer's answer (UD sends, RC and UC packets handed to
// the link or looped back) has completed. rxe's post_send runs its
// requester inside the system call; ibv_resize_cq counts, as there, the
// completions of the work posted before it.
func (d *NIC) settle() {
	for _, e := range d.dev.Shards {
		e.Mu.Lock()
		for i := 0; i < 8 && !d.dev.Gone && e.Step(); i++ {
		}
		e.Mu.Unlock()
	}
}

// TakePosted makes the engines take the work requests daemon clients
// posted to their rings before the call (settle). A client's UD slot names
// its address handle, looked up when the slot is taken; rxe's provider
// copies the address vector into the WQE at post instead, so a program may
// destroy the handle right after posting (mckey does, sending unsignaled):
// the daemon takes what was posted before it lets a handle go.
func (d *NIC) TakePosted() { d.settle() }

// ShareQP makes qp take its work requests from src too (a daemon's
// client's rings).
func (d *NIC) ShareQP(qp *queue.QP, src queue.QueueSource) error {
	qp.Src = src
	src.PublishState(qp.State())
	return d.do(func() error {
		d.dev.Objs.SharedQPs = append(d.dev.Objs.SharedQPs, qp)
		return nil
	})
}

// ShareSRQ makes the SRQ take its receive work requests from src too (a
// daemon's client's ring). It cannot grow past src's slots.
func (d *NIC) ShareSRQ(s *queue.SRQ, src queue.SRQSource) error {
	s.Src = src
	return d.do(func() error {
		d.dev.Objs.SharedSRQs = append(d.dev.Objs.SharedSRQs, s)
		return nil
	})
}
