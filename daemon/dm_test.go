package daemon

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// needDM skips where the kernel gives no device memory (mmapable array
// maps): then the daemon has none to give either.
func needDM(t *testing.T) {
	t.Helper()
	m, err := loader.NewDeviceMemory(loader.DMPage)
	if errors.Is(err, loader.ErrNoDeviceMemory) {
		t.Skipf("no device memory here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// allocDM allocates device memory on d.
func allocDM(t *testing.T, d *verbs.Device, n int) *verbs.DM {
	t.Helper()
	dm, err := d.AllocDM(n)
	if err != nil {
		t.Fatal(err)
	}
	return dm
}

// TestDMThroughDaemon: device memory a daemon's client allocates is the
// daemon's map mapped into the client. A peer's WRITE into a region over it
// (the daemon's engines, through the daemon's mapping) shows in the
// client's ibv_memcpy_from_dm, byte for byte and nothing outside; a READ
// returns what ibv_memcpy_to_dm put there; the client WRITEs from it; an
// access past the region is refused; misuse fails with the kernel's and
// mlx5's errnos.
func TestDMThroughDaemon(t *testing.T) {
	needDM(t)
	tb := newTestbed(t)
	c := tb.dial(t)
	if got := c.QueryDevice().MaxDMSize; got != verbs.MaxDMSize {
		t.Fatalf("max_dm_size through the daemon %d, want %d", got, verbs.MaxDMSize)
	}
	x, y := newEnd(t, c, 1<<14), newEnd(t, tb.b, 1<<14)
	connect(t, x, y, ipA, ipB, macA, macB)
	dm := allocDM(t, c, 3*4096)
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	mr, err := x.pd.RegDMMR(dm, 4096, 8192, rw|verbs.AccessZeroBased)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr() != 0 || mr.Len() != 8192 {
		t.Fatalf("region at %#x of %d bytes, want zero-based 8192", mr.Addr(), mr.Len())
	}
	peer := func(id uint64, op verbs.WROpcode, local, n int, remote uint64) verbs.WorkCompletion {
		t.Helper()
		if _, err := y.qp.PostSend([]verbs.SendWR{{ID: id, Opcode: op, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: y.mr.Addr() + uint64(local), Length: uint32(n), LKey: y.mr.LKey()}}, RemoteAddr: remote, RKey: mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, y.cq)
	}
	const n = 6000
	fill(y.mr.Bytes()[:n], 3)
	settle(t, tb.b)
	if wc := peer(1, verbs.WRRDMAWrite, 0, n, 100); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE into device memory through the daemon: %+v", wc)
	}
	settle(t, tb.a)
	got := make([]byte, 3*4096)
	if err := dm.CopyFrom(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[4096+100:4096+100+n], y.mr.Bytes()[:n]) {
		t.Fatal("device memory after the WRITE differs")
	}
	if !bytes.Equal(got[:4096+100], make([]byte, 4096+100)) || !bytes.Equal(got[4096+100+n:], make([]byte, 3*4096-4096-100-n)) {
		t.Fatal("the WRITE touched device memory outside its range")
	}

	src := make([]byte, 4096)
	fill(src, 9)
	if err := dm.CopyTo(8192, src); err != nil {
		t.Fatal(err)
	}
	settle(t, tb.a)
	if wc := peer(2, verbs.WRRDMARead, 8192, 4096, 4096); wc.Status != verbs.WCSuccess {
		t.Fatalf("READ from device memory through the daemon: %+v", wc)
	}
	if !bytes.Equal(y.mr.Bytes()[8192:8192+4096], src) {
		t.Fatal("READ from device memory differs")
	}
	if wc := peer(3, verbs.WRRDMAWrite, 0, 64, 8192-32); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE past the region's end: %+v, want REM_ACCESS_ERR", wc)
	}
	// The peer's QP is in error now; the client's own WRITE from device
	// memory needs a fresh pair.
	x2, y2 := newEnd(t, c, 4096), newEnd(t, tb.b, 1<<14)
	connect(t, x2, y2, ipA, ipB, macA, macB)
	mr2, err := x2.pd.RegDMMR(dm, 8192, 4096, verbs.AccessLocalWrite|verbs.AccessZeroBased)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x2.qp.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: 0, Length: 4096, LKey: mr2.LKey()}}, RemoteAddr: y2.mr.Addr() + 1000, RKey: y2.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, x2.cq); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE from device memory through the daemon: %+v", wc)
	}
	settle(t, tb.b)
	if !bytes.Equal(y2.mr.Bytes()[1000:1000+4096], src) {
		t.Fatal("WRITE from device memory differs")
	}

	// Misuse.
	if _, err := c.AllocDM(verbs.MaxDMSize + 1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("AllocDM past max_dm_size: %v, want EINVAL", err)
	}
	if _, err := x.pd.RegDMMR(dm, 0, 4096, rw); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a region over device memory without ZERO_BASED: %v, want EINVAL", err)
	}
	if _, err := x.pd.RegDMMR(dm, 8192, 8192, rw|verbs.AccessZeroBased); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a region past the device memory's end: %v, want EINVAL", err)
	}
	if empty, err := x.pd.RegDMMR(dm, 3*4096, 0, verbs.AccessLocalWrite|verbs.AccessZeroBased); err != nil {
		t.Errorf("a zero-length region at the device memory's end: %v", err)
	} else if err := empty.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := dm.Free(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("freeing device memory regions lie in: %v, want EBUSY", err)
	}
	for _, m := range []*verbs.MR{mr, mr2} {
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
	if err := dm.Free(); err != nil {
		t.Fatal(err)
	}
	if err := dm.Free(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("freeing device memory twice: %v, want EINVAL", err)
	}
}

