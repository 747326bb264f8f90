package attached

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// DM is device memory the daemon allocated (a BPF array map) and this
// process mapped through the fd the daemon passed: the engines, the XDP
// program and the application share its pages.
type DM struct {
	dev *Device
	h   uint32
	mem []byte // whole pages, as mapped
}

// MaxDMSize is what the daemon's HELLO told.
func (r *Device) MaxDMSize() int { return int(r.ext.MaxDMSize) }

// AllocDM asks the daemon for length bytes of device memory and maps them.
func (r *Device) AllocDM(length int) (ibv.DMOps, error) {
	d, fds, err := r.call(uverbs.OpAllocDM, func(e *uverbs.Encoder) { e.Put(&uverbs.AllocDM{Length: uint64(length)}) })
	if err != nil {
		return nil, err
	}
	var rep uverbs.DMCreated
	d.Get(&rep)
	err = d.End()
	if err == nil && len(fds) != 1 {
		err = fmt.Errorf("verbs: daemon: ALLOC_DM reply with %d fds: %w", len(fds), syscall.EPROTO)
	}
	page := uint64(os.Getpagesize())
	if err == nil && (rep.MapLength < uint64(length) || rep.MapLength%page != 0 || rep.MapLength-uint64(length) >= page) {
		err = fmt.Errorf("verbs: daemon: %d bytes of device memory to map for %d: %w", rep.MapLength, length, syscall.EPROTO)
	}
	if err == nil {
		err = checkDMFD(fds[0], rep.MapLength)
	}
	var mem []byte
	if err == nil {
		mem, err = unix.Mmap(fds[0], 0, int(rep.MapLength), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			err = fmt.Errorf("verbs: map device memory: %w", err)
		}
	}
	ipc.CloseAll(fds) // the mapping holds the map
	if err != nil {
		if rep.DM != 0 {
			_, _ = r.callNoFDs(uverbs.OpFreeDM, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: rep.DM}) })
		}
		return nil, err
	}
	return &DM{dev: r, h: rep.DM, mem: mem}, nil
}

// Bytes is the memory as mapped here.
func (dm *DM) Bytes() []byte { return dm.mem }

// Close frees the memory in the daemon and unmaps it here (whatever the
// daemon answered: what it still holds, it frees with the session).
func (dm *DM) Close() error {
	_, err := dm.dev.callNoFDs(uverbs.OpFreeDM, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: dm.h}) })
	return errors.Join(err, unix.Munmap(dm.mem))
}

// RegDMMR registers part of device memory: the daemon's region over its
// own mapping of the same map. The request's access is ibv_reg_dm_mr's,
// zero-based (the one kind of region over device memory).
func (pd *PD) RegDMMR(dmOps ibv.DMOps, offset, length int, access ibv.Access) (ibv.MROps, error) {
	dm, ok := dmOps.(*DM)
	if !ok || dm.dev != pd.dev {
		return nil, fmt.Errorf("verbs: device memory of another device: %w", ibv.ErrInvalid)
	}
	r := pd.dev
	d, err := r.callNoFDs(uverbs.OpRegDMMR, func(e *uverbs.Encoder) {
		e.Put(&uverbs.Ref{Handle: pd.h})
		e.Put(&uverbs.Ref{Handle: dm.h})
		e.Put(&uverbs.RegDMMR{Offset: uint64(offset), Length: uint64(length), Access: uint32(access | ibv.AccessZeroBased)})
	})
	if err != nil {
		return nil, err
	}
	var rep uverbs.MRCreated
	d.Get(&rep)
	if err := d.End(); err != nil {
		return nil, err
	}
	mr := &MR{dev: r, h: rep.MR, buf: dm.mem[offset : offset+length], lkey: rep.LKey, rkey: rep.RKey}
	r.addMR(mr)
	return mr, nil
}

// checkDMFD checks that fd is what ALLOC_DM passes before it is mapped: an
// mmapable BPF array map of 4 KiB elements holding at least n bytes (its
// /proc/self/fdinfo, which needs no privilege). Mapping anything else, a
// memfd shorter than n, could fault (SIGBUS) at an access inside the block.
func checkDMFD(fd int, n uint64) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return fmt.Errorf("verbs: daemon: device memory's fd: %w", err)
	}
	f := map[string]uint64{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		if x, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64); err == nil {
			f[k] = x
		}
	}
	const array, mmapable, page = 2, 1 << 10, 4096
	if f["map_type"] != array || f["value_size"] != page || f["map_flags"]&mmapable == 0 || f["max_entries"]*page < n {
		return fmt.Errorf("verbs: daemon: device memory's fd is not an mmapable array map of %d bytes: %w", n, syscall.EPROTO)
	}
	return nil
}
