package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
)

// Work requests and completions that go through rings a daemon's clients
// share (package sharedring knows the rings; the engines know only these
// interfaces). A QP or SRQ with a source takes what its client posts at the
// start of each step of the engine serving it, as the in-process API's
// posts; a CQ with a sink writes its completions to its client's ring.

// QueueSource feeds a QP the work requests a daemon's client posts. The
// QP's engine calls it, holding its mutex.
type QueueSource interface {
	// Pump takes what was posted since the last call into qp, on engine
	// p, and reports whether there was anything.
	Pump(p Port, qp *QP) bool
	// Pending reports whether anything was posted since the last Pump.
	Pending() bool
	// Free publishes the slots of the work requests qp retired; the
	// engine calls it before a completion becomes visible.
	Free(qp *QP)
	// Publish runs at the end of a step: Free, and the QP's state.
	Publish(qp *QP)
	// PublishState tells the client the QP's state.
	PublishState(st ibv.QPState)
}

// SRQSource feeds an SRQ the receive work requests a daemon's client
// posts. Any engine may call Pump (the source lets one at a time in).
type SRQSource interface {
	Pump(p Port, s *SRQ) bool
	Pending() bool
	// Free publishes the slot of a receive the SRQ's QP retired.
	Free(s *SRQ)
	// Slots is how many work requests the source holds: the SRQ cannot
	// grow past it.
	Slots() uint32
}

// CQSink takes a CQ's completions to a daemon's client, on the engines
// (under the CQ's push lock).
type CQSink interface {
	// Full reports whether completion slot t is still unread, depth
	// completions ago.
	Full(t uint32, depth int) bool
	// Put writes completion wc to slot t and publishes it. (By value: a
	// pointer through the interface would move every completion to the
	// heap.)
	Put(t uint32, wc ibv.WorkCompletion)
	// Overflowed tells the client the CQ lost completions.
	Overflowed()
	// Notify runs the client's notification if it asked for this
	// completion: solicited ones (and errors), or any.
	Notify(solicited bool)
}

// Port is the engine a source's Pump runs on: what a source does to the
// QP beyond posting.
type Port interface {
	// Index is the engine's queue.
	Index() int
	// Malformed moves a QP whose client posted what its API would have
	// refused to the error state (enginePort.Malformed).
	Malformed(qp *QP, wc *ibv.WorkCompletion, send bool)
	// MalformedSRQ tells an SRQ's client it wrote a malformed WQE.
	MalformedSRQ(s *SRQ)
	// Bind completes b, a BIND_MW a client posted, with the window of
	// mwKey's index and the region of lkey.
	Bind(qp *QP, mwKey, lkey uint32, b *Bind) *Bind
}

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
func (p enginePort) Malformed(qp *QP, wc *ibv.WorkCompletion, send bool) {
	e := p.e
	e.counters.BadSharedWQE++
	if wc == nil {
		e.fatal(qp)
		return
	}
	cq := qp.rcq
	if send {
		cq = qp.scq
	}
	c := *wc
	c.Status = ibv.WCLocQPOpErr
	if qp.t.state == ibv.StateErr {
		c.Status = ibv.WCWRFlushErr
	}
	e.toError(qp)
	if !cq.push(c, false) {
		e.fatal(qp)
	}
}

// MalformedSRQ tells an SRQ's client it wrote a malformed WQE
// (IBV_EVENT_SRQ_ERR); its source takes no more.
func (p enginePort) MalformedSRQ(s *SRQ) {
	p.e.counters.BadSharedWQE++
	p.e.events.post(Event{Type: ibv.EventSRQErr, SRQ: s})
}

// Bind completes b, a BIND_MW a client posted, with the window whose rkey
// has mwKey's index and the region of lkey. A window or region that is
// not the QP's fails the bind (MW_BIND_ERR), as a stale pointer would
// in-process.
func (p enginePort) Bind(qp *QP, mwKey, lkey uint32, b *Bind) *Bind {
	b.MW = p.e.lookupMWIndex(mwKey)
	if b.MW == nil || b.MW.PD() != qp.pd {
		b.MW = memory.NewMW(qp.pd, false) // dead: the bind fails
	}
	if mr := p.e.lookupMR(lkey); mr != nil && mr.PD() == qp.pd {
		b.MR = mr
	}
	return b
}

// PostFromRing queues one send work request taken from a client's ring;
// inline is its inline data, which the ring carries in place of an SG
// list.
func (qp *QP) PostFromRing(wr *WR, inline []byte) error {
	st := qp.State()
	if st == ibv.StateReset || st == ibv.StateInit || st == ibv.StateRTR {
		return fmt.Errorf("verbs: post send in state %v: %w", st, ibv.ErrInvalid)
	}
	if wr.Flags&ibv.SendInline != 0 && len(wr.SGList) > 0 {
		return fmt.Errorf("verbs: an inline WQE with an SG list: %w", ibv.ErrInvalid)
	}
	w, err := qp.checkSendWR(wr)
	if err != nil {
		return err
	}
	qp.postMu.Lock()
	err = qp.enqueueSend(w, inline)
	qp.postMu.Unlock()
	if err == nil {
		qp.notePosted()
	}
	return err
}

