package verbs

import (
	"fmt"
	"unsafe"

	"github.com/xdproce/xdproce/internal/transport"

	"github.com/xdproce/xdproce/uverbs"
)

// PD is a protection domain: QPs reach only memory regions of their own PD.
type PD struct {
	dev *Device
	id  uint32
	c   *transport.PD // in-process; nil on a device attached to a daemon
}

// Dealloc frees the PD (ibv_dealloc_pd): EBUSY while a region, window, QP,
// SRQ or address handle uses it.
func (pd *PD) Dealloc() error {
	if pd.dev.att != nil {
		_, err := pd.dev.att.callNoFDs(uverbs.OpDeallocPD, func(e *uverbs.Encoder) { e.U32(pd.id) })
		return err
	}
	if n := pd.c.Users(); n > 0 {
		return fmt.Errorf("verbs: PD used by %d objects: %w", n, ErrBusy)
	}
	return nil
}

// AllocPD creates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	pd := &PD{dev: d}
	if d.att != nil {
		var err error
		if pd.id, err = d.att.allocPD(); err != nil {
			return nil, err
		}
		return pd, nil
	}
	c, err := d.nic.AllocPD()
	if err != nil {
		return nil, err
	}
	pd.c, pd.id = c, c.ID()
	return pd, nil
}

// MR is a registered memory region.
type MR struct {
	pd     *PD
	buf    []byte // the region's memory, in this process (nil for another's)
	length uint64
	addr   uint64
	access Access
	lkey   uint32
	rkey   uint32
	c      *transport.MR // the engines' region, in-process
	att    *attachedMR   // the daemon's object, on a client's device
	dm     *DM           // the device memory it lies in, if any (dm.go)
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
	if pd.dev.att != nil {
		return pd.regAttachedMR(buf, addr, access)
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
	if pd.dev.att != nil {
		return pd.regAttachedMR(buf, iova, access)
	}
	return pd.register(buf, iova, access)
}

func (pd *PD) register(buf []byte, iova uint64, access Access) (*MR, error) {
	c, err := pd.c.RegMR(buf, iova, access)
	if err != nil {
		return nil, err
	}
	return &MR{pd: pd, buf: buf, length: uint64(len(buf)), addr: iova, access: access, lkey: c.LKey(), rkey: c.RKey(), c: c}, nil
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
	if pd.dev.att != nil {
		if err := checkAccess(n, access); err != nil {
			return nil, err
		}
		return pd.allocAttachedMR(n, access)
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
	if m.att != nil {
		return m.deregAttached()
	}
	if err := m.c.Dereg(); err != nil {
		return err
	}
	m.derefDM()
	return nil
}

// RegProcMR registers length bytes of another process's memory, reached
// through mem, at address iova (the daemon registers a client's own memory
// so: ibv_reg_mr on malloc'd memory).
func (pd *PD) RegProcMR(mem ProcMemory, iova, length uint64, access Access) (*MR, error) {
	if pd.dev.att != nil {
		return nil, errDaemonSide("another process's memory")
	}
	if err := checkAccess(int(min(length, MaxMRSize+1)), access); err != nil {
		return nil, err
	}
	if iova+length < iova || mem == nil {
		return nil, fmt.Errorf("verbs: region at %#x of %d bytes: %w", iova, length, ErrInvalid)
	}
	c, err := pd.c.RegProcMR(mem, iova, length, access)
	if err != nil {
		return nil, err
	}
	return &MR{pd: pd, length: length, addr: iova, access: access, lkey: c.LKey(), rkey: c.RKey(), c: c}, nil
}
