package verbs

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/xdproce/xdproce/uverbs"
)

// PD is a protection domain: QPs reach only memory regions of their own PD.
type PD struct {
	dev *Device
	id  uint32
	// users counts the regions, windows, QPs, SRQs and address handles of
	// an in-process PD: Dealloc is EBUSY while any exists, as ibv_dealloc_pd.
	users atomic.Int32
}

// Dealloc frees the PD (ibv_dealloc_pd): EBUSY while a region, window, QP,
// SRQ or address handle uses it.
func (pd *PD) Dealloc() error {
	if pd.dev.rem != nil {
		_, err := pd.dev.rem.callNoFDs(uverbs.OpDeallocPD, func(e *uverbs.Encoder) { e.U32(pd.id) })
		return err
	}
	if n := pd.users.Load(); n > 0 {
		return fmt.Errorf("verbs: PD used by %d objects: %w", n, ErrBusy)
	}
	return nil
}

// AllocPD creates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	pd := &PD{dev: d}
	if d.rem != nil {
		var err error
		if pd.id, err = d.rem.allocPD(); err != nil {
			return nil, err
		}
		return pd, nil
	}
	err := d.do(func() error {
		d.objs.pdSeq++
		pd.id = d.objs.pdSeq
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pd, nil
}

// MR is a registered memory region.
type MR struct {
	pd     *PD
	buf    []byte       // the region's memory, in this process
	mem    RemoteMemory // or, for a daemon's client's own memory, where it is
	length uint64
	addr   uint64
	access Access
	lkey   uint32
	rkey   uint32
	valid  bool // engine-owned
	// boundMWs counts the memory windows bound to the region (engine-owned).
	boundMWs int
	rem      *remoteMR // the daemon's object, on a client's device
}

// Addr is the address of the region's first byte, the base of SGE and
// remote addresses into it.
func (m *MR) Addr() uint64 { return m.addr }

// Len is the region's length in bytes.
func (m *MR) Len() int { return int(m.length) }

// LKey is the local key that SGEs name.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the remote key peers name in RDMA and atomic requests.
func (m *MR) RKey() uint32 { return m.rkey }

// Bytes is the registered memory (nil for another process's).
func (m *MR) Bytes() []byte { return m.buf }

// RegMR registers buf with the given access. Remote write or atomic access
// needs local write, as ibverbs requires.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := checkAccess(len(buf), access); err != nil {
		return nil, err
	}
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	if pd.dev.rem != nil {
		return pd.regRemoteMR(buf, addr, access)
	}
	return pd.register(buf, addr, access)
}

// RegMRIOVA registers buf as a region whose first byte has the address
// iova in SG lists and remote requests (ibv_reg_mr_iova2): the daemon
// registers memory a client shares at the address the client mapped it.
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if err := checkAccess(len(buf), access); err != nil {
		return nil, err
	}
	if iova+uint64(len(buf)) < iova {
		return nil, fmt.Errorf("verbs: region at %#x of %d bytes wraps: %w", iova, len(buf), ErrInvalid)
	}
	if pd.dev.rem != nil {
		return pd.regRemoteMR(buf, iova, access)
	}
	return pd.register(buf, iova, access)
}

func (pd *PD) register(buf []byte, iova uint64, access Access) (*MR, error) {
	mr := &MR{pd: pd, buf: buf, length: uint64(len(buf)), access: access, addr: iova}
	err := pd.dev.do(func() error { return pd.dev.addMR(mr) })
	if err != nil {
		return nil, err
	}
	return mr, nil
}

// checkAccess checks a registration's length and access flags.
func checkAccess(n int, access Access) error {
	if n <= 0 || uint64(n) > MaxMRSize {
		return fmt.Errorf("verbs: register %d bytes: %w", n, ErrInvalid)
	}
	if access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind) != 0 {
		return fmt.Errorf("verbs: unknown access flags %#x: %w", uint32(access), ErrInvalid)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return fmt.Errorf("verbs: remote write or atomic access needs local write: %w", ErrInvalid)
	}
	return nil
}

