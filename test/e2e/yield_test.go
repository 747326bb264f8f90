package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
)

// TestStockLibraryPollYields: an application polling an empty CQ of the
// library (ibv_poll_cq, ibv_start_poll) gives its processor up every
// XP_YIELD_POLLS polls (8): where pollers spinning on memory hold every
// processor (ib_write_lat on a small host), the daemon's engine woken to
// make the completion they wait for then runs at once instead of waiting
// to preempt one. yield_check counts the library's sched_yield calls.
func TestStockLibraryPollYields(t *testing.T) {
	out := runYieldCheck(t)
	var polls, starts int
	if _, err := fmt.Sscanf(string(out), "yields poll_cq %d start_poll %d", &polls, &starts); err != nil {
		t.Fatalf("yield_check printed %q: %v", out, err)
	}
	// 800 empty polls each: 100 yields, give or take the thread's count
	// carried from one loop to the next.
	if polls < 99 || polls > 101 || starts < 99 || starts > 101 {
		t.Fatalf("800 empty polls yielded %d times (ibv_poll_cq) and %d (ibv_start_poll), want 100 each", polls, starts)
	}
}

// TestStockLibraryPollAfterYield: a poll of the library that yielded its
// processor answers as of its return, not as of its look before the
// yield: yield_check makes a completion arrive during the yield and the
// poll that yielded must return it (ibv_poll_cq and ibv_start_poll). A
// stale empty answer, the yield lasting milliseconds on a loaded host,
// crashed libfabric's RXM server (fi_pingpong -p 'verbs;ofi_rxm', 1 run
// in 20 under load): it read its CQ empty, then the peer's DISCONNECTED
// event, closed the connection with the peer's last message's completion
// left behind, and reposted that buffer on the closed endpoint.
func TestStockLibraryPollAfterYield(t *testing.T) {
	out := runYieldCheck(t, "fresh")
	var polled, started int
	if _, err := fmt.Sscanf(string(out), "fresh poll_cq %d start_poll %d", &polled, &started); err != nil {
		t.Fatalf("yield_check printed %q: %v", out, err)
	}
	if polled != 1 || started != 1 {
		t.Fatalf("the polls that yielded while a completion arrived returned %d (ibv_poll_cq) and %d (ibv_start_poll), want 1 each", polled, started)
	}
}

// runYieldCheck runs provider/test/yield_check in mode (none: the yield
// count) on a fresh daemon's device and returns what it printed.
func runYieldCheck(t *testing.T, mode ...string) []byte {
	t.Helper()
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a := topo.Hosts[0]
	daemonUp(t, buildCLI(t), a)
	check := buildProviderCheck(t, "yield_check", "-libverbs", "-rdynamic")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, check, append([]string{a.Path(), "xdp_" + a.Link}, mode...)...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("yield_check %v: %v\n%s", mode, err, out)
	}
	return out
}
