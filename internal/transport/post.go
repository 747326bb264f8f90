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
	e := &qp.dev.objs
	e.mem.RLock()
	defer e.mem.RUnlock()
	var one [1]ibv.SGE
	sgl := w.wr.SGList
	if w.single {
		one[0] = w.sge1
		sgl = one[:]
	}
	for _, s := range sgl {
		mr := e.lookupMR(s.LKey)
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
	n, err := checkWR(wr, qp.typ, &qp.cap, qp.dev.cfg.ActiveMTU)
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

// CheckSendWR checks wr as PostSend checks it for a QP of type typ with
// capabilities c on a port of MTU mtu, queueing nothing: a daemon's
// client checks its posts so before writing them to a ring.
func CheckSendWR(wr *WR, typ ibv.QPType, c ibv.QPCap, mtu int) error {
	_, err := checkWR(wr, typ, &c, mtu)
	return err
}

// checkWR is the provider's check of a send work request (rxe's
// post_one_send and validate_send_wr): it returns the message's length.
func checkWR(wr *WR, typ ibv.QPType, c *ibv.QPCap, mtu int) (uint32, error) {
	bad := func(why string) (uint32, error) {
		return 0, fmt.Errorf("verbs: send WR %d: %s: %w", wr.ID, why, ibv.ErrInvalid)
	}
	if typ == ibv.QPTypeUD {
		if wr.Opcode != ibv.WRSend && wr.Opcode != ibv.WRSendWithImm {
			return bad(fmt.Sprintf("opcode %d on a UD QP (SEND and SEND_WITH_IMM only)", wr.Opcode))
		}
		if wr.AH == nil || wr.AHBad {
			return bad("a UD send needs a live address handle of the QP's device")
		}
		if wr.RemoteQPN > 0xffffff {
			return bad(fmt.Sprintf("remote QPN %#x", wr.RemoteQPN))
		}
	} else if wr.AH != nil {
		return bad("an address handle on a connected QP")
	}
	switch wr.Opcode {
	case ibv.WRSend, ibv.WRSendWithImm, ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm:
	case ibv.WRLocalInv:
		if wr.Flags&ibv.SendInline != 0 {
			return bad("LOCAL_INV cannot be inline")
		}
		return 0, nil
	case ibv.WRBindMW:
		if wr.Bind == nil || wr.Bind.MW == nil {
			return bad("BIND_MW without a memory window")
		}
		if wr.Bind.Foreign {
			return bad("memory window or region of another device")
		}
		if wr.Flags&ibv.SendInline != 0 {
			return bad("BIND_MW cannot be inline")
		}
		return 0, nil
	case ibv.WRSendWithInv, ibv.WRRDMARead, ibv.WRAtomicCmpAndSwp, ibv.WRAtomicFetchAdd:
		if typ != ibv.QPTypeRC {
			return bad("opcode needs an RC QP")
		}
	default:
		return bad(fmt.Sprintf("unknown opcode %d", wr.Opcode))
	}
	if len(wr.SGList) > c.MaxSendSGE {
		return bad(fmt.Sprintf("%d SGEs, QP allows %d", len(wr.SGList), c.MaxSendSGE))
	}
	var total uint64
	for _, s := range wr.SGList {
		total += uint64(s.Length)
	}
	if total > ibv.MaxMsgSize {
		return bad(fmt.Sprintf("message of %d bytes", total))
	}
	if typ == ibv.QPTypeUD && int(total) > mtu {
		return bad(fmt.Sprintf("a UD message of %d bytes, over the port's MTU %d", total, mtu))
	}
	if wr.Opcode == ibv.WRAtomicCmpAndSwp || wr.Opcode == ibv.WRAtomicFetchAdd {
		if len(wr.SGList) != 1 || wr.SGList[0].Length != 8 || wr.RemoteAddr%8 != 0 {
			return bad("an atomic needs one 8-byte SGE and an 8-byte aligned remote address")
		}
	}
	if wr.Flags&ibv.SendInline != 0 {
		if isReadOrAtomic(wr.Opcode) || int(total) > c.MaxInlineData {
			return bad(fmt.Sprintf("inline %d bytes (max %d) or on a READ/atomic", total, c.MaxInlineData))
		}
	}
	return uint32(total), nil
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
