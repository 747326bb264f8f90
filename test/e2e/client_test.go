package e2e

import (
	"context"
	"os"
	"os/exec"
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
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildVerbsCheck(t), "mtpoll", a.Path(), "xdp_"+a.Link, a.Addr.String(), b.Path(), "xdp_"+b.Link, b.Addr.String())
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	t.Logf("verbs_check mtpoll:\n%s", out)
	if err != nil {
		t.Fatalf("verbs_check mtpoll: %v", err)
	}
	if n := checksPassed(t, out); n < 6 {
		t.Fatalf("verbs_check mtpoll ran %d checks, want 6", n)
	}
}
