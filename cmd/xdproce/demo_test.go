package main

import (
	"os"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/test/netns"
)

// TestDemoRunsEndToEnd runs the demo briefly: it must move RoCEv2 frames
// through XDP and AF_XDP with no corruption, run TCP beside it, and clean up.
func TestDemoRunsEndToEnd(t *testing.T) {
	netns.RequireRoot(t)
	var out, errOut strings.Builder
	if code := run(t.Context(), []string{"demo", "--time", "300ms"}, &out, &errOut); code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"ping: ok", "RoCEv2 via XDP+AF_XDP", "kernel TCP", "ratio RoCEv2/TCP"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "xdpdemo-") {
			t.Errorf("demo left namespace %s behind", e.Name())
		}
	}
}
