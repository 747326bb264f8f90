package ring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Desc is one AF_XDP descriptor (struct xdp_desc): Addr is a UMEM offset.
type Desc struct {
	Addr    uint64
	Len     uint32
	Options uint32 // XDP_PKT_CONTD: more descriptors of this packet follow
}

// ringIndex is the producer/consumer pair of one ring shared with the
// kernel. The side this process writes is cached locally and published with
// an atomic store (release); the other side is read with an atomic load
// (acquire) only when the cached copy says the ring is full or empty, as
// libxdp does. Go's sync/atomic operations are sequentially consistent,
// which includes the acquire/release order the kernel's
// smp_load_acquire/smp_store_release pairs with.
type ringIndex struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	size     uint32
	mask     uint32
	prod     uint32 // our producer (producer rings) or snapshot (consumer rings)
	cons     uint32 // our consumer (consumer rings) or snapshot (producer rings)
}

// ringOffsets mirrors struct xdp_ring_offset.
type ringOffsets = unix.XDPRingOffset

// bind points r at ring memory mem laid out as off says, with size entries
// of entrySize bytes each, after checking that every field lies inside mem.
func (r *ringIndex) bind(mem []byte, off ringOffsets, size uint32, entrySize uintptr) error {
	end := off.Desc + uint64(size)*uint64(entrySize)
	for _, o := range []uint64{off.Producer, off.Consumer, off.Flags} {
		if o+4 > uint64(len(mem)) || o%4 != 0 {
			return fmt.Errorf("ring: index offset %d outside %d-byte ring mapping", o, len(mem))
		}
	}
	if end > uint64(len(mem)) || off.Desc%8 != 0 {
		return fmt.Errorf("ring: %d entries at offset %d overrun %d-byte ring mapping", size, off.Desc, len(mem))
	}
	*r = ringIndex{
		producer: (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		size:     size,
		mask:     size - 1,
	}
	r.prod = atomic.LoadUint32(r.producer)
	r.cons = atomic.LoadUint32(r.consumer)
	return nil
}

// free returns how many entries a producer may write, refreshing the
// kernel's consumer index only when the cached value shows fewer than want.
func (r *ringIndex) free(want uint32) uint32 {
	if n := r.size - (r.prod - r.cons); n >= want && n <= r.size {
		return n
	}
	r.cons = atomic.LoadUint32(r.consumer)
	used := r.prod - r.cons
	if used > r.size { // a consumer index ahead of ours: trust nothing
		return 0
	}
	return r.size - used
}

// publish makes n written entries visible to the kernel.
func (r *ringIndex) publish(n uint32) {
	r.prod += n
	atomic.StoreUint32(r.producer, r.prod)
}

// pending reports the entries written but not yet consumed by the kernel.
func (r *ringIndex) pending() uint32 {
	used := r.prod - atomic.LoadUint32(r.consumer)
	if used > r.size {
		return 0
	}
	return used
}

// waiting reports, from the shared indices alone, the entries the producer
// has written that the consumer has not released: any goroutine may ask,
// while the ring's owner reads it.
func (r *ringIndex) waiting() uint32 {
	if r.producer == nil {
		return 0
	}
	n := atomic.LoadUint32(r.producer) - atomic.LoadUint32(r.consumer)
	return min(n, r.size)
}

// available returns how many entries a consumer may read (at most size,
// whatever the producer index claims), refreshing the kernel's producer
// index when the cached value shows fewer than want.
func (r *ringIndex) available(want uint32) uint32 {
	n := r.prod - r.cons
	if n < want || n > r.size {
		r.prod = atomic.LoadUint32(r.producer)
		n = r.prod - r.cons
	}
	if n > r.size {
		n = r.size
	}
	return n
}

// release hands n read entries back to the kernel.
func (r *ringIndex) release(n uint32) {
	if n == 0 {
		return
	}
	r.cons += n
	atomic.StoreUint32(r.consumer, r.cons)
}

// needWakeup reports XDP_RING_NEED_WAKEUP on this ring.
func (r *ringIndex) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// addrRing is a fill or completion ring: entries are UMEM addresses.
type addrRing struct {
	ringIndex
	entries []uint64
}

func (r *addrRing) bind(mem []byte, off ringOffsets, size uint32) error {
	if err := r.ringIndex.bind(mem, off, size, 8); err != nil {
		return err
	}
	r.entries = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), size)
	return nil
}

// descRing is an RX or TX ring: entries are descriptors.
type descRing struct {
	ringIndex
	entries []Desc
}

func (r *descRing) bind(mem []byte, off ringOffsets, size uint32) error {
	if err := r.ringIndex.bind(mem, off, size, unsafe.Sizeof(Desc{})); err != nil {
		return err
	}
	r.entries = unsafe.Slice((*Desc)(unsafe.Pointer(&mem[off.Desc])), size)
	return nil
}
