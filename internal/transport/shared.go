package transport

import (
	"errors"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/uverbs"
)

// The daemon's side of the shared rings (package uverbs): CQs whose
// completions the engines write into a client's ring, and QPs whose work
// requests the engines take from a client's rings at the start of each
// step, as the in-process API's posts. The rings' memory is written by a
// client the daemon does not trust: the engines copy a slot before they
// decode it, check every index against their own, and a request that a
// well-behaved client would never have posted moves its QP to the error
// state (LOC_QP_OP_ERR), never anything else.

// sharedQP is what an engine keeps of a QP's shared rings.
type sharedQP struct {
	sq, rq           *uverbs.Ring
	sqTaken, rqTaken uint32 // slots taken from the rings
	// ahs finds the address handle a UD send slot names by the client's
	// handle (nil if it names none); called on the engine.
	ahs func(h uint32) *ibv.AH
	slotDecoder
}

// slotDecoder decodes slots of a client's ring, reusing its buffers: the
// private copy of the slot (the client may rewrite the shared one while it
// is decoded) and the SG lists.
type slotDecoder struct {
	slot []byte
	wsge []uverbs.SGE
	sgl  []ibv.SGE
}

// copySlot copies slot i of r out of shared memory.
func (s *slotDecoder) copySlot(r *uverbs.Ring, i uint32) []byte {
	slot := s.slot[:r.SlotSize()]
	copy(slot, r.Slot(i))
	return slot
}

// recv decodes receive slot i of r; its work request's ID comes back even
// when the rest is malformed.
func (s *slotDecoder) recv(r *uverbs.Ring, i uint32) (ibv.RecvWR, error) {
	id, sges, err := uverbs.RecvWQEOf(s.copySlot(r, i), s.wsge[:0])
	s.wsge = sges
	return ibv.RecvWR{ID: id, SGList: s.toSGL(sges)}, err
}

// CreateSharedCQ creates a CQ of depth completions whose completions go to
// ring, memory shared with a client, which reads them itself. notify runs,
// on an engine, when a completion matches the request the client armed in
// the ring.
func (d *NIC) CreateSharedCQ(depth int, ring *uverbs.Ring, notify func()) *CQ {
	return &CQ{dev: d, depth: depth, shared: ring, notify: notify, event: make(chan struct{}, 1)}
}

// pushShared is push for a shared CQ.
func (cq *CQ) pushShared(wc *ibv.WorkCompletion, solicited bool) bool {
	r := cq.shared
	t := uint32(cq.tail.Load())
	if cq.err.Load() || t-r.Consumer() >= uint32(cq.depth) {
		if !cq.err.Swap(true) {
			r.Aux2().Store(1)
			cq.dev.objs.events.post(Event{Type: ibv.EventCQErr, CQ: cq})
		}
		return false
	}
	uverbs.PutCQE(r.Slot(t), &uverbs.CQE{
		WRID: wc.WRID, Status: uint8(wc.Status), Opcode: uint8(wc.Opcode), VendorErr: wc.VendorErr,
		ByteLen: wc.ByteLen, Imm: wc.ImmData, InvalidatedKey: wc.InvalidatedKey, QPNum: wc.QPNum,
		SrcQP: wc.SrcQP, WCFlags: uint32(wc.Flags),
	})
	r.SetProducer(t + 1)
	cq.tail.Store(uint64(t + 1))
	if a := r.Aux().Load(); a != uverbs.NotifyOff && (a == uverbs.NotifyAny || solicited || wc.Status != ibv.WCSuccess) &&
		r.Aux().CompareAndSwap(a, uverbs.NotifyOff) && cq.notify != nil {
		cq.notify()
	}
	return true
}

