package ipc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func testName(t *testing.T) string {
	var b [6]byte
	rand.Read(b[:])
	return "ipc-test-" + hex.EncodeToString(b[:])
}

// A message's fds arrive with it; the peer's credentials are the kernel's.
func TestConnPassesFDs(t *testing.T) {
	name := testName(t)
	ln, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli, err := Dial(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sc := <-accepted
	if sc == nil {
		t.Fatal("no connection accepted")
	}
	srv := NewConn(sc)
	defer srv.Close()
	p, err := PeerOf(sc)
	if err != nil || p.PID != os.Getpid() || int(p.UID) != os.Getuid() {
		t.Fatalf("peer %+v %v", p, err)
	}
	m, err := NewMapping("t", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	copy(m.Mem, "shared")
	if err := cli.Send([]byte("hi"), m.FD); err != nil {
		t.Fatal(err)
	}
	msg, fds, err := srv.Recv()
	if err != nil || string(msg) != "hi" || len(fds) != 1 {
		t.Fatalf("recv %q %v %v", msg, fds, err)
	}
	other, err := MapShared(fds[0], 100)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unmap()
	if string(other.Mem[:6]) != "shared" {
		t.Fatalf("mapping holds %q", other.Mem[:6])
	}
	other.Mem[0] = 'S'
	if m.Mem[0] != 'S' {
		t.Fatal("the two mappings are not the same memory")
	}
	cli.Close()
	if _, _, err := srv.Recv(); !IsClosed(err) {
		t.Fatalf("recv after the peer closed: %v", err)
	}
}

// The other side's memfd must be sealed against shrinking and big enough:
// else it could make this side's accesses fault.
func TestMapSharedRefusesUnsafeMemory(t *testing.T) {
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := MapShared(fd, 4096); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("unsealed memfd: %v", err)
	}
	m, err := NewMapping("small", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	dup, _ := unix.Dup(m.FD)
	if _, err := MapShared(dup, 8192); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("memfd smaller than asked: %v", err)
	}
	if err := unix.Ftruncate(m.FD, 0); err == nil {
		t.Fatal("a sealed memfd shrank")
	}
	ro, err := NewReadOnlyMapping("ro", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Unmap()
	if _, err := unix.Mmap(ro.FD, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		t.Fatal("a read-only mapping mapped writable by the other side")
	}
	dup, _ = unix.Dup(ro.FD)
	if r, err := MapSharedReadOnly(dup, 4096); err != nil {
		t.Fatalf("read-only mapping: %v", err)
	} else {
		r.Unmap()
	}
	f, _ := os.CreateTemp(t.TempDir(), "plain")
	pf, _ := unix.Dup(int(f.Fd()))
	f.Close()
	if _, err := MapShared(pf, 1); err == nil {
		t.Fatal("a plain file mapped as shared memory")
	}
}

// A notification pipe wakes its waiter; a signaller whose waiter never
// reads, or cleared O_NONBLOCK on its own end, never blocks; closing the
// signaller's end is a hang-up.
func TestNotifyPipe(t *testing.T) {
	s, r, err := NewSignalPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := WaiterOf(r)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a silent pipe: %v", err)
	}
	s.Signal()
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The waiter's own description is its business: blocking, and full.
	if err := unix.SetNonblock(r, false); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 4 * pipeBytes {
			s.Signal()
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Signal blocked on a full pipe")
	}
	if err := unix.SetNonblock(r, true); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Signal() // after Close: nothing, no panic
	for range 4 {
		if err = w.Wait(context.Background()); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrHangup) {
		t.Fatalf("wait after the signaller closed: %v", err)
	}
}

// A doorbell: the waiter's end is its own; a signaller that reads its end
// gets nothing.
func TestDoorbell(t *testing.T) {
	w, wfd, err := NewDoorbell()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := SignalerOf(wfd)
	s.Signal()
	var b [8]byte
	if n, _ := unix.Read(wfd, b[:]); n > 0 {
		t.Fatalf("read %d bytes from a write end", n)
	}
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := w.Wait(context.Background()); !errors.Is(err, ErrHangup) {
		t.Fatalf("wait after the signaller closed: %v", err)
	}
}

// WaitExit returns when the process exits, and not before; ctx ends it too.
func TestWaitExit(t *testing.T) {
	cmd := exec.Command("sleep", "0.3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- WaitExit(context.Background(), cmd.Process.Pid) }()
	select {
	case err := <-done:
		t.Fatalf("returned %v before the process exited", err)
	case <-time.After(100 * time.Millisecond):
	}
	_ = cmd.Wait()
	if err := <-done; err != nil || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("WaitExit: %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := WaitExit(ctx, os.Getpid()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for ourselves: %v", err)
	}
}

// With PassCred each message tells its sender, the process that sent it
// (not the one that connected); a message sent before tells none. The
// peer's pidfd names the process that connected.
func TestRecvFromTellsSender(t *testing.T) {
	name := testName(t)
	ln, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli, err := Dial(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	srv := NewConn(sc)
	defer srv.Close()
	pidfd, err := PeerPidfd(sc, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer pidfd.Close()
	if gone, err := Exited(pidfd); err != nil || gone {
		t.Fatalf("the peer's pidfd: exited %v, %v", gone, err)
	}
	if err := cli.Send([]byte("before")); err != nil {
		t.Fatal(err)
	}
	if err := srv.PassCred(); err != nil {
		t.Fatal(err)
	}
	if err := cli.Send([]byte("after")); err != nil {
		t.Fatal(err)
	}
	// A child that inherited the connection sends too.
	f, err := cli.c.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	child := exec.Command("sh", "-c", "printf child >&3")
	child.ExtraFiles = []*os.File{f}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	childPID := child.Process.Pid
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		msg string
		pid int
	}{{"before", 0}, {"after", os.Getpid()}, {"child", childPID}} {
		msg, fds, from, err := srv.RecvFrom()
		if err != nil || string(msg) != want.msg || len(fds) != 0 || from.PID != want.pid {
			t.Fatalf("%q from %+v (%v), want %q from pid %d", msg, from, err, want.msg, want.pid)
		}
	}
}
