package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procMem is a client's own memory (ibv_reg_mr on malloc'd memory),
// reached through the /proc/PID/mem the daemon opened at attach
// (client.mem) straight between the client's memory and the frames, so no
// more copies per byte than the in-process path: preadv per transmit batch
// for what it sends (ReadVec) and pwritev per receive batch for the
// payloads it brought (WriteVec). That file pins the address space it was
// opened on: after the client's execve, or its exit, copies move nothing
// and fail, so no other image's memory, setuid or not, is ever reached
// through a region. The session's watch on the client's pidfd marks it gone
// as soon as it exits, and no copy is tried after that.
type procMem struct {
	fd       int // client.mem: open until every region using it is deregistered
	pid      int // for messages
	base     uint64
	gone     *atomic.Bool
	failures *atomic.Uint64 // copies that moved nothing (unmapped memory, another image)
	stage    *sync.Pool     // *[stageSize]byte, the client's
}

var errClientGone = errors.New("daemon: the client is gone")

func (m *procMem) ReadAt(p []byte, off uint64) error { return m.copy(p, off, false) }

func (m *procMem) WriteAt(p []byte, off uint64) error { return m.copy(p, off, true) }

func (m *procMem) copy(p []byte, off uint64, write bool) error {
	if len(p) == 0 {
		return nil
	}
	if m.gone.Load() {
		if !write {
			clear(p)
		}
		return errClientGone
	}
	local := [1]unix.Iovec{{Base: unsafe.SliceData(p), Len: uint64(len(p))}}
	n, err := m.rw(local[:], m.base+off, write)
	err = m.check(n, len(p), m.base+off, err)
	if err != nil && !write {
		clear(p)
	}
	return err
}

// check makes a short copy an error, and counts failures.
func (m *procMem) check(n, want int, addr uint64, err error) error {
	if err == nil && n != want {
		err = fmt.Errorf("%d of %d bytes copied: %w", n, want, unix.EFAULT)
	}
	if err != nil {
		m.failures.Add(1)
		return fmt.Errorf("daemon: client %d's memory at %#x: %w", m.pid, addr, err)
	}
	return nil
}

// stageSize bounds a staged copy (one per engine at a time).
const stageSize = 64 << 10

// newStagePool makes the staging buffers of a client's regions.
func newStagePool() *sync.Pool {
	return &sync.Pool{New: func() any { return new([stageSize]byte) }}
}

// WriteVec writes each p[i] at off[i]: the engines hand over a receive
// batch's payloads for one client at once.
func (m *procMem) WriteVec(p [][]byte, off []uint64) error { return m.copyVec(p, off, true) }

// ReadVec reads each p[i] from off[i]: the engines read what a transmit
// batch sends from one client at once.
func (m *procMem) ReadVec(p [][]byte, off []uint64) error { return m.copyVec(p, off, false) }

// copyVec moves pieces at consecutive offsets (mostly one message's
// payloads, back to back) in one system call through a staging buffer, up
// to stageSize at a time. /proc/PID/mem takes one offset per call and
// costs a page pin per iovec even for small ones: a preadv of 64 pieces of
// 256 bytes costs ten times what one pread of the 16 KiB and a copy do,
// which also beats process_vm_readv's 64 iovecs up to 64 KiB
// (BenchmarkProcMem). A group that fails does not stop the others; what
// it should have read is zeros, never what the frames held before
// (another client's bytes).
func (m *procMem) copyVec(p [][]byte, off []uint64, write bool) error {
	if m.gone.Load() {
		if !write {
			for _, b := range p {
				clear(b)
			}
		}
		return errClientGone
	}
	var first error
	for len(p) > 0 {
		k, n := 1, len(p[0])
		for k < len(p) && off[k] == off[k-1]+uint64(len(p[k-1])) && n+len(p[k]) <= stageSize {
			n += len(p[k])
			k++
		}
		var err error
		if k == 1 {
			err = m.copy(p[0], off[0], write)
		} else {
			err = m.staged(p[:k], off[0], n, write)
		}
		first = cmp.Or(first, err)
		p, off = p[k:], off[k:]
	}
	return first
}

// staged copies pieces at consecutive offsets from off, n bytes in all
// (at most stageSize), in one system call.
func (m *procMem) staged(p [][]byte, off uint64, n int, write bool) error {
	buf := m.stage.Get().(*[stageSize]byte)
	defer m.stage.Put(buf)
	s := buf[:n]
	if write {
		at := 0
		for _, b := range p {
			at += copy(s[at:], b)
		}
	}
	local := [1]unix.Iovec{{Base: unsafe.SliceData(s), Len: uint64(n)}}
	got, err := m.rw(local[:], m.base+off, write)
	err = m.check(got, n, m.base+off, err)
	if !write {
		if err != nil {
			clear(s)
		}
		at := 0
		for _, b := range p {
			at += copy(b, s[at:])
		}
	}
	return err
}

// rw is one preadv or pwritev at addr in the client's address space.
func (m *procMem) rw(iov []unix.Iovec, addr uint64, write bool) (int, error) {
	nr := uintptr(unix.SYS_PREADV)
	if write {
		nr = unix.SYS_PWRITEV
	}
	// The offset goes as two longs (the high one all shifted out on 64-bit
	// systems), as the kernel's pos_from_hilo takes it.
	lo, hi := uintptr(addr), uintptr(addr>>(bits.UintSize-1)>>1)
	for {
		n, _, e := unix.Syscall6(nr, uintptr(m.fd), uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)), lo, hi, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}
