package queue

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/internal/ibv"
)

// RecvRetired releases the receive-queue slot of a completed receive WQE.
func (qp *QP) RecvRetired() {
	if qp.SRQ != nil {
		qp.SRQ.used.Add(-1)
		qp.SRQ.freeSharedSlots()
		return
	}
	qp.RQUsed.Add(-1)
	qp.FreeSharedSlots()
}

// enqueueSend appends a checked send WQE to the QP's posts (under PostMu):
// ENOMEM if the send queue is full. An INLINE request's data is copied
// into the QP's inline buffer, from inline if given (a shared ring's slot
// carries it), else from the regions its SGEs name.
func (qp *QP) enqueueSend(w SendWQE, inline []byte) error {
	if int(qp.SQUsed.Load()) >= qp.Caps.MaxSendWR {
		return fmt.Errorf("verbs: send queue full (%d WRs): %w", qp.Caps.MaxSendWR, ibv.ErrNoMem)
	}
	if w.WR.Flags&ibv.SendInline != 0 {
		if inline != nil {
			if len(inline) > qp.Caps.MaxInlineData {
				return fmt.Errorf("verbs: %d inline bytes: %w", len(inline), ibv.ErrInvalid)
			}
			w.Inline = append(qp.inlineSlot(), inline...)
			w.Length = uint32(len(inline))
		} else if err := qp.copyInline(&w); err != nil {
			return err
		}
		qp.inlineNext++
	}
	qp.SQUsed.Add(1)
	qp.PostedSend = append(qp.PostedSend, w)
	return nil
}

// inlineSlot is the next slot of the inline buffer, empty (PostMu); the
// caller takes it (inlineNext++) only once its WQE is queued. Slots are
// reused in post order; one is free again once the WQE that used it has
// retired, and at most MaxSendWR WQEs are outstanding.
func (qp *QP) inlineSlot() []byte {
	size := qp.Caps.MaxInlineData
	off := int(qp.inlineNext%uint64(qp.Caps.MaxSendWR)) * size
	return qp.InlineBuf[off : off : off+size]
}

// copyInline copies an INLINE request's data into the next slot of the
// QP's inline buffer, under PostMu, so the caller may reuse its buffers when
// PostSend returns (as ibverbs promises). It reads the region table under
// the engine's mrMu read lock: no round trip to the engine goroutine, no
// allocation.
func (qp *QP) copyInline(w *SendWQE) error {
	dst := qp.inlineSlot()
	qp.Mem.RLock()
	defer qp.Mem.RUnlock()
	var one [1]ibv.SGE
	sgl := w.WR.SGList
	if w.Single {
		one[0] = w.SGE1
		sgl = one[:]
	}
	for _, s := range sgl {
		mr := qp.Mem.LookupMR(s.LKey)
		if mr == nil || mr.PD() != qp.PD {
			return fmt.Errorf("verbs: inline send WR %d: bad lkey %#x: %w", w.WR.ID, s.LKey, ibv.ErrInvalid)
		}
		b, ok := mr.Slice(s.Addr, s.Length)
		if !ok {
			return fmt.Errorf("verbs: inline send WR %d: SGE outside its region: %w", w.WR.ID, ibv.ErrInvalid)
		}
		dst = append(dst, b...)
	}
	w.Inline = dst
	return nil
}

// checkSendWR checks wr (checkWR) and makes it a send WQE.
func (qp *QP) checkSendWR(wr *WR) (SendWQE, error) {
	w := SendWQE{WR: *wr}
	n, err := checkWR(wr, qp.QPType, &qp.Caps, qp.PortMTU)
	if err != nil {
		return w, err
	}
	w.Length = n
	switch {
	case wr.Opcode == ibv.WRLocalInv || wr.Opcode == ibv.WRBindMW:
		w.WR.SGList = nil // a local operation moves no data
	case len(wr.SGList) == 1:
		// The engine owns the SG list from now on; the common single SGE
		// is kept in the WQE itself, saving an allocation per WR.
		w.SGE1, w.Single, w.WR.SGList = wr.SGList[0], true, nil
	default:
		w.WR.SGList = append([]ibv.SGE(nil), wr.SGList...)
	}
	return w, nil
}

// checkWR is the provider's check of a send work request (ibv.CheckSendWR):
// it returns the message's length.
func checkWR(wr *WR, typ ibv.QPType, c *ibv.QPCap, mtu int) (uint32, error) {
	s := ibv.WRShape{ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, SGList: wr.SGList, RemoteAddr: wr.RemoteAddr, RemoteQPN: wr.RemoteQPN,
		AH: wr.AH != nil, AHBad: wr.AHBad}
	if b := wr.Bind; b != nil {
		s.Bind, s.BindMW, s.BindForeign = true, b.MW != nil, b.Foreign
	}
	return ibv.CheckSendWR(&s, typ, c, mtu)
}

// notePostedRecv tells the engine about the n receives queued before a bad one.
func (qp *QP) notePostedRecv(n int) {
	if n > 0 {
		qp.notePosted()
	}
}

// GIDAddr returns the IP address a GID stands for.
func GIDAddr(g netip.Addr) netip.Addr { return g.Unmap() }

// RecvWQE is a posted receive as the engine keeps it: the common single SGE
// is held in the WQE, so posting one allocates nothing.
type RecvWQE struct {
	ID     uint64
	sgl    []ibv.SGE // a private copy when there are several SGEs
	sge1   ibv.SGE
	single bool
}

func newRecvWQE(wr *ibv.RecvWR) RecvWQE {
	if len(wr.SGList) == 1 {
		return RecvWQE{ID: wr.ID, sge1: wr.SGList[0], single: true}
	}
	return RecvWQE{ID: wr.ID, sgl: append([]ibv.SGE(nil), wr.SGList...)}
}

// Sges returns the WQE's SG list; buf backs the single-SGE case.
func (w *RecvWQE) Sges(buf *[1]ibv.SGE) []ibv.SGE {
	if !w.single {
		return w.sgl
	}
	buf[0] = w.sge1
	return buf[:]
}