// dmSession is a session driven directly, as a hostile client would, and
// its request function.
func dmSession(t *testing.T, tb *testbed, pid int) (*session, func(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int, int32)) {
	t.Helper()
	return peerSession(t, tb, ipc.Peer{PID: pid})
}

// peerSession is a session of the client p, handled in the test's goroutine.
func peerSession(t *testing.T, tb *testbed, p ipc.Peer) (*session, func(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int, int32)) {
	t.Helper()
	ss := newSession(tb.srv, nil, p)
	t.Cleanup(ss.release)
	call := func(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int, int32) {
		t.Helper()
		reply, out, err := ss.handle(msg(op, body), nil)
		if err != nil {
			t.Fatal(err)
		}
		h, d, err := uverbs.Decode(reply)
		if err != nil {
			t.Fatal(err)
		}
		return d, out, h.Errno
	}
	call(uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
	return ss, call
}

// TestDMIsTheSessionsOwn: the fd ALLOC_DM passes is the block's map and
// nothing more (its size is the block's; mapping past it fails); another
// session can neither register nor free the block by its handle; a block
// allocated after one freed holds none of its bytes; and the session's
// blocks are freed with it.
func TestDMIsTheSessionsOwn(t *testing.T) {
	needDM(t)
	tb := newTestbed(t)
	ss1, call1 := dmSession(t, tb, 1)
	_, call2 := dmSession(t, tb, 1)
	alloc := func(call func(uverbs.Op, func(*uverbs.Encoder)) (*uverbs.Decoder, []int, int32), n uint64) (uverbs.DMCreated, int) {
		t.Helper()
		d, fds, errno := call(uverbs.OpAllocDM, func(e *uverbs.Encoder) { e.Put(&uverbs.AllocDM{Length: n}) })
		var rep uverbs.DMCreated
		d.Get(&rep)
		if errno != 0 || d.End() != nil || len(fds) != 1 {
			t.Fatalf("ALLOC_DM: errno %d, %d fds", errno, len(fds))
		}
		t.Cleanup(func() { unix.Close(fds[0]) })
		return rep, fds[0]
	}
	rep, fd := alloc(call1, 5000)
	if rep.MapLength != 2*loader.DMPage {
		t.Fatalf("ALLOC_DM of 5000 bytes: %d to map, want %d", rep.MapLength, 2*loader.DMPage)
	}
	m, err := ebpf.NewMapFromFD(fd)
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != ebpf.Array || uint64(info.MaxEntries)*uint64(info.ValueSize) != rep.MapLength {
		t.Fatalf("the fd passed is a %v map of %d×%d bytes, want an array of %d", info.Type, info.MaxEntries, info.ValueSize, rep.MapLength)
	}
	if b, err := unix.Mmap(fd, 0, int(rep.MapLength)+loader.DMPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		unix.Munmap(b)
		t.Fatal("mapping past the block succeeded")
	}
	mem, err := unix.Mmap(fd, 0, int(rep.MapLength), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	fill(mem, 1)

	d, _, _ := call2(uverbs.OpAllocPD, nil)
	pd2 := d.Ref()
	if _, _, errno := call2(uverbs.OpRegDMMR, func(e *uverbs.Encoder) {
		e.Put(&uverbs.Ref{Handle: pd2})
		e.Put(&uverbs.Ref{Handle: rep.DM})
		e.Put(&uverbs.RegDMMR{Length: 4096, Access: uint32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessZeroBased)})
	}); errno != int32(syscall.EINVAL) {
		t.Errorf("REG_DM_MR of another session's block: errno %d, want EINVAL", errno)
	}
	if _, _, errno := call2(uverbs.OpFreeDM, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: rep.DM}) }); errno != int32(syscall.EINVAL) {
		t.Errorf("FREE_DM of another session's block: errno %d, want EINVAL", errno)
	}
	if len(ss1.dms) != 1 {
		t.Fatalf("the first session holds %d blocks, want 1", len(ss1.dms))
	}

	// Session 1's region over its block, then its departure frees both.
	d, _, _ = call1(uverbs.OpAllocPD, nil)
	pd1 := d.Ref()
	if _, _, errno := call1(uverbs.OpRegDMMR, func(e *uverbs.Encoder) {
		e.Put(&uverbs.Ref{Handle: pd1})
		e.Put(&uverbs.Ref{Handle: rep.DM})
		e.Put(&uverbs.RegDMMR{Offset: 4096, Length: 904, Access: uint32(verbs.AccessLocalWrite | verbs.AccessZeroBased)})
	}); errno != 0 {
		t.Fatalf("REG_DM_MR: errno %d", errno)
	}
	var held *verbs.DM
	for _, dm := range ss1.dms {
		held = dm
	}
	ss1.release()
	if len(ss1.dms) != 0 || len(ss1.mrs) != 0 {
		t.Fatalf("after release: %d blocks, %d regions", len(ss1.dms), len(ss1.mrs))
	}
	if err := held.CopyTo(0, make([]byte, 4)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("the departed session's block: %v, want freed", err)
	}
	if ss1.acct.held[objDM] != 0 || ss1.acct.dmBytes != 0 {
		t.Fatalf("the departed session still counts %d blocks of %d bytes", ss1.acct.held[objDM], ss1.acct.dmBytes)
	}

	// A fresh block is zeroed: nothing of the first.
	rep2, fd2 := alloc(call2, 5000)
	mem2, err := unix.Mmap(fd2, 0, int(rep2.MapLength), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem2)
	if !bytes.Equal(mem2, make([]byte, len(mem2))) {
		t.Fatal("a new block holds bytes of a freed one")
	}
}

