package ipc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
)

// listenAs listens on @xdproce/NAME as user uid (SO_PEERCRED is the
// listener's credentials at listen(2)): the thread that listens drops to
// uid and dies with its locked goroutine, so the test's other threads stay
// root. Nothing accepts; a connection waits in the backlog.
func listenAs(t *testing.T, name string, uid int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: SocketName(name)}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- fmt.Errorf("setresuid: %w", e)
			return
		}
		errc <- unix.Listen(fd, 4)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// Dial refuses a socket another user listens on (any local user can bind
// an abstract name while the daemon is down) with EACCES, unless the
// operator named that user in XDPROCE_DAEMON_UID.
func TestDialRefusesUntrustedServer(t *testing.T) {
	netns.RequireRoot(t)
	name := testName(t)
	listenAs(t, name, 65534)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, name)
	if !errors.Is(err, unix.EACCES) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial of uid 65534's socket: %v, want EACCES", err)
	}
	t.Setenv(DaemonUIDEnv, "65534")
	c, err = Dial(ctx, name)
	if err != nil {
		t.Fatalf("Dial of uid 65534's socket with %s=65534: %v", DaemonUIDEnv, err)
	}
	c.Close()
}

func TestTrusted(t *testing.T) {
	t.Setenv(DaemonUIDEnv, "")
	for _, tc := range []struct {
		uid uint32
		env string
		ok  bool
	}{
		{0, "", true},
		{uint32(os.Geteuid()), "", true},
		{54321, "", false},
		{54321, "54321", true},
		{54321, "54322", false},
		{54321, "54321x", false},
		{54321, " 54321", false},
		{4294967295, "4294967295", false}, // (uid_t)-1 is no user
	} {
		if tc.uid == uint32(os.Geteuid()) && tc.uid != 0 {
			continue
		}
		t.Setenv(DaemonUIDEnv, tc.env)
		err := Trusted(tc.uid)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, unix.EACCES)) {
			t.Errorf("Trusted(%d) with %s=%q: %v, want trusted %v", tc.uid, DaemonUIDEnv, tc.env, err, tc.ok)
		}
	}
}
