package main

import (
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netns"
)

// TestImpairCommandAttachesAndDetaches runs `xdproce impair` on a bridge port
// of the wire namespace, then checks the port can take an injector again
// (the command removed its own).
func TestImpairCommandAttachesAndDetaches(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Bridge})
	port := topo.Hosts[0].PeerLink
	for round := range 2 {
		var out, errOut strings.Builder
		var code int
		err := topo.Wire.Do(func() error {
			code = run(t.Context(), []string{"impair", "--dev", port, "--drop", "0.5", "--time", "100ms", "--interval", "50ms"}, &out, &errOut)
			return nil
		})
		if err != nil || code != 0 {
			t.Fatalf("round %d: exit %d, %v\n%s%s", round, code, err, out.String(), errOut.String())
		}
		if !strings.Contains(out.String(), "impairing RoCEv2 arriving on "+port) || !strings.Contains(out.String(), "dropped 0") {
			t.Errorf("round %d: unexpected output:\n%s", round, out.String())
		}
	}
}
