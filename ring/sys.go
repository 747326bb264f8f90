package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// x/sys has no typed helpers for the SOL_XDP options, so these are the raw
// system calls. They are made once per socket setup or per statistics read,
// never per packet.

func setsockopt(fd, name int, val unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(name), uintptr(val), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func setsockoptUint32(fd, name int, v uint32) error {
	return setsockopt(fd, name, unsafe.Pointer(&v), unsafe.Sizeof(v))
}

// getsockopt returns the length the kernel wrote.
func getsockopt(fd, name int, val unsafe.Pointer, size uintptr) (int, error) {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(name), uintptr(val), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return int(l), nil
}

// kick sends an empty, non-blocking message: in copy mode the kernel
// transmits from the TX ring inside this call; in zero-copy mode it wakes
// the driver.
func sendKick(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// recvKick wakes the driver to read the fill ring.
func recvKick(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// retryLater reports errors of a kick that mean "the kernel could not take
// everything now": the frames stay queued and a later kick sends them.
func retryLater(e unix.Errno) bool {
	switch e {
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
		return true
	}
	return false
}
