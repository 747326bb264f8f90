package daemon

import (
	"errors"
	"fmt"
	"math/bits"
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
}

var errClientGone = errors.New("daemon: the client is gone")

func (m *procMem) ReadAt(p []byte, off uint64) error { return m.copy(p, off, false) }

func (m *procMem) WriteAt(p []byte, off uint64) error { return m.copy(p, off, true) }

func (m *procMem) copy(p []byte, off uint64, write bool) error {
	if len(p) == 0 {
		return nil
	}
	if m.gone.Load() {
		return errClientGone
	}
	local := [1]unix.Iovec{{Base: unsafe.SliceData(p), Len: uint64(len(p))}}
	n, err := m.rw(local[:], m.base+off, write)
	return m.check(n, len(p), m.base+off, err)
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

// iovBatch is the most iovecs one preadv/pwritev call is given here: a
// receive batch's worth (UIO_MAXIOV allows 1024), kept on the stack.
const iovBatch = 64

// WriteVec writes each p[i] at off[i]: the engines hand over a receive
// batch's payloads for one client at once.
func (m *procMem) WriteVec(p [][]byte, off []uint64) error { return m.copyVec(p, off, true) }

// ReadVec reads each p[i] from off[i]: the engines read what a transmit
// batch sends from one client at once.
func (m *procMem) ReadVec(p [][]byte, off []uint64) error { return m.copyVec(p, off, false) }

// copyVec moves the pieces in one system call per run of pieces at
// consecutive offsets (up to iovBatch): /proc/PID/mem has one offset per
// call, and a batch's pieces are mostly one message's, back to back.
func (m *procMem) copyVec(p [][]byte, off []uint64, write bool) error {
	if m.gone.Load() {
		return errClientGone
	}
	var local [iovBatch]unix.Iovec
	for len(p) > 0 {
		k, want := 0, 0
		next := off[0]
		for ; k < len(p) && k < iovBatch && off[k] == next; k++ {
			local[k] = unix.Iovec{Base: unsafe.SliceData(p[k]), Len: uint64(len(p[k]))}
			want += len(p[k])
			next += uint64(len(p[k]))
		}
		if want > 0 {
			n, err := m.rw(local[:k], m.base+off[0], write)
			if err := m.check(n, want, m.base+off[0], err); err != nil {
				return err
			}
		}
		p, off = p[k:], off[k:]
	}
	return nil
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