// TestDMLimits: a client's blocks of device memory are bounded in number
// and bytes (ENOMEM past either), and a freed block makes room again.
func TestDMLimits(t *testing.T) {
	needDM(t)
	tb := newTestbedWith(t, -1, Limits{DMs: 2, DMBytes: 3 * loader.DMPage})
	c := tb.dial(t)
	a := allocDM(t, c, 2*loader.DMPage)
	if _, err := c.AllocDM(2 * loader.DMPage); !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("past the client's bytes of device memory: %v, want ENOMEM", err)
	}
	b := allocDM(t, c, loader.DMPage)
	if _, err := c.AllocDM(4); !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("past the client's blocks of device memory: %v, want ENOMEM", err)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	a = allocDM(t, c, 2*loader.DMPage)
	for _, dm := range []*verbs.DM{a, b} {
		if err := dm.Free(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDMChargedWhileMapped: a block the client freed (FREE_DM, or by
// ending its session) but still maps keeps costing its share, so what it
// keeps alive stays within DMBytes: ALLOC_DM past the share is ENOMEM (as
// mlx5) until the client unmaps it, then the share is free again. A block
// of a byte costs a page, what the kernel allocates.
func TestDMChargedWhileMapped(t *testing.T) {
	needDM(t)
	tb := newTestbedWith(t, -1, Limits{DMs: 8, DMBytes: 2 * loader.DMPage})
	type caller = func(uverbs.Op, func(*uverbs.Encoder)) (*uverbs.Decoder, []int, int32)
	alloc := func(call caller, n uint64) (uint32, int, syscall.Errno) {
		t.Helper()
		d, fds, errno := call(uverbs.OpAllocDM, func(e *uverbs.Encoder) { e.Put(&uverbs.AllocDM{Length: n}) })
		if errno != 0 {
			return 0, -1, syscall.Errno(errno)
		}
		var rep uverbs.DMCreated
		d.Get(&rep)
		if d.End() != nil || len(fds) != 1 {
			t.Fatalf("ALLOC_DM: %d fds", len(fds))
		}
		return rep.DM, fds[0], 0
	}
	free := func(call caller, h uint32) {
		t.Helper()
		if _, _, errno := call(uverbs.OpFreeDM, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: h}) }); errno != 0 {
			t.Fatalf("FREE_DM: errno %d", errno)
		}
	}
	// mapped maps the block as a client would and closes its fd: the
	// mapping alone keeps the pages.
	mapped := func(fd int) []byte {
		t.Helper()
		b, err := unix.Mmap(fd, 0, 2*loader.DMPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Munmap(b) })
		return b
	}

	ss, call := dmSession(t, tb, 7)
	h, fd, errno := alloc(call, 2*loader.DMPage)
	if errno != 0 {
		t.Fatalf("ALLOC_DM of the whole share: %v", errno)
	}
	m := mapped(fd)
	free(call, h)
	if _, _, errno := alloc(call, 1); errno != syscall.ENOMEM {
		t.Fatalf("ALLOC_DM while a freed block of the whole share is mapped: errno %d, want ENOMEM", errno)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	h, fd, errno = alloc(call, 1)
	if errno != 0 {
		t.Fatalf("ALLOC_DM once the freed block is unmapped: %v", errno)
	}
	unix.Close(fd)
	if _, _, errno := alloc(call, loader.DMPage+1); errno != syscall.ENOMEM {
		t.Errorf("ALLOC_DM of two pages beside a block of a byte: errno %d, want ENOMEM (a byte costs a page)", errno)
	}
	free(call, h)

	// The session ends with its block mapped: the next session of the
	// client (its process's pool) finds the share taken until it unmaps.
	_, fd, errno = alloc(call, 2*loader.DMPage)
	if errno != 0 {
		t.Fatalf("ALLOC_DM after the freed blocks are gone: %v", errno)
	}
	m = mapped(fd)
	ss.release()
	_, call2 := dmSession(t, tb, 7)
	if _, _, errno := alloc(call2, 1); errno != syscall.ENOMEM {
		t.Fatalf("ALLOC_DM while the ended session's block is mapped: errno %d, want ENOMEM", errno)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	_, fd, errno = alloc(call2, 2*loader.DMPage)
	if errno != 0 {
		t.Fatalf("ALLOC_DM of the whole share once the ended session's block is unmapped: %v", errno)
	}
	unix.Close(fd)
}

// TestDMChargedToUserAcrossSessions: a daemon that may not look map IDs up
// (without CAP_SYS_ADMIN) cannot see a freed block's map go, so an
// unprivileged client's freed block stays charged to its user after the
// session ends, while any process of the user is left: here a child of
// the client's that inherited the block's fd. Its next session finds the
// share taken; once the user's last process is gone, the whole share is
// back. Before, the charge ended with the session: a client that ended
// sessions while keeping mappings took any amount of device memory.
func TestDMChargedToUserAcrossSessions(t *testing.T) {
	needDM(t)
	tb := newTestbedWith(t, -1, Limits{DMs: 8, DMBytes: 2 * loader.DMPage})
	tb.srv.mapGone = func(ebpf.MapID) (bool, bool) { return false, false } // as without CAP_SYS_ADMIN
	const uid = 61987
	if n, err := userProcesses("/proc", uid); err != nil || n != 0 {
		t.Skipf("uid %d has %d processes here (%v)", uid, n, err)
	}
	peer := ipc.Peer{PID: os.Getpid(), UID: uid, GID: uid}
	type caller = func(uverbs.Op, func(*uverbs.Encoder)) (*uverbs.Decoder, []int, int32)
	alloc := func(call caller, n uint64) (int, syscall.Errno) {
		t.Helper()
		_, fds, errno := call(uverbs.OpAllocDM, func(e *uverbs.Encoder) { e.Put(&uverbs.AllocDM{Length: n}) })
		if errno != 0 {
			return -1, syscall.Errno(errno)
		}
		if len(fds) != 1 {
			t.Fatalf("ALLOC_DM: %d fds", len(fds))
		}
		return fds[0], 0
	}

	ss1, call1 := peerSession(t, tb, peer)
	fd, errno := alloc(call1, 2*loader.DMPage)
	if errno != 0 {
		t.Fatalf("ALLOC_DM of the whole share: %v", errno)
	}
	// The client's child, of its user, keeps the block's fd.
	f := os.NewFile(uintptr(fd), "dm")
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{f}
	child.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	ss1.release() // frees the block: its pages live on in the child

	_, call2 := peerSession(t, tb, peer)
	if _, errno := alloc(call2, 1); errno != syscall.ENOMEM {
		t.Fatalf("ALLOC_DM in a new session while the user's child holds the ended session's block: errno %d, want ENOMEM", errno)
	}
	time.Sleep(4 * dmUserPoll) // the watcher looks again and again: the child is still there
	if _, errno := alloc(call2, 1); errno != syscall.ENOMEM {
		t.Fatalf("ALLOC_DM while the child lives, after the watcher looked: errno %d, want ENOMEM", errno)
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(dmUserPoll / 2) {
		fd, errno := alloc(call2, 2*loader.DMPage)
		if errno == 0 {
			unix.Close(fd)
			break
		}
		if errno != syscall.ENOMEM || time.Now().After(deadline) {
			t.Fatalf("ALLOC_DM of the whole share once the user has no process: errno %d", errno)
		}
	}
}

// TestDMUserDropKeepsNewerCharges: a user watcher's walk of /proc that
// found none of the user's processes drops only the charges whose sessions
// had ended before it began; one left by a session that ended during the
// walk (its process perhaps started after the walk passed its number)
// stays, and the watcher goes on; a live session's charge is its own.
func TestDMUserDropKeepsNewerCharges(t *testing.T) {
	key := acctKey{user: true, id: 61987}
	live := &usage{}
	s := &Server{dmFreed: map[acctKey][]freedDM{key: {
		{bytes: 1 << 12, orphan: 1},
		{bytes: 2 << 12, orphan: 3},
		{bytes: 4 << 12, owner: live},
	}}}
	if !s.dropUserDM(key, 2) {
		t.Error("dropUserDM(before 2) with a charge left at 3: says none waits")
	}
	if n := s.freedDMBytes(key, false); n != 6<<12 {
		t.Fatalf("after dropping the charges left before 2: %d bytes charged, want %d", n, 6<<12)
	}
	if s.dropUserDM(key, 3) {
		t.Error("dropUserDM(before 3): says a charge still waits")
	}
	if n := s.freedDMBytes(key, false); n != 4<<12 {
		t.Fatalf("after dropping every waiting charge: %d bytes charged, want the live session's %d", n, 4<<12)
	}
}
