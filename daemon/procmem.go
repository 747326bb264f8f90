package daemon

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procMem is a client's own memory (ibv_reg_mr on malloc'd memory),
// reached with process_vm_readv and process_vm_writev straight between the
// client's memory and the frames, so no more copies per byte than the
// in-process path: one read per transmit batch for what it sends (ReadVec)
// and one write per receive batch for the payloads it brought (WriteVec). The session's watch on the
// client's pidfd marks it gone as soon as the client exits, before its pid
// can be reused, and no copy is tried after that.
type procMem struct {
	pid      int
	base     uint64 // the region's address in the client
	gone     *atomic.Bool
	failures *atomic.Uint64 // copies that moved nothing (unmapped memory)
}

var errClientGone = errors.New("daemon: the client is gone")

func (m *procMem) ReadAt(p []byte, off uint64) error {
	return m.copy(p, off, false)
}

func (m *procMem) WriteAt(p []byte, off uint64) error {
	return m.copy(p, off, true)
}

func (m *procMem) copy(p []byte, off uint64, write bool) error {
	if len(p) == 0 {
		return nil
	}
	if m.gone.Load() {
		return errClientGone
	}
	local := []unix.Iovec{{Base: unsafe.SliceData(p), Len: uint64(len(p))}}
	remote := []unix.RemoteIovec{{Base: uintptr(m.base + off), Len: len(p)}}
	var n int
	var err error
	if write {
		n, err = unix.ProcessVMWritev(m.pid, local, remote, 0)
	} else {
		n, err = unix.ProcessVMReadv(m.pid, local, remote, 0)
	}
	if err == nil && n != len(p) {
		err = fmt.Errorf("daemon: %d of %d bytes copied", n, len(p))
	}
	if err != nil {
		m.failures.Add(1)
		return fmt.Errorf("daemon: client %d's memory at %#x: %w", m.pid, m.base+off, err)
	}
	return nil
}

// iovBatch is the most iovecs one process_vm_writev call is given here:
// a receive batch's worth (UIO_MAXIOV allows 1024), kept on the stack.
const iovBatch = 64

// WriteVec writes each p[i] at off[i], iovBatch pieces per system call:
// the engines hand over a receive batch's payloads for one client at once.
func (m *procMem) WriteVec(p [][]byte, off []uint64) error { return m.copyVec(p, off, true) }

// ReadVec reads each p[i] from off[i], iovBatch pieces per system call: the
// engines read what a transmit batch sends from one client at once.
func (m *procMem) ReadVec(p [][]byte, off []uint64) error { return m.copyVec(p, off, false) }

func (m *procMem) copyVec(p [][]byte, off []uint64, write bool) error {
	if m.gone.Load() {
		return errClientGone
	}
	var local [iovBatch]unix.Iovec
	var remote [iovBatch]unix.RemoteIovec
	for len(p) > 0 {
		k, want := 0, 0
		for ; k < len(p) && k < iovBatch; k++ {
			local[k] = unix.Iovec{Base: unsafe.SliceData(p[k]), Len: uint64(len(p[k]))}
			remote[k] = unix.RemoteIovec{Base: uintptr(m.base + off[k]), Len: len(p[k])}
			want += len(p[k])
		}
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(m.pid, local[:k], remote[:k], 0)
		} else {
			n, err = unix.ProcessVMReadv(m.pid, local[:k], remote[:k], 0)
		}
		if err == nil && n != want {
			err = fmt.Errorf("daemon: %d of %d bytes copied", n, want)
		}
		if err != nil {
			m.failures.Add(1)
			return fmt.Errorf("daemon: client %d's memory: %w", m.pid, err)
		}
		p, off = p[k:], off[k:]
	}
	return nil
}
