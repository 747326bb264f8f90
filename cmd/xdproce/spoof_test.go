package main

import (
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netns"
)

// TestSpoofCommand: misuse is a usage error (exit 2); a run against a QPN
// on a quiet hub sends its blind frames and reports them.
func TestSpoofCommand(t *testing.T) {
	for _, args := range [][]string{
		{"spoof", "--dev", "x", "--as", "198.18.0.1", "--as-mac", "02:00:00:00:00:01"},
		{"spoof", "--dev", "x", "--victim", "198.18.0.2", "--victim-mac", "02:00:00:00:00:02", "--as", "fd00::1", "--as-mac", "02:00:00:00:00:01"},
		{"spoof", "--dev", "x", "--victim", "198.18.0.2", "--victim-mac", "02:00:00:00:00:02", "--as", "198.18.0.1", "--as-mac", "02:00:00:00:00:01", "--classes", "exact"},
	} {
		var out, errOut strings.Builder
		if code := run(t.Context(), args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s", args, code, errOut.String())
		}
	}
	topo := netns.New(t, netns.Config{Kind: netns.Bridge, Hub: true,
		Hosts: []netns.HostConfig{{Name: "a"}, {Name: "b"}, {Name: "x"}}})
	a, b, x := topo.Hosts[0], topo.Hosts[1], topo.Hosts[2]
	var out, errOut strings.Builder
	var code int
	err := x.Do(func() error {
		code = run(t.Context(), []string{"spoof", "--dev", x.Link, "--victim", b.Addr.String(), "--victim-mac", b.MAC.String(),
			"--as", a.Addr.String(), "--as-mac", a.MAC.String(), "--qpn", "17", "--classes", "blind", "--interval", "1ms", "--time", "200ms"}, &out, &errOut)
		return nil
	})
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s%s", code, err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "spoofing "+a.Addr.String()) || strings.Contains(out.String(), "blind 0,") {
		t.Errorf("unexpected output:\n%s", out.String())
	}
}
