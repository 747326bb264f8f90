package queue

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
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
	qp.PostMu.Lock()
	err = qp.enqueueSend(w, inline)
	qp.PostMu.Unlock()
	if err == nil {
		qp.notePosted()
	}
	return err
}

// pushSink is push for a CQ with a sink.
func (cq *CQ) pushSink(wc ibv.WorkCompletion, solicited bool) bool {
	t := uint32(cq.Tail.Load())
	if cq.err.Load() || cq.Sink.Full(t, int(cq.Capacity.Load())) {
		if !cq.err.Swap(true) {
			cq.Sink.Overflowed()
			cq.Events.Post(Event{Type: ibv.EventCQErr, CQ: cq})
		}
		return false
	}
	cq.Sink.Put(t, wc)
	cq.Tail.Store(uint64(t + 1))
	cq.Sink.Notify(solicited || wc.Status != ibv.WCSuccess)
	return true
}

// PublishState writes the QP's state where a client reads it.
func (qp *QP) PublishState() {
	if qp.Src != nil {
		qp.Src.PublishState(qp.State())
	}
}

// FreeSharedSlots publishes to the QP's client the slots its retired
// work requests free.
func (qp *QP) FreeSharedSlots() {
	if qp.Src != nil {
		qp.Src.Free(qp)
	}
}

// FreeSharedSlots publishes to the SRQ's client the slot of a receive
// just retired.
func (s *SRQ) freeSharedSlots() {
	if s.Src != nil {
		s.Src.Free(s)
	}
}

// Outstanding is how many send and receive WQEs were posted to the QP
// and not yet retired.
func (qp *QP) Outstanding() (send, recv int32) { return qp.SQUsed.Load(), qp.RQUsed.Load() }

// Outstanding is how many receive WQEs were posted to the SRQ and not yet
// completed.
func (s *SRQ) Outstanding() int32 { return s.used.Load() }

// Type is the QP's transport service.
func (qp *QP) Type() ibv.QPType { return qp.QPType }
