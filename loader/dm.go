package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// DMPage is the granularity of device memory: one element of the array
// map that holds it, so that an XDP program reaches a page with one lookup.
const DMPage = 4096

// DeviceMemory is memory the device allocates and its XDP program can
// write (issue 34): a BPF array map created BPF_F_MMAPABLE, one DMPage per
// element, mapped into this process. The mapping stays valid until Close;
// the map (and so the memory) lives while any fd or program holds it.
type DeviceMemory struct {
	m *ebpf.Map
	b []byte
}

// ErrNoDeviceMemory wraps the reason device memory cannot be had (a kernel
// without mmapable array maps, before 5.5, or no CAP_BPF): EOPNOTSUPP, as
// ibv_alloc_dm on a device without it.
var ErrNoDeviceMemory = fmt.Errorf("loader: device memory (mmapable BPF array map): %w", unix.EOPNOTSUPP)

// NewDeviceMemory allocates size bytes of device memory, rounded up to
// whole pages, zeroed.
func NewDeviceMemory(size int) (*DeviceMemory, error) {
	if size <= 0 {
		return nil, fmt.Errorf("loader: device memory of %d bytes: %w", size, unix.EINVAL)
	}
	pages := (size + DMPage - 1) / DMPage
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "xdproce_dm", Type: ebpf.Array, KeySize: 4, ValueSize: DMPage,
		MaxEntries: uint32(pages), Flags: unix.BPF_F_MMAPABLE | unix.BPF_F_INNER_MAP, // inner: the fast path reaches it through dm_maps
	})
	if err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return nil, fmt.Errorf("loader: device memory of %d bytes: %w", size, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrNoDeviceMemory, err)
	}
	b, err := unix.Mmap(m.FD(), 0, pages*DMPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%w: mapping it: %v", ErrNoDeviceMemory, err)
	}
	return &DeviceMemory{m: m, b: b}, nil
}

// Bytes is the memory, whole pages.
func (d *DeviceMemory) Bytes() []byte { return d.b }

// Map is the array map holding the memory, for an XDP program to use.
func (d *DeviceMemory) Map() *ebpf.Map { return d.m }

// Close unmaps the memory and closes this process's fd of the map; again,
// it does nothing.
func (d *DeviceMemory) Close() error {
	if d.b == nil {
		return nil
	}
	err := unix.Munmap(d.b)
	d.b = nil
	return errors.Join(err, d.m.Close())
}