// ShareRings makes the QP take its work requests from sq and rq, rings a
// daemon's client posts to (checked by the caller against the QP's
// capabilities). For a UD QP, ahs finds the address handle a send slot
// names by its handle (the engines call it).
func (qp *QP) ShareRings(sq, rq *uverbs.Ring, ahs func(h uint32) *ibv.AH) error {
	qp.sh = &sharedQP{sq: sq, rq: rq, ahs: ahs, slotDecoder: slotDecoder{slot: make([]byte, max(sq.SlotSize(), rq.SlotSize()))}}
	sq.Aux().Store(uint32(qp.State()))
	d := qp.dev
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

// PublishState writes the QP's state where its client reads it.
func (qp *QP) PublishState() {
	if qp.sh != nil {
		qp.sh.sq.Aux().Store(uint32(qp.State()))
	}
}

// pumpShared takes the work requests clients posted to the rings of this
// engine's shared QPs, and reports whether there were any.
func (e *engine) pumpShared() bool {
	busy := false
	for _, qp := range e.sharedQPs {
		if qp.eng.Load() != e {
			continue
		}
		s := qp.sh
		if s.sq.Aux2().Load() != uint32(e.index) {
			s.sq.Aux2().Store(uint32(e.index)) // placed on this engine since
		}
		if e.pumpRecv(qp, s) {
			busy = true
		}
		if e.pumpSend(qp, s) {
			busy = true
		}
	}
	return busy
}

// publishShared tells the clients of the engine's shared QPs, at the end of
// a step, which slots the step's completions freed and the QPs' states. It
// stores only what changed: the client reads these lines on every post.
func (e *engine) publishShared() {
	for _, qp := range e.sharedQPs {
		if qp.eng.Load() != e {
			continue
		}
		qp.freeSharedSlots()
		if st := uint32(qp.State()); qp.sh.sq.Aux().Load() != st {
			qp.sh.sq.Aux().Store(st)
		}
	}
}

// freeSharedSlots publishes the ring slots of retired work requests. The
// engine calls it before a completion becomes visible too: a client that
// polls a completion and posts at once must find room, as with ibverbs
// (ibv_rc_pingpong keeps one send in flight on a queue of one).
func (qp *QP) freeSharedSlots() {
	s := qp.sh
	if s == nil {
		return
	}
	if c := s.rqTaken - uint32(qp.rqUsed.Load()); s.rq.Consumer() != c {
		s.rq.SetConsumer(c)
	}
	if c := s.sqTaken - uint32(qp.sqUsed.Load()); s.sq.Consumer() != c {
		s.sq.SetConsumer(c)
	}
}

// sharedPending reports whether a client posted to a shared QP of this
// engine since it last looked (the engine holds its mutex).
func (e *engine) sharedPending() bool {
	for _, qp := range e.sharedQPs {
		if qp.eng.Load() == e && (qp.sh.sq.Producer() != qp.sh.sqTaken || qp.sh.rq.Producer() != qp.sh.rqTaken) {
			return true
		}
	}
	if e.index != 0 {
		return false // clients ring engine 0 for their SRQs
	}
	for _, s := range e.sharedSRQs {
		if s.sh.mu.TryLock() {
			pending := !s.sh.broken && s.sh.ring.Producer() != s.sh.taken
			s.sh.mu.Unlock()
			if pending {
				return true
			}
		}
	}
	return false
}

func (e *engine) pumpRecv(qp *QP, s *sharedQP) bool {
	prod := s.rq.Producer()
	if prod-s.rqTaken > s.rq.Slots() {
		if qp.State() != ibv.StateErr {
			e.badSharedWR(qp, nil, ibv.WorkCompletion{})
		}
		return false
	}
	busy := false
	for s.rqTaken != prod {
		one := [1]ibv.RecvWR{}
		var err error
		if one[0], err = s.recv(s.rq, s.rqTaken); err == nil {
			_, err = qp.PostRecv(one[:])
		}
		if errors.Is(err, ibv.ErrNoMem) {
			break // the receive queue is full: the client outran the consumer index
		}
		s.rqTaken++
		busy = true
		if err != nil {
			e.badSharedWR(qp, qp.rcq, ibv.WorkCompletion{WRID: one[0].ID, Opcode: ibv.WCRecv, QPNum: qp.qpn})
			break
		}
	}
	return busy
}

func (e *engine) pumpSend(qp *QP, s *sharedQP) bool {
	prod := s.sq.Producer()
	if prod-s.sqTaken > s.sq.Slots() {
		if qp.State() != ibv.StateErr {
			e.badSharedWR(qp, nil, ibv.WorkCompletion{})
		}
		return false
	}
	busy := false
	for s.sqTaken != prod {
		var w uverbs.SendWQE
		sges, inline, err := uverbs.SendWQEOf(s.copySlot(s.sq, s.sqTaken), &w, s.wsge[:0])
		s.wsge = sges
		if err == nil {
			wr := WR{ID: w.WRID, Opcode: ibv.WROpcode(w.Opcode), Flags: ibv.SendFlags(w.SendFlags), SGList: s.toSGL(sges),
				ImmData: w.Imm, InvRKey: w.InvRKey, RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap}
			if wr.Opcode == ibv.WRBindMW {
				wr.Bind = e.sharedBind(qp, &w)
			}
			if qp.typ == ibv.QPTypeUD {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs(w.AH), w.RemoteQPN, w.RemoteQKey
			}
			err = qp.postShared(&wr, inline)
		}
		if errors.Is(err, ibv.ErrNoMem) {
			break
		}
		s.sqTaken++
		busy = true
		if err != nil {
			e.badSharedWR(qp, qp.scq, ibv.WorkCompletion{WRID: w.WRID, Opcode: ibv.WCSend, QPNum: qp.qpn})
			break
		}
	}
	return busy
}

// sharedBind is the bind a BIND_MW slot asks for: the window named by its
// current rkey's index (invalidate_rkey), the region by its lkey (the top
// half of swap), the new key byte (rkey), range (remote_addr, compare_add)
// and rights (the bottom half of swap). A window or region that is not the
// QP's fails the bind (MW_BIND_ERR), as a stale pointer would in-process.
func (e *engine) sharedBind(qp *QP, w *uverbs.SendWQE) *Bind {
	b := &Bind{RKey: w.RKey, Addr: w.RemoteAddr, Length: w.CompareAdd, Access: ibv.Access(uint32(w.Swap))}
	b.MW = e.lookupMWIndex(w.InvRKey)
	if b.MW == nil || b.MW.pd != qp.pd {
		b.MW = &MW{pd: qp.pd} // dead: the bind fails
	}
	if mr := e.lookupMR(uint32(w.Swap >> 32)); mr != nil && mr.pd == qp.pd {
		b.MR = mr
	}
	return b
}

func (s *slotDecoder) toSGL(w []uverbs.SGE) []ibv.SGE {
	s.sgl = s.sgl[:0]
	for _, g := range w {
		s.sgl = append(s.sgl, ibv.SGE(g))
	}
	return s.sgl
}

// badSharedWR moves a QP whose client posted what its API would have
// refused to the error state, as an RNIC treats a malformed WQE: the WQE
// completes with LOC_QP_OP_ERR into cq (WR_FLUSH_ERR if the QP was in the
// error state already), the ones after it are flushed. Without a WQE to
// blame (a producer index out of range) the QP's client hears of it
// through a QP_FATAL event.
func (e *engine) badSharedWR(qp *QP, cq *CQ, wc ibv.WorkCompletion) {
	e.counters.BadSharedWQE++
	if cq == nil {
		e.fatal(qp)
		return
	}
	wc.Status = ibv.WCLocQPOpErr
	if qp.t.state == ibv.StateErr {
		wc.Status = ibv.WCWRFlushErr
	}
	e.toError(qp)
	if !cq.push(wc, false) {
		e.fatal(qp)
	}
}

// postShared queues one send work request taken from a shared ring; inline
// is its inline data, which the ring carries in place of an SG list.
func (qp *QP) postShared(wr *WR, inline []byte) error {
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

// sharedSRQ is what the engines keep of an SRQ's shared ring. Whichever
// engine gets its mutex first pumps it.
type sharedSRQ struct {
	mu     sync.Mutex
	ring   *uverbs.Ring
	taken  uint32
	broken bool // a malformed WQE: the SRQ takes no more (SRQ_ERR raised)
	slotDecoder
}

// ShareRing makes the SRQ take its receive work requests from ring, which
// a daemon's client posts to (checked by the caller). It cannot grow past
// the ring.
func (s *SRQ) ShareRing(ring *uverbs.Ring) error {
	s.sh = &sharedSRQ{ring: ring, slotDecoder: slotDecoder{slot: make([]byte, ring.SlotSize())}}
	d := s.dev
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
		sh := s.sh
		if !sh.mu.TryLock() {
			continue // another engine is at it
		}
		if !sh.broken && e.pumpSRQ(s, sh) {
			busy = true
		}
		sh.publishConsumer(s)
		sh.mu.Unlock()
	}
	return busy
}

// publishConsumer stores the ring's consumer index: the slots taken from
// it less the receives taken and not yet retired. The caller holds sh.mu,
// so the stores of several engines go in order and never go back (taken
// and used move together under it; retirements only raise the index).
func (sh *sharedSRQ) publishConsumer(s *SRQ) {
	if c := sh.taken - uint32(s.used.Load()); sh.ring.Consumer() != c {
		sh.ring.SetConsumer(c)
	}
}

// freeSharedSlots publishes the slot of a receive the SRQ's QP just
// retired, before its completion becomes visible, as QP.freeSharedSlots
// does for a QP's own rings: a client that polls the completion and posts
// into a full SRQ at once must find room. It waits for the SRQ's mutex:
// the engine holding it (pumping, or retiring a receive of a QP it serves)
// may have read the count before this retirement, so skipping the store
// when TryLock fails could leave the completion ahead of the index. The
// holder never waits for anything an engine holds while it retires.
func (s *SRQ) freeSharedSlots() {
	sh := s.sh
	if sh == nil {
		return
	}
	sh.mu.Lock()
	sh.publishConsumer(s)
	sh.mu.Unlock()
}

func (e *engine) pumpSRQ(s *SRQ, sh *sharedSRQ) bool {
	prod := sh.ring.Producer()
	if prod-sh.taken > sh.ring.Slots() {
		e.badSharedSRQ(s, sh)
		return false
	}
	busy := false
	for sh.taken != prod {
		one := [1]ibv.RecvWR{}
		var err error
		if one[0], err = sh.recv(sh.ring, sh.taken); err == nil {
			_, err = s.PostRecv(one[:])
		}
		if errors.Is(err, ibv.ErrNoMem) {
			break
		}
		sh.taken++
		busy = true
		if err != nil {
			e.badSharedSRQ(s, sh)
			break
		}
	}
	return busy
}

// badSharedSRQ stops taking from an SRQ whose client wrote a malformed
// WQE, and tells the client (IBV_EVENT_SRQ_ERR).
func (e *engine) badSharedSRQ(s *SRQ, sh *sharedSRQ) {
	e.counters.BadSharedWQE++
	sh.broken = true
	e.events.post(Event{Type: ibv.EventSRQErr, SRQ: s})
}