// CreateCQSink creates a CQ of depth completions whose completions go to
// sink instead of a ring of its own.
func (d *NIC) CreateCQSink(depth int, sink CQSink) *CQ {
	cq := d.newCQ()
	cq.sink = sink
	cq.depth.Store(int64(depth))
	return cq
}

// ResizeCQSink makes a CQ with a sink hold depth completions: move, called
// with the engines held off (under the push lock), the current sink and the
// index of the next completion, returns the sink that takes the CQ's completions from then on,
// with the unpolled ones moved to it, or an error (EINVAL: more than depth
// are unpolled). No engine uses the old sink once ResizeSink returns. The
// engines first take the work posted before it (settle), so that the
// completions it counts are those rxe's would.
func (d *NIC) ResizeCQSink(cq *CQ, depth int, move func(old CQSink, tail uint32) (CQSink, error)) error {
	d.settle()
	cq.pushMu.Lock()
	defer cq.pushMu.Unlock()
	if cq.sink == nil {
		return fmt.Errorf("transport: a CQ without a sink resizes with Resize: %w", ibv.ErrInvalid)
	}
	sink, err := move(cq.sink, uint32(cq.tail.Load()))
	if err != nil {
		return err
	}
	cq.sink = sink
	cq.depth.Store(int64(depth))
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

// pushSink is push for a CQ with a sink.
func (cq *CQ) pushSink(wc ibv.WorkCompletion, solicited bool) bool {
	t := uint32(cq.tail.Load())
	if cq.err.Load() || cq.sink.Full(t, int(cq.depth.Load())) {
		if !cq.err.Swap(true) {
			cq.sink.Overflowed()
			cq.events.post(Event{Type: ibv.EventCQErr, CQ: cq})
		}
		return false
	}
	cq.sink.Put(t, wc)
	cq.tail.Store(uint64(t + 1))
	cq.sink.Notify(solicited || wc.Status != ibv.WCSuccess)
	return true
}

// ShareQP makes qp take its work requests from src too (a daemon's
// client's rings).
func (d *NIC) ShareQP(qp *QP, src QueueSource) error {
	qp.src = src
	src.PublishState(qp.State())
	return d.do(func() error {
		d.objs.sharedQPs = append(d.objs.sharedQPs, qp)
		return nil
	})
}

// forgetShared drops qp from the shared QPs (under every engine's mutex).
func (o *objects) forgetShared(qp *QP) {
	for i, s := range o.sharedQPs {
		if s == qp {
			o.sharedQPs = append(o.sharedQPs[:i], o.sharedQPs[i+1:]...)
			return
		}
	}
}

// PublishState writes the QP's state where a client reads it.
func (qp *QP) PublishState() {
	if qp.src != nil {
		qp.src.PublishState(qp.State())
	}
}

// freeSharedSlots publishes to the QP's client the slots its retired
// work requests free.
func (qp *QP) freeSharedSlots() {
	if qp.src != nil {
		qp.src.Free(qp)
	}
}

// pumpShared takes the work requests clients posted to this engine's
// shared QPs, and reports whether there were any.
func (e *engine) pumpShared() bool {
	busy := false
	for _, qp := range e.sharedQPs {
		if e.dev.engineOf(qp) == e && qp.src.Pump(enginePort{e}, qp) {
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
			qp.src.Publish(qp)
		}
	}
}

// sharedPending reports whether a client posted to a shared QP of this
// engine since it last looked (the engine holds its mutex).
func (e *engine) sharedPending() bool {
	for _, qp := range e.sharedQPs {
		if e.dev.engineOf(qp) == e && qp.src.Pending() {
			return true
		}
	}
	if e.index != 0 {
		return false // clients ring engine 0 for their SRQs
	}
	for _, s := range e.sharedSRQs {
		if s.src.Pending() {
			return true
		}
	}
	return false
}

// ShareSRQ makes the SRQ take its receive work requests from src too (a
// daemon's client's ring). It cannot grow past src's slots.
func (d *NIC) ShareSRQ(s *SRQ, src SRQSource) error {
	s.src = src
	return d.do(func() error {
		d.objs.sharedSRQs = append(d.objs.sharedSRQs, s)
		return nil
	})
}

// forgetSharedSRQ drops s from the shared SRQs (under every engine's mutex).
func (o *objects) forgetSharedSRQ(s *SRQ) {
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
		if s.src.Pump(enginePort{e}, s) {
			busy = true
		}
	}
	return busy
}

// freeSharedSlots publishes to the SRQ's client the slot of a receive
// just retired.
func (s *SRQ) freeSharedSlots() {
	if s.src != nil {
		s.src.Free(s)
	}
}

// Outstanding is how many send and receive WQEs were posted to the QP
// and not yet retired.
func (qp *QP) Outstanding() (send, recv int32) { return qp.sqUsed.Load(), qp.rqUsed.Load() }

// Outstanding is how many receive WQEs were posted to the SRQ and not yet
// completed.
func (s *SRQ) Outstanding() int32 { return s.used.Load() }

// Type is the QP's transport service.
func (qp *QP) Type() ibv.QPType { return qp.typ }
