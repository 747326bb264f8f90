package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// touch creates the empty file path and the directories above it.
func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeLibDir points $XDPROCE_LIBDIR at a directory holding an (empty)
// libibverbs.so.1 and returns it: the commands the tests run load no
// RDMA library.
func fakeLibDir(t *testing.T) string {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, verbsLib))
	t.Setenv("XDPROCE_LIBDIR", dir)
	return dir
}

// fakeDaemons is a runner that sees the daemons running reports and starts
// exe as a daemon.
func fakeDaemons(running func() ([]string, error), exe string) runner {
	rn := newRunner()
	rn.running = running
	rn.executable = func() (string, error) { return exe, nil }
	rn.discovery = nil // the fake daemons have no devices to show
	return rn
}

// serving fakes daemon.Running: daemons serve the interfaces names.
func serving(names ...string) func() ([]string, error) {
	return func() ([]string, error) { return names, nil }
}

func TestFindLibDir(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")              // bin/xdproce, bin/lib
	prefix := filepath.Join(root, "usr")             // bin/xdproce, lib/xdproce
	both := filepath.Join(root, "both")              // both layouts
	none := filepath.Join(root, "none")              // neither
	explicit := filepath.Join(root, "explicit")      // for $XDPROCE_LIBDIR
	emptyDir := filepath.Join(root, "explicit-none") // $XDPROCE_LIBDIR without the library
	touch(t, filepath.Join(repo, "bin", "lib", verbsLib))
	touch(t, filepath.Join(prefix, "lib", "xdproce", verbsLib))
	touch(t, filepath.Join(both, "bin", "lib", verbsLib))
	touch(t, filepath.Join(both, "lib", "xdproce", verbsLib))
	touch(t, filepath.Join(explicit, verbsLib))
	if err := os.MkdirAll(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := func(dir string) string { return filepath.Join(dir, "bin", "xdproce") }

	for _, c := range []struct {
		name, env, exe, want string
	}{
		{"repository", "", exe(repo), filepath.Join(repo, "bin", "lib")},
		{"installed", "", exe(prefix), filepath.Join(prefix, "lib", "xdproce")},
		{"beside first", "", exe(both), filepath.Join(both, "bin", "lib")},
		{"env first", explicit, exe(repo), explicit},
	} {
		got, err := findLibDir(c.env, c.exe)
		if err != nil || got != c.want {
			t.Errorf("%s: findLibDir(%q, %q) = %q, %v; want %q", c.name, c.env, c.exe, got, err, c.want)
		}
	}

	// A relative $XDPROCE_LIBDIR is made absolute: CMD may change directory.
	t.Chdir(root)
	if got, err := findLibDir("explicit", exe(none)); err != nil || got != explicit {
		t.Errorf("relative: got %q, %v; want %q", got, err, explicit)
	}

	// Missing, the error names every place looked at, and how to build.
	_, err := findLibDir("", exe(none))
	if err == nil {
		t.Fatal("no library anywhere: no error")
	}
	for _, want := range []string{filepath.Join(none, "bin", "lib"), filepath.Join(none, "bin", "..", "lib", "xdproce"), "make provider"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// $XDPROCE_LIBDIR is the only place looked at when set.
	_, err = findLibDir(emptyDir, exe(repo))
	if err == nil || !strings.Contains(err.Error(), emptyDir) || !strings.Contains(err.Error(), "XDPROCE_LIBDIR") ||
		strings.Contains(err.Error(), repo+"/bin/lib") {
		t.Errorf("$XDPROCE_LIBDIR without the library: error %v", err)
	}
}

// CMD finds xdproce's libraries first, before those it would have found.
func TestRunLibraryPath(t *testing.T) {
	lib := fakeLibDir(t)
	rn := fakeDaemons(serving("eth0"), "/nonexistent/xdproce")
	for _, c := range []struct{ prev, want string }{
		{"", lib},
		{"/opt/a:/opt/b", lib + ":/opt/a:/opt/b"},
	} {
		t.Setenv("LD_LIBRARY_PATH", c.prev)
		var out, errOut strings.Builder
		code := runWith(t.Context(), []string{"run", "--", "sh", "-c", "echo $LD_LIBRARY_PATH"}, &out, &errOut, rn)
		if code != 0 || strings.TrimSpace(out.String()) != c.want {
			t.Errorf("LD_LIBRARY_PATH=%q: CMD saw %q (exit %d, stderr %q); want %q", c.prev, out.String(), code, errOut.String(), c.want)
		}
	}
}

// xdproce run exits as CMD did, adding nothing to what CMD said.
func TestRunExitStatus(t *testing.T) {
	fakeLibDir(t)
	rn := fakeDaemons(serving("eth0"), "/nonexistent/xdproce")
	for _, c := range []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"echo oops >&2; exit 42", 42},
		{"kill -TERM $$", 128 + 15},
	} {
		var out, errOut strings.Builder
		code := runWith(t.Context(), []string{"run", "--", "sh", "-c", c.script}, &out, &errOut, rn)
		wantErr := ""
		if strings.HasPrefix(c.script, "echo oops") {
			wantErr = "oops\n"
		}
		if code != c.code || errOut.String() != wantErr {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", c.script, code, errOut.String(), c.code, wantErr)
		}
	}
}

