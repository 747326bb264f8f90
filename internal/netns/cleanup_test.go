package netns_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/xdproce/xdproce/internal/netns"
)

// The helper "tests" below do nothing unless the parent test starts this
// binary again with helperEnv set; they are how the cleanup path is tested
// with the real testing package (failures, panics, sub-tests).
const (
	helperEnv     = "XDPROCE_NETNS_HELPER"
	helperPrefix  = "XDPROCE_NETNS_HELPER_PREFIX"
	createdMarker = "TOPOLOGY-CREATED"
)

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	cfg := netns.Config{Prefix: os.Getenv(helperPrefix)}
	netns.New(t, cfg)
	t.Run("sub", func(t *testing.T) {
		netns.New(t, netns.Config{Prefix: cfg.Prefix, Kind: netns.Router})
		fmt.Println(createdMarker)
		switch mode {
		case "fail":
			t.Error("deliberate failure")
		case "fatal":
			t.Fatal("deliberate fatal")
		case "panic":
			panic("deliberate panic")
		}
	})
}

func TestHelperRequireRoot(t *testing.T) {
	if os.Getenv(helperEnv) != "requireroot" {
		return
	}
	netns.RequireRoot(t)
	fmt.Println("NOT-SKIPPED")
}

func namespacesWithPrefix(t *testing.T, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestCleanupOnFailure runs a test that builds two topologies (one in a
// sub-test) and then fails, calls t.Fatal or panics; every namespace must
// be gone when the process ends.
func TestCleanupOnFailure(t *testing.T) {
	netns.RequireRoot(t)
	for _, mode := range []string{"fail", "fatal", "panic"} {
		t.Run(mode, func(t *testing.T) {
			prefix := fmt.Sprintf("xdptclean%s", mode)
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperPrefix+"="+prefix)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("helper test passed; it should have failed:\n%s", out)
			}
			if !strings.Contains(string(out), createdMarker) {
				t.Fatalf("helper did not get as far as creating its topologies:\n%s", out)
			}
			if mode == "panic" && !strings.Contains(string(out), "deliberate panic") {
				t.Fatalf("helper did not panic:\n%s", out)
			}
			if left := namespacesWithPrefix(t, prefix); len(left) != 0 {
				t.Fatalf("namespaces left after a %s: %v\n%s", mode, left, out)
			}
			if strings.Contains(string(out), "netns: cleanup:") {
				t.Fatalf("cleanup reported errors:\n%s", out)
			}
		})
	}
}

// TestRequireRoot runs a test as an unprivileged user: skipped normally,
// failed under CI=true.
func TestRequireRoot(t *testing.T) {
	netns.RequireRoot(t)
	// The test binary may sit in a directory only root can enter, and so
	// does t.TempDir.
	dir, err := os.MkdirTemp("", "netns-requireroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "netns.test")
	copyFile(t, os.Args[0], bin)
	for _, ci := range []string{"", "true"} {
		cmd := exec.CommandContext(t.Context(), bin, "-test.run=^TestHelperRequireRoot$", "-test.count=1", "-test.v")
		cmd.Dir = dir
		cmd.Env = []string{helperEnv + "=requireroot", "CI=" + ci, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		s := string(out)
		if strings.Contains(s, "NOT-SKIPPED") {
			t.Fatalf("CI=%q: ran as non-root:\n%s", ci, s)
		}
		switch ci {
		case "":
			if err != nil || !strings.Contains(s, "--- SKIP") {
				t.Fatalf("non-root without CI: err %v, want a skip:\n%s", err, s)
			}
		case "true":
			if err == nil || !strings.Contains(s, "--- FAIL") {
				t.Fatalf("non-root with CI=true: err %v, want a failure:\n%s", err, s)
			}
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// fakeTB records what New does with its testing.TB.
type fakeTB struct {
	testing.TB
	cleanups []func()
	fatal    string
	errors   []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Cleanup(fn func()) {
	f.cleanups = append(f.cleanups, fn)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// runFake runs fn on its own goroutine, as the testing package would, so
// that Fatalf can end it.
func runFake(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// TestNewRegistersCleanup: New hands the topology's removal to t.Cleanup
// and nothing else; a failing Build reports through Fatalf and registers
// nothing (Build has already removed what it made).
func TestNewRegistersCleanup(t *testing.T) {
	netns.RequireRoot(t)
	fake := &fakeTB{TB: t}
	var topo *netns.Topology
	runFake(func() { topo = netns.New(fake, netns.Config{Prefix: "xdptfake"}) })
	if topo == nil || fake.fatal != "" || len(fake.cleanups) != 1 {
		t.Fatalf("New: topo %v, fatal %q, %d cleanups", topo != nil, fake.fatal, len(fake.cleanups))
	}
	if got := len(namespacesWithPrefix(t, "xdptfake")); got != 3 {
		t.Fatalf("%d namespaces, want 3 (wire, a, b)", got)
	}
	fake.cleanups[0]()
	if left := namespacesWithPrefix(t, "xdptfake"); len(left) != 0 || len(fake.errors) != 0 {
		t.Fatalf("after cleanup: left %v, errors %v", left, fake.errors)
	}
	if err := topo.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	fake = &fakeTB{TB: t}
	runFake(func() { netns.New(fake, netns.Config{Prefix: "xdptfake", MTU: 1}) })
	if !strings.Contains(fake.fatal, "bad config") || len(fake.cleanups) != 0 {
		t.Fatalf("bad config: fatal %q, %d cleanups", fake.fatal, len(fake.cleanups))
	}
}