// AllocMR registers n bytes of device-allocated memory.
func (pd *PD) AllocMR(n int, access Access) (*MR, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: allocate %d bytes: %w", n, ErrInvalid)
	}
	if pd.dev.rem != nil {
		if err := checkAccess(n, access); err != nil {
			return nil, err
		}
		return pd.allocRemoteMR(n, access)
	}
	return pd.RegMR(make([]byte, n), access)
}

// Dereg deregisters the region. It runs on the engine between two packets,
// and when it returns nil no packet touches the memory again: requests
// naming the keys afterwards get a remote access error, and send WRs naming
// the lkey complete with LOC_PROT_ERR.
//
// The engine keeps the memory it resolved for a message until the message is
// done, so Dereg fails with EBUSY, leaving the region registered, while the
// application's own work uses it: a send WR posted on a QP of the device and
// not yet completed names the lkey in its SG list (not INLINE), a responder
// is in the middle of a multi-packet SEND into a receive WR naming it, or
// memory windows are bound to it. Completing the WRs (or moving the QP to
// the error or reset state, which flushes them, or destroying it) releases
// the region. A multi-packet RDMA WRITE a peer is in the middle of does not
// hold it: a peer that sends a FIRST and never the LAST (a lost UC message,
// a dead or hostile requester) could otherwise pin the region for as long
// as the QP lives. Dereg revokes it instead, as a hardware RNIC invalidates
// the key: the rest of that WRITE fails with a remote access error (RC: NAK,
// and the QP goes to the error state; UC: the message is dropped). rxe
// holds a reference for these uses; ibverbs leaves deregistering a region
// in use undefined.
func (m *MR) Dereg() error {
	if m.rem != nil {
		return m.deregRemote()
	}
	return m.pd.dev.do(func() error {
		if !m.valid {
			return fmt.Errorf("verbs: MR already deregistered: %w", ErrInvalid)
		}
		if m.boundMWs > 0 {
			return fmt.Errorf("verbs: %d memory windows are bound to the MR: %w", m.boundMWs, ErrBusy)
		}
		o := &m.pd.dev.objs
		if use := o.mrInUse(m); use != "" {
			return fmt.Errorf("verbs: the MR is in use by %s: %w", use, ErrBusy)
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
			var one [1]SGE
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
	if w.wr.Flags&SendInline != 0 {
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

func (d *Device) addMR(mr *MR) error {
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
			return fmt.Errorf("verbs: too many memory regions: %w", ErrNoMem)
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
func (m *MR) slice(addr uint64, n uint32) ([]byte, bool) {
	if addr < m.addr || m.buf == nil {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

// RemoteMemory is memory of another process that the engines reach by
// copying: a daemon's client's own memory (process_vm_readv/writev). Its
// offsets are the region's. A copy that fails (the client unmapped the
// memory, or died) moves nothing; the client's data is then undefined, as
// ibverbs leaves it when registered memory is freed.
type RemoteMemory interface {
	ReadAt(p []byte, off uint64) error
	WriteAt(p []byte, off uint64) error
}

// RegRemoteMR registers length bytes of another process's memory, reached
// through mem, at address iova (the daemon registers a client's own memory
// so: ibv_reg_mr on malloc'd memory).
func (pd *PD) RegRemoteMR(mem RemoteMemory, iova, length uint64, access Access) (*MR, error) {
	if err := checkAccess(int(min(length, MaxMRSize+1)), access); err != nil {
		return nil, err
	}
	if iova+length < iova || mem == nil {
		return nil, fmt.Errorf("verbs: region at %#x of %d bytes: %w", iova, length, ErrInvalid)
	}
	mr := &MR{pd: pd, mem: mem, length: length, access: access, addr: iova}
	err := pd.dev.do(func() error { return pd.dev.addMR(mr) })
	if err != nil {
		return nil, err
	}
	return mr, nil
}

// RemoteReadVec is a RemoteMemory that takes several reads in one call: the
// engines read what a transmit batch sends from another process's memory
// at once, before they seal the batch's frames.
type RemoteReadVec interface {
	ReadVec(p [][]byte, off []uint64) error
}

// RemoteWriteVec is a RemoteMemory that takes several writes in one call:
// the engines queue what received frames carry for another process's
// memory and hand it over once per receive batch (and before anything that
// could let the data be seen: a completion, a frame sent).
type RemoteWriteVec interface {
	WriteVec(p [][]byte, off []uint64) error
}
