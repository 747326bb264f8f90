package transport

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/internal/ibv"
)

// recvRetired releases the receive-queue slot of a completed receive WQE.
func (qp *QP) recvRetired() {
	if qp.srq != nil {
		qp.srq.used.Add(-1)
		qp.srq.freeSharedSlots()
		return
	}
	qp.rqUsed.Add(-1)
	qp.freeSharedSlots()
}

// enqueueSend appends a checked send WQE to the QP's posts (under postMu):
// ENOMEM if the send queue is full. An INLINE request's data is copied
// into the QP's inline buffer, from inline if given (a shared ring's slot
// carries it), else from the regions its SGEs name.
func (qp *QP) enqueueSend(w sendWQE, inline []byte) error {
	if int(qp.sqUsed.Load()) >= qp.cap.MaxSendWR {
		return fmt.Errorf("verbs: send queue full (%d WRs): %w", qp.cap.MaxSendWR, ibv.ErrNoMem)
	}
	if w.wr.Flags&ibv.SendInline != 0 {
		if inline != nil {
			if len(inline) > qp.cap.MaxInlineData {
				return fmt.Errorf("verbs: %d inline bytes: %w", len(inline), ibv.ErrInvalid)
			}
			w.inline = append(qp.inlineSlot(), inline...)
			w.length = uint32(len(inline))
		} else if err := qp.copyInline(&w); err != nil {
			return err
		}
		qp.inlineNext++
	}
	qp.sqUsed.Add(1)
	qp.postSend = append(qp.postSend, w)
	return nil
}

// inlineSlot is the next slot of the inline buffer, empty (postMu); the
// caller takes it (inlineNext++) only once its WQE is queued. Slots are
// reused in post order; one is free again once the WQE that used it has
// retired, and at most MaxSendWR WQEs are outstanding.
func (qp *QP) inlineSlot() []byte {
	size := qp.cap.MaxInlineData
	off := int(qp.inlineNext%uint64(qp.cap.MaxSendWR)) * size
	return qp.inlineBuf[off : off : off+size]
}

// copyInline copies an INLINE request's data into the next slot of the
// QP's inline buffer, under postMu, so the caller may reuse its buffers when
// PostSend returns (as ibverbs promises). It reads the region table under
// the engine's mrMu read lock: no round trip to the engine goroutine, no
// allocation.
func (qp *QP) copyInline(w *sendWQE) error {
	dst := qp.inlineSlot()
	qp.mem.RLock()
	defer qp.mem.RUnlock()
	var one [1]ibv.SGE
	sgl := w.wr.SGList
	if w.single {
		one[0] = w.sge1
		sgl = one[:]
	}
	for _, s := range sgl {
		mr := qp.mem.LookupMR(s.LKey)
		if mr == nil || mr.PD() != qp.pd {
			return fmt.Errorf("verbs: inline send WR %d: bad lkey %#x: %w", w.wr.ID, s.LKey, ibv.ErrInvalid)
		}
		b, ok := mr.Slice(s.Addr, s.Length)
		if !ok {
			return fmt.Errorf("verbs: inline send WR %d: SGE outside its region: %w", w.wr.ID, ibv.ErrInvalid)
		}
		dst = append(dst, b...)
	}
	w.inline = dst
	return nil
}

// checkSendWR checks wr (checkWR) and makes it a send WQE.
func (qp *QP) checkSendWR(wr *WR) (sendWQE, error) {
	w := sendWQE{wr: *wr}
	n, err := checkWR(wr, qp.typ, &qp.cap, qp.portMTU)
	if err != nil {
		return w, err
	}
	w.length = n
	switch {
	case wr.Opcode == ibv.WRLocalInv || wr.Opcode == ibv.WRBindMW:
		w.wr.SGList = nil // a local operation moves no data
	case len(wr.SGList) == 1:
		// The engine owns the SG list from now on; the common single SGE
		// is kept in the WQE itself, saving an allocation per WR.
		w.sge1, w.single, w.wr.SGList = wr.SGList[0], true, nil
	default:
		w.wr.SGList = append([]ibv.SGE(nil), wr.SGList...)
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

// gidAddr returns the IP address a GID stands for.
func gidAddr(g netip.Addr) netip.Addr { return g.Unmap() }

// recvWQE is a posted receive as the engine keeps it: the common single SGE
// is held in the WQE, so posting one allocates nothing.
type recvWQE struct {
	ID     uint64
	sgl    []ibv.SGE // a private copy when there are several SGEs
	sge1   ibv.SGE
	single bool
}

func newRecvWQE(wr *ibv.RecvWR) recvWQE {
	if len(wr.SGList) == 1 {
		return recvWQE{ID: wr.ID, sge1: wr.SGList[0], single: true}
	}
	return recvWQE{ID: wr.ID, sgl: append([]ibv.SGE(nil), wr.SGList...)}
}

// sges returns the WQE's SG list; buf backs the single-SGE case.
func (w *recvWQE) sges(buf *[1]ibv.SGE) []ibv.SGE {
	if !w.single {
		return w.sgl
	}
	buf[0] = w.sge1
	return buf[:]
}
