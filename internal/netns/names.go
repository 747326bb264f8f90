package netns

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// DefaultPrefix starts the names of everything the harness creates.
const DefaultPrefix = "xdpt"

// maxLinkName is IFNAMSIZ - 1.
const maxLinkName = 15

// topologySeq numbers topologies within this process, so that names are
// unique per run: prefix + pid + sequence.
var topologySeq atomic.Uint64

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)

// namespaceName is "<prefix>-<pid>-<seq>-<role>"; Sweep parses the pid.
func namespaceName(prefix string, pid int, seq uint64, role string) string {
	return fmt.Sprintf("%s-%d-%d-%s", prefix, pid, seq, role)
}

// linkName is unique per run and at most 15 bytes: as much of the prefix
// as fits, the pid, then the topology sequence, a side letter and an index
// (base 36). It is the same in every namespace so logs and captures say
// which topology a frame belongs to.
func linkName(prefix string, pid int, seq uint64, side byte, idx int) (string, error) {
	core := strconv.Itoa(pid) + "." + strconv.FormatUint(seq, 36) + string(side) + strconv.FormatInt(int64(idx), 36)
	room := maxLinkName - len(core)
	if room < 1 {
		return "", fmt.Errorf("netns: link name %q too long", core)
	}
	if len(prefix) > room {
		prefix = prefix[:room]
	}
	return prefix + core, nil
}

// Sweep deletes the namespaces under /run/netns that the harness created
// with this prefix in processes that no longer exist (a test binary killed
// by a timeout never runs its cleanups). Namespaces of live processes are
// left alone. It returns the names it deleted.
func Sweep(prefix string) ([]string, error) {
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("netns: bad prefix %q", prefix)
	}
	entries, err := os.ReadDir(runDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: sweep: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		pid, ok := pidOf(e.Name(), prefix)
		if !ok || processAlive(pid) {
			continue
		}
		if err := deleteNamed(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// pidOf parses "<prefix>-<pid>-<seq>-<role>".
func pidOf(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, false
	}
	parts := strings.SplitN(rest, "-", 3)
	if len(parts) != 3 {
		return 0, false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return 0, false
	}
	if _, err := strconv.ParseUint(parts[1], 10, 64); err != nil {
		return 0, false
	}
	return pid, true
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// TB is what New and RequireRoot need of a test; testing.TB has it. An
// interface here keeps package testing out of the binaries that build
// namespaces (xdproce bench).
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// RequireRoot skips the test unless it runs as root, except under CI=true,
// where a network test must never be skipped silently: it fails instead.
func RequireRoot(t TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("netns: this test needs root (CI=true, so failing instead of skipping)")
	}
	t.Skip("netns: this test needs root")
}
