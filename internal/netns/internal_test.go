package netns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLinkName(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		pid    int
		seq    uint64
		side   byte
		idx    int
		want   string
	}{
		{"xdpt", 1234, 1, 'h', 0, "xdpt1234.1h0"},
		{"xdpt", 4194304, 1, 'w', 199, "xdp4194304.1w5j"},
		{"verylongprefix", 4194304, 46655, 'b', 0, "ve4194304.zzzb0"},
	} {
		got, err := linkName(tc.prefix, tc.pid, tc.seq, tc.side, tc.idx)
		if err != nil || got != tc.want || len(got) > maxLinkName {
			t.Errorf("linkName(%q, %d, %d, %c, %d) = %q, %v; want %q", tc.prefix, tc.pid, tc.seq, tc.side, tc.idx, got, err, tc.want)
		}
	}
	if _, err := linkName("x", 4194304, 1<<40, 'h', 0); err == nil {
		t.Error("an overlong name was accepted")
	}
}

func TestPidOf(t *testing.T) {
	for name, want := range map[string]int{
		"xdpt-123-4-a":      123,
		"xdpt-123-4-wire":   123,
		"xdpt-123-x-a":      0,
		"xdpt-abc-4-a":      0,
		"xdptx-123-4-a":     0,
		"other-123-4-a":     0,
		"xdpt-123":          0,
		"xdpt-0-1-a":        0,
		"xdpt-123-4-a-more": 123,
	} {
		got, ok := pidOf(name, "xdpt")
		if (want != 0) != ok || got != want {
			t.Errorf("pidOf(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
}

// deadPid returns the pid of a process that has exited.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if processAlive(pid) {
		t.Skip("pid reused at once")
	}
	return pid
}

func TestSweep(t *testing.T) {
	RequireRoot(t)
	const prefix = "xdptsweep"
	dead := namespaceName(prefix, deadPid(t), 1, "a")
	live := namespaceName(prefix, os.Getpid(), 99999, "a")
	other := namespaceName("xdptother", deadPid(t), 1, "a")
	for _, name := range []string{dead, live, other} {
		ns, err := createNamespace(name, nsSysctls{})
		if err != nil {
			t.Fatal(err)
		}
		ns.handle.Close()
		t.Cleanup(func() { _ = deleteNamed(name) })
	}
	removed, err := Sweep(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dead}) {
		t.Fatalf("Sweep removed %v, want only %s", removed, dead)
	}
	for name, want := range map[string]bool{dead: false, live: true, other: true} {
		if _, err := os.Stat(filepath.Join(runDir, name)); (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", name, err == nil, want)
		}
	}
	if _, err := Sweep("Bad-Prefix"); err == nil {
		t.Error("Sweep accepted a bad prefix")
	}
}

// TestBuildFailureLeavesNothing makes Build fail halfway (a file already
// sits where host b's namespace must go) and checks it removes what it had
// made, and only that.
func TestBuildFailureLeavesNothing(t *testing.T) {
	RequireRoot(t)
	const prefix = "xdptfail"
	next := topologySeq.Load() + 1
	blocker := filepath.Join(runDir, namespaceName(prefix, os.Getpid(), next, "b"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(blocker) })

	topo, err := Build(Config{Prefix: prefix})
	if err == nil {
		topo.Close()
		t.Fatal("Build succeeded over an existing namespace name")
	}
	if !errors.Is(err, os.ErrExist) {
		t.Errorf("error %v, want one wrapping ErrExist", err)
	}
	entries, _ := os.ReadDir(runDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") && filepath.Join(runDir, e.Name()) != blocker {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	if _, err := os.Stat(blocker); err != nil {
		t.Errorf("Build removed a namespace file it did not create: %v", err)
	}
}
