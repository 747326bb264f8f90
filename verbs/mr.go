package verbs

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/xdproce/xdproce/internal/ibv"
)

// PD is a protection domain: QPs reach only memory regions of their own PD.
type PD struct {
	dev *Device
	ops ibv.PDOps
}

// Dealloc frees the PD (ibv_dealloc_pd): EBUSY while a region, window, QP,
// SRQ or address handle uses it.
func (pd *PD) Dealloc() error { return pd.ops.Dealloc() }

// AllocPD creates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	ops, err := d.ops.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{dev: d, ops: ops}, nil
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
	ops    ibv.MROps
	dm     *DM // the device memory it lies in, if any (dm.go)
	dmOff  int // and where in it
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
// needs local write, as ibverbs requires. Attached to a daemon, the daemon
// copies to and from buf (process_vm_readv/writev).
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := checkAccess(len(buf), access); err != nil {
		return nil, err
	}
	return pd.register(buf, uint64(uintptr(unsafe.Pointer(&buf[0]))), access)
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
	return pd.register(buf, iova, access)
}

func (pd *PD) register(buf []byte, iova uint64, access Access) (*MR, error) {
	ops, err := pd.ops.RegMR(buf, iova, access)
	if err != nil {
		return nil, err
	}
	return &MR{pd: pd, buf: buf, length: uint64(len(buf)), addr: iova, access: access, lkey: ops.LKey(), rkey: ops.RKey(), ops: ops}, nil
}

// checkAccess checks a registration's length and access flags.
func checkAccess(n int, access Access) error {
	if n <= 0 || uint64(n) > MaxMRSize {
		return fmt.Errorf("verbs: register %d bytes: %w", n, ErrInvalid)
	}
	return checkAccessFlags(access)
}

// checkAccessFlags checks a registration's access flags.
func checkAccessFlags(access Access) error {
	if access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind) != 0 {
		return fmt.Errorf("verbs: unknown access flags %#x: %w", uint32(access), ErrInvalid)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return fmt.Errorf("verbs: remote write or atomic access needs local write: %w", ErrInvalid)
	}
	return nil
}

// AllocMR registers n bytes of memory the provider allocates: in-process,
// the process's; attached to a daemon, memory shared with it (a sealed
// memfd both map), which its engines reach without a copy or system call.
func (pd *PD) AllocMR(n int, access Access) (*MR, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: allocate %d bytes: %w", n, ErrInvalid)
	}
	if err := checkAccess(n, access); err != nil {
		return nil, err
	}
	ops, err := pd.ops.AllocMR(n, access)
	if err != nil {
		return nil, err
	}
	buf := ops.Bytes()
	return &MR{pd: pd, buf: buf, length: uint64(n), addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), access: access,
		lkey: ops.LKey(), rkey: ops.RKey(), ops: ops}, nil
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
	if err := m.unfastDM(); err != nil {
		return err
	}
	if err := m.ops.Dereg(); err != nil {
		if m.dm != nil {
			if f, ok := m.dm.mem.(fastDM); ok {
				err = errors.Join(err, f.RegisterFast(m.ops, m.dmOff))
			}
		}
		return err
	}
	m.derefDM()
	return nil
}

// RegProcMR registers length bytes of another process's memory, reached
// through mem, at address iova (the daemon registers a client's own memory
// so: ibv_reg_mr on malloc'd memory). ErrNotSup attached to a daemon.
func (pd *PD) RegProcMR(mem ProcMemory, iova, length uint64, access Access) (*MR, error) {
	if err := checkAccess(int(min(length, MaxMRSize+1)), access); err != nil {
		return nil, err
	}
	if iova+length < iova || mem == nil {
		return nil, fmt.Errorf("verbs: region at %#x of %d bytes: %w", iova, length, ErrInvalid)
	}
	ops, err := pd.ops.RegProcMR(mem, iova, length, access)
	if err != nil {
		return nil, err
	}
	return &MR{pd: pd, length: length, addr: iova, access: access, lkey: ops.LKey(), rkey: ops.RKey(), ops: ops}, nil
}
