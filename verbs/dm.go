package verbs

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/ibv"
)

// Device memory (ibv_alloc_dm and friends, issue 34 item 1): memory the
// device allocates and its XDP program can write, a BPF_F_MMAPABLE array
// map mapped into the process (loader.DeviceMemory). The checks and errnos
// are the kernel's and mlx5's: rxe has no device memory at all, and
// rdma-core's pyverbs DM tests skip there. Attached to a daemon, the
// daemon allocates the map and passes its fd; the client maps the same
// pages, and a region over them is the daemon's over its own mapping.

// MaxDMSize is the most one AllocDM gives (ibv_device_attr_ex's
// max_dm_size, DeviceAttr.MaxDMSize where the device has device memory):
// 256 KiB, as the MEMIC of mlx5's ConnectX-6.
const MaxDMSize = ibv.MaxDMSize

// AccessZeroBased (IBV_ACCESS_ZERO_BASED) makes a region's addresses
// offsets from its start; a region over device memory must have it.
const AccessZeroBased = ibv.AccessZeroBased

// DM is a block of device memory (struct ibv_dm).
type DM struct {
	dev    *Device
	length int
	mu     sync.Mutex
	mem    ibv.DMOps // nil once freed
	mrs    int       // regions over it not yet deregistered
}

// AllocDM allocates length bytes of device memory, zeroed
// (ibv_alloc_dm): EINVAL beyond MaxDMSize as mlx5, EOPNOTSUPP where the
// kernel cannot give memory XDP can write; ENOMEM past a daemon's share.
func (d *Device) AllocDM(length int) (*DM, error) {
	if length <= 0 || length > MaxDMSize {
		return nil, fmt.Errorf("verbs: device memory of %d bytes (at most %d): %w", length, MaxDMSize, ErrInvalid)
	}
	mem, err := d.ops.AllocDM(length)
	if err != nil {
		return nil, err
	}
	return &DM{dev: d, length: length, mem: mem}, nil
}

// Len is the length asked for.
func (dm *DM) Len() int { return dm.length }

// span checks an access of n bytes at offset as mlx5_memcpy_to_dm does:
// EFAULT past the end, EINVAL unless both are multiples of 4 (the
// hardware's granularity, kept so that code written here runs there).
func (dm *DM) span(offset, n int) ([]byte, error) {
	if dm.mem == nil {
		return nil, fmt.Errorf("verbs: device memory freed: %w", ErrInvalid)
	}
	if offset < 0 || n < 0 || offset > dm.length || n > dm.length-offset {
		return nil, fmt.Errorf("verbs: %d bytes at %d of %d of device memory: %w", n, offset, dm.length, syscall.EFAULT)
	}
	if offset%4 != 0 || n%4 != 0 {
		return nil, fmt.Errorf("verbs: device memory copies are of whole 4-byte words: %d bytes at %d: %w", n, offset, ErrInvalid)
	}
	return dm.mem.Bytes()[offset : offset+n], nil
}

// CopyTo copies src into the device memory at offset (ibv_memcpy_to_dm).
func (dm *DM) CopyTo(offset int, src []byte) error {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	b, err := dm.span(offset, len(src))
	if err != nil {
		return err
	}
	copy(b, src)
	return nil
}

// CopyFrom copies len(dst) bytes of the device memory at offset into dst
// (ibv_memcpy_from_dm).
func (dm *DM) CopyFrom(dst []byte, offset int) error {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	b, err := dm.span(offset, len(dst))
	if err != nil {
		return err
	}
	copy(dst, b)
	return nil
}

// Free releases the memory (ibv_free_dm): EBUSY while regions over it are
// registered, as the kernel's use count.
func (dm *DM) Free() error {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.mem == nil {
		return fmt.Errorf("verbs: device memory already freed: %w", ErrInvalid)
	}
	if dm.mrs > 0 {
		return fmt.Errorf("verbs: %d regions over the device memory: %w", dm.mrs, ErrBusy)
	}
	err := dm.mem.Close()
	dm.mem = nil
	return err
}

// RegDMMR registers length bytes of dm from offset as a region
// (ibv_reg_dm_mr). As the kernel and mlx5: EINVAL without AccessZeroBased
// (the region's addresses run from 0), with AccessMWBind, or past the
// memory's end; a zero-length region is one.
func (pd *PD) RegDMMR(dm *DM, offset, length int, access Access) (*MR, error) {
	if access&AccessZeroBased == 0 {
		return nil, fmt.Errorf("verbs: a region over device memory must be zero-based: %w", ErrInvalid)
	}
	access &^= AccessZeroBased
	// Any length inside the block, none included: mlx5 registers a
	// zero-length region over MEMIC (the kernel checks only the bounds).
	if err := checkAccessFlags(access); err != nil {
		return nil, err
	}
	if access&AccessMWBind != 0 {
		return nil, fmt.Errorf("verbs: no memory windows over device memory (mlx5's MEMIC access): %w", ErrInvalid)
	}
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.mem == nil || dm.dev != pd.dev {
		return nil, fmt.Errorf("verbs: device memory freed or of another device: %w", ErrInvalid)
	}
	if offset < 0 || length < 0 || offset > dm.length || length > dm.length-offset {
		return nil, fmt.Errorf("verbs: %d bytes at %d of %d of device memory: %w", length, offset, dm.length, ErrInvalid)
	}
	ops, err := pd.ops.RegDMMR(dm.mem, offset, length, access)
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, buf: dm.mem.Bytes()[offset : offset+length], length: uint64(length), access: access,
		lkey: ops.LKey(), rkey: ops.RKey(), ops: ops}
	if f, ok := dm.mem.(fastDM); ok {
		if err := f.RegisterFast(mr.ops, offset); err != nil {
			return nil, errors.Join(err, mr.ops.Dereg())
		}
	}
	mr.dm, mr.dmOff = dm, offset
	dm.mrs++
	return mr, nil
}

// fastDM is device memory the XDP fast path writes (docs/fastpath.md):
// its regions are registered with the program as well, and leave it before
// they are deregistered.
type fastDM interface {
	RegisterFast(mr ibv.MROps, offset int) error
	UnregisterFast(mr ibv.MROps) error
}

// unfastDM takes m, a region over device memory, from the fast path
// before it is deregistered.
func (m *MR) unfastDM() error {
	if m.dm == nil {
		return nil
	}
	if f, ok := m.dm.mem.(fastDM); ok {
		return f.UnregisterFast(m.ops)
	}
	return nil
}

// derefDM notes that m, a region over device memory, is deregistered.
func (m *MR) derefDM() {
	if m.dm != nil {
		m.dm.mu.Lock()
		m.dm.mrs--
		m.dm.mu.Unlock()
		m.dm = nil
	}
}

// DupFD is a new fd (close-on-exec, the caller's to close) of the BPF map
// holding the memory, for a daemon to pass to the client that allocated
// it: mapping it gives the same pages, and nothing else (the fd names this
// map alone; reading or writing it through bpf(2) is its own memory too).
// EOPNOTSUPP where the memory is no such map (a daemon client's mapping).
func (dm *DM) DupFD() (int, error) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.mem == nil {
		return -1, fmt.Errorf("verbs: device memory freed: %w", ErrInvalid)
	}
	m, ok := dm.mem.(interface{ Map() *ebpf.Map })
	if !ok {
		return -1, fmt.Errorf("verbs: device memory without a map of its own: %w", syscall.EOPNOTSUPP)
	}
	fd, err := unix.FcntlInt(uintptr(m.Map().FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("verbs: dup device memory's map: %w", err)
	}
	return fd, nil
}
