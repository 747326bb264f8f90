package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
)

// TestStockLibraryUnsupported runs stubs_check's device mode on a device of
// xdproce's: each verb rdma-core has that xdproce, as rxe, does not provide
// (XRC domains, WQs and RSS tables, flows, device memory, thread and parent
// domains, counters, null and dmabuf regions, rate limits, CQ moderation,
// SRQ numbers and ops, ECE, importing) answers as rdma-core answers it for
// such a provider, NULL or the errno EOPNOTSUPP, on real objects and
// without a crash; so do the mlx5dv and efadv calls on a device that is
// not theirs; and every object is destroyed afterwards.
func TestStockLibraryUnsupported(t *testing.T) {
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	check := buildProviderCheck(t, "stubs_check", "-libverbs", "-lmlx5", "-lefa")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, check, "device", a.Path(), "xdp_"+a.Link)
	cmd.Env = append(os.Environ(), "LD_BIND_NOW=1", "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	t.Logf("stubs_check device:\n%s", out)
	if err != nil {
		t.Fatalf("stubs_check device: %v", err)
	}
	if n := checksPassed(t, out); n < 150 {
		t.Fatalf("stubs_check device ran %d checks, want at least 150", n)
	}
}
