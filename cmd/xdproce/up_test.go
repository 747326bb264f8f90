package main

import (
	"strings"
	"testing"
)

// The daemon's commands refuse what they cannot do, with the exit codes
// of the other commands: 2 for a usage mistake, 1 for no daemon.
func TestDaemonCommandsRefuse(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"up"}, 2, "-d IFACE is required"},
		{[]string{"up", "-d", "x", "--log-level", "loud"}, 2, "--log-level"},
		{[]string{"up", "-d", "x", "--group", "no-such-group-xdproce"}, 2, "--group"},
		{[]string{"down"}, 2, "-d IFACE is required"},
		{[]string{"down", "-d", "no-such-iface-xdproce", "--timeout", "1s"}, 1, "no xdproce daemon"},
		{[]string{"stats", "-d", "no-such-iface-xdproce"}, 1, "no xdproce daemon"},
		{[]string{"list", "-d", "no-such-iface-xdproce"}, 1, "no xdproce daemon"},
	} {
		var out, errOut strings.Builder
		if code := run(t.Context(), c.args, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errOut.String(), c.code, c.says)
		}
	}
}
