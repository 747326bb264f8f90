package daemon

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// REG_MR of the client's own memory checks the range as ibv_reg_mr's
// pinning does under the kernel: EFAULT if a page is not mapped, or not
// writable while the access writes (writes through /proc/PID/mem would
// land in read-only pages otherwise); a read-only range registers for
// reading.
func TestRegOwnMRChecksMapping(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	// rw, ro, then a hole.
	if err := unix.Mprotect(mem[page:2*page], unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&mem[2*page])), uintptr(page), 0); e != 0 {
		t.Fatal(e)
	}
	rw, ro, gone := mem[:page], mem[page:2*page], mem[2*page:]
	for _, tc := range []struct {
		name   string
		buf    []byte
		access verbs.Access
		want   error
	}{
		{"writable, for writes", rw, verbs.AccessLocalWrite | verbs.AccessRemoteWrite, nil},
		{"read-only, for reads", ro, verbs.AccessRemoteRead, nil},
		{"read-only, for local writes", ro, verbs.AccessLocalWrite, syscall.EFAULT},
		{"read-only, for atomics", ro, verbs.AccessLocalWrite | verbs.AccessRemoteAtomic, syscall.EFAULT},
		{"writable then read-only, for writes", mem[page/2 : page+page/2], verbs.AccessLocalWrite | verbs.AccessRemoteWrite, syscall.EFAULT},
		{"writable then read-only, for reads", mem[page/2 : page+page/2], verbs.AccessRemoteRead, nil},
		{"unmapped", gone, verbs.AccessRemoteRead, syscall.EFAULT},
		{"running into a hole", mem[page+1 : 3*page], verbs.AccessRemoteRead, syscall.EFAULT},
	} {
		mr, err := pd.RegMR(tc.buf, tc.access)
		if tc.want == nil && err == nil {
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if tc.want == nil || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// REG_MR of shared memory maps the client's memfd in the daemon: one that
// could make the daemon's accesses fault (SIGBUS, the daemon dies) is
// refused with EINVAL — unsealed, shorter than the region, or hugetlbfs
// (whose pages the client can punch out from under the mapping).
func TestRegMRRefusesUnsafeMemfd(t *testing.T) {
	tb := newTestbed(t)
	ss := newSession(tb.srv, nil, ipc.Peer{PID: 1})
	defer ss.release()
	call := func(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, int32) {
		t.Helper()
		reply, out, err := ss.handle(msg(op, body), fds)
		ipc.CloseAll(out)
		if err != nil {
			t.Fatal(err)
		}
		h, d, err := uverbs.Decode(reply)
		if err != nil {
			t.Fatal(err)
		}
		return d, h.Errno
	}
	call(uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
	d, _ := call(uverbs.OpAllocPD, nil)
	pd := d.U32()
	const size = 1 << 16
	memfd := func(flags int, length int64, seals int) int {
		t.Helper()
		fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|flags)
		if err != nil {
			t.Skipf("memfd_create(%#x): %v", flags, err)
		}
		if err := unix.Ftruncate(fd, length); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	reg := func(fd int) int32 {
		t.Helper()
		_, errno := call(uverbs.OpRegMR, func(e *uverbs.Encoder) {
			e.U32(pd)
			e.U64(0x10000)
			e.U64(size)
			e.U32(uint32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite))
			e.U64(0x10000)
		}, fd)
		return errno
	}
	sealed := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if errno := reg(memfd(0, size, sealed)); errno != 0 {
		t.Fatalf("a sealed memfd of the region's size: errno %d", errno)
	}
	for _, tc := range []struct {
		name         string
		flags, seals int
		length       int64
	}{
		{"unsealed", 0, 0, size},
		{"sealed against growing only", 0, unix.F_SEAL_GROW, size},
		{"short", 0, sealed, size - 4096},
		{"hugetlbfs", unix.MFD_HUGETLB, sealed, 2 << 20},
	} {
		if errno := reg(memfd(tc.flags, tc.length, tc.seals)); errno != int32(syscall.EINVAL) {
			t.Errorf("%s memfd: errno %d, want EINVAL", tc.name, errno)
		}
	}
	if len(ss.mrs) != 1 {
		t.Fatalf("%d regions, want 1", len(ss.mrs))
	}
}
