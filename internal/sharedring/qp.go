// Package sharedring is the daemon's side of the rings it shares with its
// clients (package uverbs defines them): the one module that knows
// user-written queues, as rxe_queue.c is in rxe. A QP's source takes the
// work requests a client wrote to its send and receive rings into the QP,
// an SRQ's source does so for its ring, and a CQ's sink writes the
// engines' completions to a client's ring. The engines (package transport)
// call them through transport.QueueSource, SRQSource and CQSink.
//
// The rings' memory is written by a client the daemon does not trust: a
// source copies a slot before it decodes it, checks every index against
// its own, and a request that a well-behaved client would never have
// posted moves its QP to the error state (LOC_QP_OP_ERR), never anything
// else.
package sharedring

import (
	"errors"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/uverbs"
)

// QP is what the engines keep of a QP's shared rings: a
// transport.QueueSource.
type QP struct {
	sq, rq           *uverbs.Ring
	sqTaken, rqTaken uint32 // slots taken from the rings
	// ahs finds the address vector a UD send slot names by the client's
	// handle (nil if it names no live one); called on the engine.
	ahs func(h uint32) *ibv.AH
	slotDecoder
}

// NewQP is the source of a QP whose client posts to sq and rq (checked by
// the caller against the QP's capabilities); for a UD QP, ahs finds the
// address vectors its send slots name.
func NewQP(sq, rq *uverbs.Ring, ahs func(h uint32) *ibv.AH) *QP {
	return &QP{sq: sq, rq: rq, ahs: ahs, slotDecoder: slotDecoder{slot: make([]byte, max(sq.SlotSize(), rq.SlotSize()))}}
}

// Pump takes the work requests the client posted since the last call into
// qp, on the engine p, and reports whether there were any.
func (s *QP) Pump(p queue.Port, qp *queue.QP) bool {
	if s.sq.Aux2().Load() != uint32(p.Index()) {
		s.sq.Aux2().Store(uint32(p.Index())) // placed on this engine since
	}
	busy := s.pumpRecv(p, qp)
	if s.pumpSend(p, qp) {
		busy = true
	}
	return busy
}

// Publish tells the client, at the end of an engine's step, which slots
// the step's completions freed and the QP's state. It stores only what
// changed: the client reads these lines on every post.
func (s *QP) Publish(qp *queue.QP) {
	s.Free(qp)
	if st := uint32(qp.State()); s.sq.Aux().Load() != st {
		s.sq.Aux().Store(st)
	}
}

// PublishState writes the QP's state where its client reads it.
func (s *QP) PublishState(st ibv.QPState) { s.sq.Aux().Store(uint32(st)) }

// Free publishes the ring slots of retired work requests. The engine calls
// it before a completion becomes visible too: a client that polls a
// completion and posts at once must find room, as with ibverbs
// (ibv_rc_pingpong keeps one send in flight on a queue of one).
func (s *QP) Free(qp *queue.QP) {
	send, recv := qp.Outstanding()
	if c := s.rqTaken - uint32(recv); s.rq.Consumer() != c {
		s.rq.SetConsumer(c)
	}
	if c := s.sqTaken - uint32(send); s.sq.Consumer() != c {
		s.sq.SetConsumer(c)
	}
}

// Pending reports whether the client posted since the engine last looked
// (the engine holds its mutex).
func (s *QP) Pending() bool {
	return s.sq.Producer() != s.sqTaken || s.rq.Producer() != s.rqTaken
}

func (s *QP) pumpRecv(p queue.Port, qp *queue.QP) bool {
	prod := s.rq.Producer()
	if prod-s.rqTaken > s.rq.Slots() {
		if qp.State() != ibv.StateErr {
			p.Malformed(qp, nil, false)
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
			p.Malformed(qp, &ibv.WorkCompletion{WRID: one[0].ID, Opcode: ibv.WCRecv, QPNum: qp.QPN()}, false)
			break
		}
	}
	return busy
}

func (s *QP) pumpSend(p queue.Port, qp *queue.QP) bool {
	prod := s.sq.Producer()
	if prod-s.sqTaken > s.sq.Slots() {
		if qp.State() != ibv.StateErr {
			p.Malformed(qp, nil, true)
		}
		return false
	}
	busy := false
	for s.sqTaken != prod {
		var w uverbs.SendWQE
		sges, inline, err := uverbs.SendWQEOf(s.copySlot(s.sq, s.sqTaken), &w, s.wsge[:0])
		s.wsge = sges
		if err == nil {
			wr := queue.WR{ID: w.WRID, Opcode: ibv.WROpcode(w.Opcode), Flags: ibv.SendFlags(w.SendFlags), SGList: s.toSGL(sges),
				ImmData: w.Imm, InvRKey: w.InvRKey, RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap}
			if wr.Opcode == ibv.WRBindMW {
				// The window by its current rkey's index (invalidate_rkey),
				// the new key byte (rkey), the start (remote_addr), and
				// the bind's named operands: length, rights, region.
				length, access, lkey := w.Bind()
				wr.Bind = p.Bind(qp, w.InvRKey, lkey, &queue.Bind{RKey: w.RKey, Addr: w.RemoteAddr,
					Length: length, Access: ibv.Access(access)})
			}
			if qp.Type() == ibv.QPTypeUD {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs(w.AH), w.RemoteQPN, w.RemoteQKey
			}
			err = qp.PostFromRing(&wr, inline)
		}
		if errors.Is(err, ibv.ErrNoMem) {
			break
		}
		s.sqTaken++
		busy = true
		if err != nil {
			p.Malformed(qp, &ibv.WorkCompletion{WRID: w.WRID, Opcode: ibv.WCSend, QPNum: qp.QPN()}, true)
			break
		}
	}
	return busy
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

func (s *slotDecoder) toSGL(w []uverbs.SGE) []ibv.SGE {
	s.sgl = s.sgl[:0]
	for _, g := range w {
		s.sgl = append(s.sgl, ibv.SGE(g))
	}
	return s.sgl
}
