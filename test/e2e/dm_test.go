package e2e

import (
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netns"
)

// TestPerfDeviceMemoryThroughDaemons: `xdproce perf --dm` through a daemon
// on each side (perf attaches when one serves the link): both buffers are
// device memory the daemons allocated and the processes mapped, the peer's
// WRITEs and READs reach them, every byte checked.
func TestPerfDeviceMemoryThroughDaemons(t *testing.T) {
	netns.RequireRoot(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_write_lat"} {
		t.Run(tool, func(t *testing.T) {
			args := []string{"--dm", "-n", "300", "-s", "5000", "-m", "1024"}
			if strings.HasSuffix(tool, "_bw") {
				args = append(args, "--verify")
			}
			cout, sout := perfRun(t, bin, a, b, tool, args...)
			if strings.HasSuffix(tool, "_lat") {
				if m := latRow.FindStringSubmatch(cout); m == nil || m[2] != "300" {
					t.Errorf("no latency row with 300 iterations:\n%s", cout)
				}
				return
			}
			if m := bwRow.FindStringSubmatch(cout); m == nil || m[2] != "300" {
				t.Errorf("no bandwidth row with 300 iterations:\n%s", cout)
			}
			if !strings.Contains(cout+sout, "Data validation : every byte") {
				t.Errorf("no side reported its data check:\n%s\n%s", cout, sout)
			}
		})
	}
}
