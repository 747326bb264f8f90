package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
)

// MR is a registered memory region.
type MR struct {
	pd     *PD
	buf    []byte     // the region's memory, in this process
	mem    ProcMemory // or, for a daemon's client's own memory, where it is
	length uint64
	addr   uint64
	access ibv.Access
	lkey   uint32
	rkey   uint32
	valid  bool // engine-owned
	// boundMWs counts the memory windows bound to the region (engine-owned).
	boundMWs int
}

// RegMR registers buf as a region whose first byte has the address iova;
// the caller checked the length and access.
func (pd *PD) RegMR(buf []byte, iova uint64, access ibv.Access) (*MR, error) {
	mr := &MR{pd: pd, buf: buf, length: uint64(len(buf)), access: access, addr: iova}
	return mr, pd.dev.do(func() error { return pd.dev.addMR(mr) })
}

// RegProcMR registers length bytes of another process's memory, reached
// through mem, at address iova; the caller checked the arguments.
func (pd *PD) RegProcMR(mem ProcMemory, iova, length uint64, access ibv.Access) (*MR, error) {
	mr := &MR{pd: pd, mem: mem, length: length, access: access, addr: iova}
	return mr, pd.dev.do(func() error { return pd.dev.addMR(mr) })
}

// LKey is the local key that SGEs name.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the remote key peers name.
func (m *MR) RKey() uint32 { return m.rkey }

// Bytes is the region's memory in this process (nil for another's).
func (m *MR) Bytes() []byte { return m.buf }

// Dereg deregisters the region on the engines, between two packets (see
// verbs.MR.Dereg): EBUSY while work in flight holds its memory.
func (m *MR) Dereg() error {
	return m.pd.dev.do(func() error {
		if !m.valid {
			return fmt.Errorf("verbs: MR already deregistered: %w", ibv.ErrInvalid)
		}
		if m.boundMWs > 0 {
			return fmt.Errorf("verbs: %d memory windows are bound to the MR: %w", m.boundMWs, ibv.ErrBusy)
		}
		o := &m.pd.dev.objs
		if use := o.mrInUse(m); use != "" {
			return fmt.Errorf("verbs: the MR is in use by %s: %w", use, ibv.ErrBusy)
		}
		o.removeMR(m)
		o.revokeWrites(m)
		o.revokeReplies(m)
		return nil
	})
}

// revokeWrites ends every multi-packet RDMA WRITE arriving into mr, just
// deregistered: no packet of it touches the memory again.
func (e *objects) revokeWrites(mr *MR) {
	for _, qp := range e.live {
		if w := &qp.t.write; qp.t.respOp == respWrite && w.mr == mr {
			w.mr, w.revoked = nil, true
		}
	}
}

// mrInUse says what in-flight work holds memory of mr, or "" if none. A
// QP's send WQEs name regions of its own PD; its receive WQEs, those of its
// SRQ's PD when it has one, which may be another (so every QP is looked at).
func (e *objects) mrInUse(mr *MR) string {
	for _, qp := range e.live {
		t := &qp.t
		recvPD := qp.pd
		if qp.srq != nil {
			recvPD = qp.srq.pd
		}
		if t.recv.active && recvPD == mr.pd {
			var one [1]ibv.SGE
			for _, s := range t.recv.wr.sges(&one) {
				if s.LKey == mr.lkey {
					return fmt.Sprintf("a SEND in progress into receive WR %d of QP %#x", t.recv.wr.ID, qp.qpn)
				}
			}
		}
		if qp.pd != mr.pd {
			continue
		}
		for i := range t.sq {
			if t.sq[i].namesLKey(mr.lkey) {
				return fmt.Sprintf("send WR %d of QP %#x", t.sq[i].wr.ID, qp.qpn)
			}
		}
		qp.postMu.Lock()
		for i := range qp.postSend {
			if qp.postSend[i].namesLKey(mr.lkey) {
				id := qp.postSend[i].wr.ID
				qp.postMu.Unlock()
				return fmt.Sprintf("send WR %d of QP %#x", id, qp.qpn)
			}
		}
		qp.postMu.Unlock()
	}
	return ""
}

// namesLKey reports whether the WQE's SG list names lkey (INLINE data was
// copied when posted and names nothing).
func (w *sendWQE) namesLKey(lkey uint32) bool {
	if w.wr.Flags&ibv.SendInline != 0 {
		return false
	}
	if w.single {
		return w.sge1.LKey == lkey
	}
	for _, s := range w.wr.SGList {
		if s.LKey == lkey {
			return true
		}
	}
	return false
}

// mrTable maps key indexes to regions and memory windows; keys are
// index<<8 | a random byte, so a stale or guessed key rarely names a live
// region (as rxe). Window indexes start at mwFirstIndex.
type mrTable struct {
	mrs  []*MR // index 0 unused
	free []uint32

	mws    []*MW // mws[i] has index mwFirstIndex+i
	mwFree []uint32
}

func (d *NIC) addMR(mr *MR) error {
	e := &d.objs
	e.mrMu.Lock() // the table may grow: posters must not read it meanwhile
	defer e.mrMu.Unlock()
	t := &e.mrs
	var idx uint32
	if n := len(t.free); n > 0 {
		idx, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if len(t.mrs) == 0 {
			t.mrs = append(t.mrs, nil)
		}
		if len(t.mrs) > mrMaxIndex {
			return fmt.Errorf("verbs: too many memory regions: %w", ibv.ErrNoMem)
		}
		idx = uint32(len(t.mrs))
		t.mrs = append(t.mrs, nil)
	}
	key := idx<<8 | uint32(d.rng.IntN(256))
	mr.lkey, mr.rkey, mr.valid = key, key, true
	t.mrs[idx] = mr
	mr.pd.users.Add(1)
	return nil
}

func (e *objects) removeMR(mr *MR) {
	idx := mr.lkey >> 8
	// An inline post copying from the region finishes first; later ones
	// no longer find it.
	e.mrMu.Lock()
	e.mrs.mrs[idx] = nil
	mr.valid = false
	e.mrMu.Unlock()
	e.mrs.free = append(e.mrs.free, idx)
	mr.pd.users.Add(-1)
}

// lookupMR returns the live region with this key, or nil.
func (e *objects) lookupMR(key uint32) *MR {
	idx := key >> 8
	if idx == 0 || int(idx) >= len(e.mrs.mrs) {
		return nil
	}
	mr := e.mrs.mrs[idx]
	if mr == nil || mr.lkey != key {
		return nil
	}
	return mr
}

// slice returns the region's bytes [addr, addr+n) if they lie inside it
// and in this process.
func (m *MR) slice(addr uint64, n uint32) ([]byte, bool) { return ibv.SliceAt(m.buf, m.addr, addr, n) }
