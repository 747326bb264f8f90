package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
)

// enginePort is an engine as a Port.
type enginePort struct{ e *engine }

// Index is the engine's queue.
func (p enginePort) Index() int { return p.e.index }

// Malformed moves a QP whose client posted what its API would have
// refused to the error state, as an RNIC treats a malformed WQE: the WQE
// wc names completes with LOC_QP_OP_ERR on the send CQ (send) or the
// receive CQ (WR_FLUSH_ERR if the QP was in the error state already), the
// ones after it are flushed. Without a WQE to blame (wc nil: a producer
// index out of range) the QP's client hears of it through a QP_FATAL
// event.
func (p enginePort) Malformed(qp *queue.QP, wc *ibv.WorkCompletion, send bool) {
	e := p.e
	e.counters.BadSharedWQE++
	if wc == nil {
		e.fatal(qp)
		return
	}
	cq := qp.RecvCQ
	if send {
		cq = qp.SendCQ
	}
	c := *wc
	c.Status = ibv.WCLocQPOpErr
	if qp.Transport.State == ibv.StateErr {
		c.Status = ibv.WCWRFlushErr
	}
	e.toError(qp)
	if !cq.Push(c, false) {
		e.fatal(qp)
	}
}

// MalformedSRQ tells an SRQ's client it wrote a malformed WQE
// (IBV_EVENT_SRQ_ERR); its source takes no more.
func (p enginePort) MalformedSRQ(s *queue.SRQ) {
	p.e.counters.BadSharedWQE++
	p.e.events.Post(queue.Event{Type: ibv.EventSRQErr, SRQ: s})
}

// Bind completes b, a BIND_MW a client posted, with the window whose rkey
// has mwKey's index and the region of lkey. A window or region that is
// not the QP's fails the bind (MW_BIND_ERR), as a stale pointer would
// in-process.
func (p enginePort) Bind(qp *queue.QP, mwKey, lkey uint32, b *queue.Bind) *queue.Bind {
	b.MW = p.e.lookupMWIndex(mwKey)
	if b.MW == nil || b.MW.PD() != qp.PD {
		b.MW = memory.NewMW(qp.PD, false) // dead: the bind fails
	}
	if mr := p.e.lookupMR(lkey); mr != nil && mr.PD() == qp.PD {
		b.MR = mr
	}
	return b
}

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
	for _, e := range d.shards {
		e.mu.Lock()
		for i := 0; i < 8 && !d.gone && e.step(); i++ {
		}
		e.mu.Unlock()
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
		d.objs.sharedQPs = append(d.objs.sharedQPs, qp)
		return nil
	})
}

// forgetShared drops qp from the shared QPs (under every engine's mutex).
func (o *objects) forgetShared(qp *queue.QP) {
	for i, s := range o.sharedQPs {
		if s == qp {
			o.sharedQPs = append(o.sharedQPs[:i], o.sharedQPs[i+1:]...)
			return
		}
	}
}

// pumpShared takes the work requests clients posted to this engine's
// shared QPs, and reports whether there were any.
func (e *engine) pumpShared() bool {
	busy := false
	for _, qp := range e.sharedQPs {
		if e.dev.engineOf(qp) == e && qp.Src.Pump(enginePort{e}, qp) {
			busy = true
		}
	}
	return busy
}

// publishShared tells the clients of the engine's shared QPs, at the end
// of a step, which slots the step's completions freed and the QPs' states.
func (e *engine) publishShared() {
	for _, qp := range e.sharedQPs {
		if e.dev.engineOf(qp) == e {
			qp.Src.Publish(qp)
		}
	}
}

// sharedPending reports whether a client posted to a shared QP of this
// engine since it last looked (the engine holds its mutex).
func (e *engine) sharedPending() bool {
	for _, qp := range e.sharedQPs {
		if e.dev.engineOf(qp) == e && qp.Src.Pending() {
			return true
		}
	}
	if e.index != 0 {
		return false // clients ring engine 0 for their SRQs
	}
	for _, s := range e.sharedSRQs {
		if s.Src.Pending() {
			return true
		}
	}
	return false
}

// ShareSRQ makes the SRQ take its receive work requests from src too (a
// daemon's client's ring). It cannot grow past src's slots.
func (d *NIC) ShareSRQ(s *queue.SRQ, src queue.SRQSource) error {
	s.Src = src
	return d.do(func() error {
		d.objs.sharedSRQs = append(d.objs.sharedSRQs, s)
		return nil
	})
}

// forgetSharedSRQ drops s from the shared SRQs (under every engine's mutex).
func (o *objects) forgetSharedSRQ(s *queue.SRQ) {
	for i, x := range o.sharedSRQs {
		if x == s {
			o.sharedSRQs = append(o.sharedSRQs[:i], o.sharedSRQs[i+1:]...)
			return
		}
	}
}

// pumpSharedSRQs takes what clients posted to shared SRQs.
func (e *engine) pumpSharedSRQs() bool {
	busy := false
	for _, s := range e.sharedSRQs {
		if s.Src.Pump(enginePort{e}, s) {
			busy = true
		}
	}
	return busy
}
