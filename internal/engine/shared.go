package engine

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
)

// enginePort is an engine as a Port.
type enginePort struct{ e *Engine }

// Index is the engine's queue.
func (p enginePort) Index() int { return p.e.Index }

// Malformed moves a QP whose client posted what its API would have
// refused to the error state, as an RNIC treats a malformed WQE: the WQE
// wc names completes with LOC_QP_OP_ERR on the send CQ (send) or the
// receive CQ (WR_FLUSH_ERR if the QP was in the error state already), the
// ones after it are flushed. Without a WQE to blame (wc nil: a producer
// index out of range) the QP's client hears of it through a QP_FATAL
// event.
func (p enginePort) Malformed(qp *queue.QP, wc *ibv.WorkCompletion, send bool) {
	e := p.e
	e.Counters.BadSharedWQE++
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
	p.e.Counters.BadSharedWQE++
	p.e.Events.Post(queue.Event{Type: ibv.EventSRQErr, SRQ: s})
}

// Bind completes b, a BIND_MW a client posted, with the window whose rkey
// has mwKey's index and the region of lkey. A window or region that is
// not the QP's fails the bind (MW_BIND_ERR), as a stale pointer would
// in-process.
func (p enginePort) Bind(qp *queue.QP, mwKey, lkey uint32, b *queue.Bind) *queue.Bind {
	b.MW = p.e.LookupMWIndex(mwKey)
	if b.MW == nil || b.MW.PD() != qp.PD {
		b.MW = memory.NewMW(qp.PD, false) // dead: the bind fails
	}
	if mr := p.e.LookupMR(lkey); mr != nil && mr.PD() == qp.PD {
		b.MR = mr
	}
	return b
}

// pumpShared takes the work requests clients posted to this engine's
// shared QPs, and reports whether there were any.
func (e *Engine) pumpShared() bool {
	busy := false
	for _, qp := range e.SharedQPs {
		if e.dev.EngineOf(qp) == e && qp.Src.Pump(enginePort{e}, qp) {
			busy = true
		}
	}
	return busy
}

// publishShared tells the clients of the engine's shared QPs, at the end
// of a step, which slots the step's completions freed and the QPs' states.
func (e *Engine) publishShared() {
	for _, qp := range e.SharedQPs {
		if e.dev.EngineOf(qp) == e {
			qp.Src.Publish(qp)
		}
	}
}

// sharedPending reports whether a client posted to a shared QP of this
// engine since it last looked (the engine holds its mutex).
func (e *Engine) sharedPending() bool {
	for _, qp := range e.SharedQPs {
		if e.dev.EngineOf(qp) == e && qp.Src.Pending() {
			return true
		}
	}
	if e.Index != 0 {
		return false // clients ring engine 0 for their SRQs
	}
	for _, s := range e.SharedSRQs {
		if s.Src.Pending() {
			return true
		}
	}
	return false
}

// pumpSharedSRQs takes what clients posted to shared SRQs.
func (e *Engine) pumpSharedSRQs() bool {
	busy := false
	for _, s := range e.SharedSRQs {
		if s.Src.Pump(enginePort{e}, s) {
			busy = true
		}
	}
	return busy
}
