// The device's memory (package memory: regions, windows, their keys and
// protection domains) as the engines use it: registration and
// deregistration as control operations, and the engine's key lookups,
// binds, invalidations and window checks.

package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
)

type (
	// PD is a protection domain.
	PD = memory.PD
	// MR is a registered memory region.
	MR = memory.MR
	// MW is a memory window.
	MW = memory.MW
)

// AllocPD creates a protection domain.
func (d *NIC) AllocPD() (*PD, error) {
	var pd *PD
	err := d.do(func() error {
		d.objs.pdSeq++
		pd = memory.NewPD(d.objs.pdSeq)
		return nil
	})
	return pd, err
}

// RegMR registers buf as a region of pd whose first byte has the address
// iova; the caller checked the length and access.
func (d *NIC) RegMR(pd *PD, buf []byte, iova uint64, access ibv.Access) (*MR, error) {
	mr := memory.NewMR(pd, buf, iova, access)
	return mr, d.do(func() error { return d.objs.mem.AddMR(mr, uint32(d.rng.IntN(256))) })
}

// RegProcMR registers length bytes of another process's memory, reached
// through mem, at address iova; the caller checked the arguments.
func (d *NIC) RegProcMR(pd *PD, mem ProcMemory, iova, length uint64, access ibv.Access) (*MR, error) {
	mr := memory.NewProcMR(pd, mem, iova, length, access)
	return mr, d.do(func() error { return d.objs.mem.AddMR(mr, uint32(d.rng.IntN(256))) })
}

// DeregMR deregisters the region on the engines, between two packets (see
// verbs.MR.Dereg): EBUSY while work in flight holds its memory.
func (d *NIC) DeregMR(m *MR) error {
	return d.do(func() error {
		if !m.Valid() {
			return fmt.Errorf("verbs: MR already deregistered: %w", ibv.ErrInvalid)
		}
		if n := m.BoundMWs(); n > 0 {
			return fmt.Errorf("verbs: %d memory windows are bound to the MR: %w", n, ibv.ErrBusy)
		}
		o := &d.objs
		if use := mrInUse(o, m); use != "" {
			return fmt.Errorf("verbs: the MR is in use by %s: %w", use, ibv.ErrBusy)
		}
		o.mem.RemoveMR(m)
		revokeWrites(o, m)
		o.revokeReplies(m)
		return nil
	})
}

// revokeWrites ends every multi-packet RDMA WRITE arriving into mr, just
// deregistered: no packet of it touches the memory again.
func revokeWrites(e *objects, mr *MR) {
	for _, qp := range e.live {
		if w := &qp.Transport.Write; qp.Transport.RespOp == queue.RespWrite && w.MR == mr {
			w.MR, w.Revoked = nil, true
		}
	}
}

// mrInUse says what in-flight work holds memory of mr, or "" if none. A
// QP's send WQEs name regions of its own PD; its receive WQEs, those of its
// SRQ's PD when it has one, which may be another (so every QP is looked at).
func mrInUse(e *objects, mr *MR) string {
	lkey := mr.LKey()
	for _, qp := range e.live {
		t := &qp.Transport
		recvPD := qp.PD
		if qp.SRQ != nil {
			recvPD = qp.SRQ.PD
		}
		if t.Recv.Active && recvPD == mr.PD() {
			var one [1]ibv.SGE
			for _, s := range t.Recv.WR.Sges(&one) {
				if s.LKey == lkey {
					return fmt.Sprintf("a SEND in progress into receive WR %d of QP %#x", t.Recv.WR.ID, qp.Number)
				}
			}
		}
		if qp.PD != mr.PD() {
			continue
		}
		for i := range t.SQ {
			if t.SQ[i].NamesLKey(lkey) {
				return fmt.Sprintf("send WR %d of QP %#x", t.SQ[i].WR.ID, qp.Number)
			}
		}
		qp.PostMu.Lock()
		for i := range qp.PostedSend {
			if qp.PostedSend[i].NamesLKey(lkey) {
				id := qp.PostedSend[i].WR.ID
				qp.PostMu.Unlock()
				return fmt.Sprintf("send WR %d of QP %#x", id, qp.Number)
			}
		}
		qp.PostMu.Unlock()
	}
	return ""
}

// AllocMW creates a memory window of pd, of type 1 or (typ1 false) type 2.
func (d *NIC) AllocMW(pd *PD, typ1 bool) (*MW, error) {
	mw := memory.NewMW(pd, typ1)
	if err := d.do(func() error { return d.objs.mem.AddMW(mw, uint32(d.rng.IntN(256))) }); err != nil {
		return nil, err
	}
	return mw, nil
}

// DeallocMW frees the window; a bound window is unbound first, so its
// rkey stops working when DeallocMW returns.
func (d *NIC) DeallocMW(mw *MW) error {
	return d.do(func() error {
		if !mw.Alive() {
			return fmt.Errorf("verbs: memory window already deallocated: %w", ibv.ErrInvalid)
		}
		d.objs.mem.RemoveMW(mw)
		return nil
	})
}

// lookupMR returns the live region with this key, or nil.
func (e *objects) lookupMR(key uint32) *MR { return e.mem.LookupMR(key) }

// lookupMWIndex returns the live window whose rkey has key's index.
func (e *objects) lookupMWIndex(key uint32) *MW { return e.mem.LookupMWIndex(key) }

func isMWKey(key uint32) bool { return memory.IsMWKey(key) }

// bindMW executes a BIND_MW work request of qp; false is a bind error.
func (e *engine) bindMW(qp *queue.QP, b *queue.Bind) bool {
	return e.mem.Bind(qp.OwnerID, qp.PD, b.MW, b.MR, memory.BindArgs{RKey: b.RKey, Addr: b.Addr, Length: b.Length, Access: b.Access})
}

// invalidateRKey frees the type-2 window named by key for qp (LOCAL_INV or
// a peer's SEND_WITH_INV).
func (e *engine) invalidateRKey(qp *queue.QP, key uint32) bool { return e.mem.Invalidate(qp.PD, key) }

// checkMWAccess resolves a remote access of qp through a window.
func (e *engine) checkMWAccess(qp *queue.QP, rkey uint32, va uint64, n uint32, need ibv.Access) (*MR, bool) {
	return e.mem.CheckMWAccess(qp.OwnerID, qp.PD, rkey, va, n, need)
}

// spanOf returns the region's piece [addr, addr+n) if it lies inside it.
func spanOf(m *MR, addr uint64, n uint32) (queue.Span, bool) {
	off, ok := m.Locate(addr, n)
	if !ok {
		return queue.Span{}, false
	}
	if mem := m.Proc(); mem != nil {
		return queue.Span{Mem: mem, Off: off, N: n}, true
	}
	return queue.Span{B: m.Bytes()[off : off+uint64(n)]}, true
}

// localSpan is a span of local bytes (INLINE data).
func localSpan(b []byte) queue.Span { return queue.Span{B: b} }
