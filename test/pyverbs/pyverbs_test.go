// Package pyverbs runs rdma-core's own test suite (tests/ of rdma-core
// v44.0, the release of Debian's python3-pyverbs) on xdproce's libraries
// against a daemon on a veth in a namespace, and compares its outcome test
// by test with the suite's on Linux rxe (rxe.tsv, measured in the rxe-peer
// VM: see README.md).
package pyverbs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// python is Debian's interpreter: python3-pyverbs is installed for it, not
// for another python3 that may come first in PATH.
const python = "/usr/bin/python3"

// knownGaps are the tests rxe passes that xdproce skips still, each with
// the skip reason it gives and why. A gap that closes fails the test until
// it is taken off this list, so the list stays true.
var knownGaps = map[string]struct{ reason, why string }{}

// outcome is one test's result: "ok", "ERROR", "FAIL", "expected failure",
// "unexpected success" or "skipped 'reason'".
type outcome string

func (o outcome) ok() bool      { return o == "ok" || o == "expected failure" }
func (o outcome) skipped() bool { return strings.HasPrefix(string(o), "skipped") }

// header is unittest's verbose line naming a test; its outcome ends that
// line or, when the test or its docstring printed, a later one.
var (
	header = regexp.MustCompile(`^(\w+) \(([\w.]+)\)`)
	result = regexp.MustCompile(`(?:^| \.\.\. )(ok|ERROR|FAIL|expected failure|unexpected success|skipped .*)$`)
)

// parse reads `run_tests.py -v` output (stderr) into outcomes by test ID
// (module.Class.method).
func parse(out []byte) map[string]outcome {
	res := map[string]outcome{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := header.FindStringSubmatch(line); m != nil {
			cur = m[2]
			line = line[len(m[0]):]
		}
		if cur == "" {
			continue
		}
		if m := result.FindStringSubmatch(line); m != nil {
			res[cur] = outcome(m[1])
			cur = ""
		}
	}
	return res
}

// readTSV reads a "test<TAB>outcome" file.
func readTSV(t *testing.T, path string) map[string]outcome {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]outcome{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, o, ok := strings.Cut(l, "\t")
		if !ok {
			t.Fatalf("%s: bad line %q", path, l)
		}
		res[id] = outcome(o)
	}
	return res
}

func tally(res map[string]outcome) string {
	var ok, skip, bad int
	for _, o := range res {
		switch {
		case o.ok():
			ok++
		case o.skipped():
			skip++
		default:
			bad++
		}
	}
	return fmt.Sprintf("%d ok, %d errors or failures, %d skipped", ok, bad, skip)
}

func dir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Dir(file)
}

// TestPyverbsSuite runs the whole suite on one device (its two-sided tests
// talk through loopback): no test errs or fails, every test that passes
// on rxe passes (but the known gaps), and the tests rxe skips may skip.
// XDPROCE_PYVERBS_OUT, if set, receives our outcomes as a TSV for the
// results page.
func TestPyverbsSuite(t *testing.T) {
	netns.RequireRoot(t)
	if out, err := exec.Command(python, "-c", "import pyverbs.device").CombinedOutput(); err != nil {
		t.Fatalf("python3-pyverbs is not installed (make deps-abi installs it): %v\n%s", err, out)
	}
	here := dir(t)
	root := filepath.Join(here, "..", "..")
	if out, err := exec.Command("make", "-C", root, "--no-print-directory", "provider").CombinedOutput(); err != nil {
		t.Fatalf("make provider: %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "xdproce")
	build := exec.Command("go", "build", "-o", bin, "github.com/xdproce/xdproce/cmd/xdproce")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	h := topo.Hosts[0]
	daemonUp(t, bin, h)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--", python, "tests/run_tests.py", "--dev", "xdp_"+h.Link, "-v")
	cmd.Dir = here
	cmd.Env = append(os.Environ(), "XDPROCE_LIBDIR="+filepath.Join(root, "bin", "lib"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	ours := parse(out.Bytes())
	rxe := readTSV(t, filepath.Join(here, "rxe.tsv"))
	t.Logf("xdproce: %s; rxe (6.1): %s", tally(ours), tally(rxe))
	if p := os.Getenv("XDPROCE_PYVERBS_OUT"); p != "" {
		writeTSV(t, p, ours)
	}
	if len(ours) != len(rxe) {
		t.Errorf("%d tests ran, rxe's run has %d (python3: %v)\n%s", len(ours), len(rxe), err, &out)
	}
	var bad []string
	for id, o := range ours {
		gap, isGap := knownGaps[id]
		switch {
		case !o.ok() && !o.skipped():
			bad = append(bad, fmt.Sprintf("%s: %s", id, o))
		case rxe[id].ok() && !o.ok() && !(isGap && string(o) == "skipped '"+gap.reason+"'"):
			bad = append(bad, fmt.Sprintf("%s: %s, passes on rxe", id, o))
		case isGap && o.ok():
			bad = append(bad, fmt.Sprintf("%s passes now: take it off knownGaps", id))
		}
	}
	// The two-sided tests ran over loopback: nothing else carries them.
	if n := loopbackPkts(t, h); n < 1000 {
		t.Errorf("loopback_pkts %d after the suite, want the two-sided tests' frames (at least 1000)", n)
	} else {
		t.Logf("loopback_pkts %d", n)
	}
	for id, g := range knownGaps {
		t.Logf("known gap: %s (%s)", id, g.why)
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Fatalf("%d tests:\n%s\n\nthe run:\n%s", len(bad), strings.Join(bad, "\n"), &out)
	}
}

func writeTSV(t *testing.T, path string, res map[string]outcome) {
	t.Helper()
	ids := make([]string, 0, len(res))
	for id := range res {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s\t%s\n", id, res[id])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// loopbackPkts is the loopback_pkts counter of the daemon serving h's link.
func loopbackPkts(t *testing.T, h *netns.Host) uint64 {
	t.Helper()
	var n uint64
	if err := h.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := verbs.Dial(ctx, h.Link)
		if err != nil {
			return err
		}
		defer d.Close()
		c, err := d.Counters()
		for _, f := range c.Named() {
			if f.Name == "loopback_pkts" {
				n = f.Value
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// daemonUp starts `xdproce up` on h's link and waits until it serves; it
// is stopped when the test ends.
func daemonUp(t *testing.T, bin string, h *netns.Host) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, "up", "-d", h.Link)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := h.Do(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			d, err := verbs.Dial(ctx, h.Link)
			if err == nil {
				d.Close()
			}
			return err
		})
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("xdproce up exited:\n%s", &out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdproce up does not serve after 20 s: %v\n%s", err, &out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