func TestRunRefuses(t *testing.T) {
	lib := fakeLibDir(t)
	rn := fakeDaemons(serving("eth0"), "/nonexistent/xdproce")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"run"}, 2, "no --"},
		{[]string{"run", "true"}, 2, "before --"},
		{[]string{"run", "-d", "eth0", "true"}, 2, "before --"},
		{[]string{"run", "--"}, 2, "no command after --"},
		{[]string{"run", "-d", "eth0", "--"}, 2, "no command after --"},
		{[]string{"run", "-d"}, 2, "flag needs an argument"},
		{[]string{"run", "--bogus", "--", "true"}, 2, "bogus"},
		{[]string{"run", "--", "no-such-command-xdproce"}, 1, "executable file not found"},
	} {
		var out, errOut strings.Builder
		if code := runWith(t.Context(), c.args, &out, &errOut, rn); code != c.code || !strings.Contains(errOut.String(), c.says) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, errOut.String(), c.code, c.says)
		}
	}

	// Without -d, some daemon must serve the namespace already.
	rn = fakeDaemons(serving(), "/nonexistent/xdproce")
	var errOut strings.Builder
	if code := runWith(t.Context(), []string{"run", "--", "true"}, &strings.Builder{}, &errOut, rn); code != 1 ||
		!strings.Contains(errOut.String(), "pass -d IFACE") {
		t.Errorf("no daemon: exit %d, stderr %q; want 1 and a hint at -d", code, errOut.String())
	}

	// Without the libraries, say where they were looked for.
	if err := os.Remove(filepath.Join(lib, verbsLib)); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := runWith(t.Context(), []string{"run", "--", "true"}, &strings.Builder{}, &errOut, rn); code != 1 ||
		!strings.Contains(errOut.String(), lib) || !strings.Contains(errOut.String(), "make provider") {
		t.Errorf("no library: exit %d, stderr %q", code, errOut.String())
	}
}

// A daemon that serves -d IFACE already is used and left alone.
func TestRunUsesRunningDaemon(t *testing.T) {
	fakeLibDir(t)
	rn := fakeDaemons(serving("lo", "veth9"), "/nonexistent/xdproce") // starting one would fail
	var errOut strings.Builder
	if code := runWith(t.Context(), []string{"run", "-d", "veth9", "--", "true"}, &strings.Builder{}, &errOut, rn); code != 0 {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// fakeUp is an executable that plays `xdproce up -d IFACE` in dir: it
// records its arguments and pid, then "listens" (the file listening) until
// SIGTERM, recording that it was stopped. prelude runs first.
func fakeUp(t *testing.T, dir, prelude string) string {
	t.Helper()
	exe := filepath.Join(dir, "xdproce")
	script := "#!/bin/sh\n" + prelude + "\n" +
		"echo \"$@\" > " + dir + "/args; echo $$ > " + dir + "/pid\n" +
		"trap 'touch " + dir + "/stopped; exit 0' TERM\n" +
		"touch " + dir + "/listening\n" +
		"while :; do sleep 0.02; done\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// listening is daemon.Running for fakeUp's daemon of ifname in dir.
func listening(dir, ifname string) func() ([]string, error) {
	return func() ([]string, error) {
		_, err1 := os.Stat(filepath.Join(dir, "listening"))
		_, err2 := os.Stat(filepath.Join(dir, "stopped"))
		if err1 == nil && err2 != nil {
			return []string{ifname}, nil
		}
		return nil, nil
	}
}

// With -d and no daemon, run starts one for CMD and stops it after CMD,
// however CMD ends.
func TestRunStartsDaemon(t *testing.T) {
	fakeLibDir(t)
	for _, c := range []struct {
		name    string
		prelude string
		script  string // CMD, run in the fake daemon's directory
		cancel  bool   // cancel the context while CMD runs
		code    int
		says    string
		termed  bool // the daemon must have been stopped by SIGTERM
	}{
		{name: "ok", script: "test -e listening", code: 0, termed: true},
		{name: "CMD fails", script: "exit 3", code: 3, termed: true},
		{name: "interrupted", script: "touch cmd; exec sleep 10", cancel: true, code: 128 + 15, termed: true},
		{name: "ignores SIGTERM", prelude: "trap '' TERM; echo \"$@\" > args; touch listening; while :; do sleep 0.02; done",
			script: "true", code: 1, says: "killed"},
		{name: "dies at once", prelude: "echo \"$@\" > args; echo no such device >&2; exit 1", script: "true", code: 1, says: "exited before it listened"},
		{name: "never listens", prelude: "echo \"$@\" > args; trap 'touch stopped; exit 0' TERM; while :; do sleep 0.02; done",
			script: "true", code: 1, says: "did not listen", termed: true},
		{name: "dies under CMD", script: "kill $(cat pid); sleep 0.5", code: 1, says: "had exited"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			rn := fakeDaemons(listening(dir, "veth9"), fakeUp(t, dir, c.prelude))
			rn.startTimeout, rn.stopTimeout = 500*time.Millisecond, 500*time.Millisecond
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if c.cancel {
				go func() {
					for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
						if _, err := os.Stat(filepath.Join(dir, "cmd")); err == nil {
							break
						}
					}
					cancel()
				}()
			}
			var out, errOut strings.Builder
			code := runWith(ctx, []string{"run", "-d", "veth9", "--", "sh", "-c", c.script}, &out, &errOut, rn)
			if code != c.code || !strings.Contains(errOut.String(), c.says) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), c.code, c.says)
			}
			if args, err := os.ReadFile(filepath.Join(dir, "args")); err != nil || string(args) != "up -d veth9\n" {
				t.Errorf("daemon started with %q (%v); want up -d veth9", args, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "stopped")); c.termed && err != nil {
				t.Errorf("daemon not stopped by SIGTERM: %v", err)
			}
		})
	}
}
