package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
)

// TestStockLibraryConcurrentPoll runs verbs_check's mtpoll: four threads
// poll one CQ of xdproce's libibverbs.so.1 while 60 000 signaled WRITEs
// complete on it (libibverbs' verbs are thread-safe). Every wr_id must come
// back exactly once and succeed: a poller that read the producer index
// before another consumed past it returned a ring of stale completions, and
// the daemon then saw the CQ overflow.
func TestStockLibraryConcurrentPoll(t *testing.T) {
	out, _, _, _ := verbsCheckDaemons(t, 1, "mtpoll")
	if n := checksPassed(t, out); n < 6 {
		t.Fatalf("verbs_check mtpoll ran %d checks, want 6", n)
	}
}

// verbsCheckDaemons runs verbs_check (mode, or every check with none)
// between the daemons of two hosts whose veths have queues queues, and
// returns its output, the command the daemons run and the hosts.
func verbsCheckDaemons(t *testing.T, queues int, mode ...string) (out []byte, bin string, a, b *netns.Host) {
	t.Helper()
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: queues})
	a, b = topo.Hosts[0], topo.Hosts[1]
	bin = buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args := append(mode, a.Path(), "xdp_"+a.Link, a.Addr.String(), b.Path(), "xdp_"+b.Link, b.Addr.String())
	cmd := exec.CommandContext(ctx, buildVerbsCheck(t), args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	t.Logf("verbs_check %v:\n%s", mode, out)
	if err != nil {
		t.Fatalf("verbs_check %v: %v", mode, err)
	}
	return out, bin, a, b
}

// TestStockLibraryRingsEachEngine runs verbs_check between daemons of two
// engines each (veths of two queues): its QPs land on either engine, and
// the library rings each QP's engine with the doorbell the daemon gave it
// for that engine (DOORBELL at ibv_open_device), which that engine waits
// on itself: the daemons' doorbell_wakes count those rings. A daemon that
// relayed every ring through a goroutine to all its engines counted none.
func TestStockLibraryRingsEachEngine(t *testing.T) {
	out, bin, a, b := verbsCheckDaemons(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if n := checksPassed(t, out); n < 100 {
		t.Fatalf("verbs_check ran %d checks, want at least 100", n)
	}
	wakes := 0
	for _, h := range []*netns.Host{a, b} {
		var sout bytes.Buffer
		st := exec.CommandContext(ctx, bin, "stats", "-d", h.Link)
		st.Stdout, st.Stderr = &sout, &sout
		if err := h.Start(st); err != nil {
			t.Fatal(err)
		}
		if err := st.Wait(); err != nil {
			t.Fatalf("xdproce stats -d %s: %v\n%s", h.Link, err, &sout)
		}
		m := regexp.MustCompile(`\bdoorbell_wakes (\d+)`).FindStringSubmatch(sout.String())
		if m == nil {
			t.Fatalf("xdproce stats -d %s shows no doorbell_wakes:\n%s", h.Link, &sout)
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("%s: doorbell_wakes %d", h.Link, n)
		wakes += n
	}
	if wakes == 0 {
		t.Fatal("no ring of the library woke an engine on its own doorbell: relayed?")
	}
}
