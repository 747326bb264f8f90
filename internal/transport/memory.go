// The device's memory (package memory: regions, windows, their keys and
// protection domains) as control operations: protection domains,
// registration and deregistration, windows allocated and freed.

package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/engine/tables"
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
		d.dev.Objs.PDSeq++
		pd = memory.NewPD(d.dev.Objs.PDSeq)
		return nil
	})
	return pd, err
}

// RegMR registers buf as a region of pd whose first byte has the address
// iova; the caller checked the length and access.
func (d *NIC) RegMR(pd *PD, buf []byte, iova uint64, access ibv.Access) (*MR, error) {
	mr := memory.NewMR(pd, buf, iova, access)
	return mr, d.do(func() error { return d.dev.Objs.Mem.AddMR(mr, uint32(d.rng.IntN(256))) })
}

// RegProcMR registers length bytes of another process's memory, reached
// through mem, at address iova; the caller checked the arguments.
func (d *NIC) RegProcMR(pd *PD, mem ProcMemory, iova, length uint64, access ibv.Access) (*MR, error) {
	mr := memory.NewProcMR(pd, mem, iova, length, access)
	return mr, d.do(func() error { return d.dev.Objs.Mem.AddMR(mr, uint32(d.rng.IntN(256))) })
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
		o := &d.dev.Objs
		if use := mrInUse(o, m); use != "" {
			return fmt.Errorf("verbs: the MR is in use by %s: %w", use, ibv.ErrBusy)
		}
		o.Mem.RemoveMR(m)
		revokeWrites(o, m)
		o.RevokeReplies(m)
		return nil
	})
}

// revokeWrites ends every multi-packet RDMA WRITE arriving into mr, just
// deregistered: no packet of it touches the memory again.
func revokeWrites(e *tables.Objects, mr *MR) {
	for _, qp := range e.Live {
		if w := &qp.Transport.Write; qp.Transport.RespOp == queue.RespWrite && w.MR == mr {
			w.MR, w.Revoked = nil, true
		}
	}
}

// mrInUse says what in-flight work holds memory of mr, or "" if none. A
// QP's send WQEs name regions of its own PD; its receive WQEs, those of its
// SRQ's PD when it has one, which may be another (so every QP is looked at).
func mrInUse(e *tables.Objects, mr *MR) string {
	lkey := mr.LKey()
	for _, qp := range e.Live {
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
	if err := d.do(func() error { return d.dev.Objs.Mem.AddMW(mw, uint32(d.rng.IntN(256))) }); err != nil {
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
		d.dev.Objs.Mem.RemoveMW(mw)
		return nil
	})
}
