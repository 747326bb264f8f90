package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func countSteps(groups []group) (plain, attached int) {
	for _, g := range groups {
		plain += len(g.plain)
		attached += len(g.attached)
	}
	return plain, attached
}

// TestPlan checks what a run measures: per bandwidth size TCP alone and
// xdproce WRITE, SEND, READ with TCP+XDP; per round-trip size TCP alone and
// xdproce WRITE, SEND with TCP+XDP; per QP count one point of each
// contender; the AF_XDP floor (a round trip per size, the frame rate,
// 4 KiB frames streaming), with no device open; and through the daemons
// WRITE 64 KiB and the 8 B WRITE round trip.
func TestPlan(t *testing.T) {
	cfg := Default()
	groups := plan(cfg, [2]*Host{})
	if want := len(cfg.Sizes) + len(cfg.LatSizes) + 2 + 3 + 2; len(groups) != want {
		t.Fatalf("%d groups, want %d", len(groups), want)
	}
	plain, attached := countSteps(groups)
	if want := len(cfg.Sizes) + 2*len(cfg.LatSizes) + len(cfg.QPs) + 2; plain != want {
		t.Errorf("%d points without XDP, want %d", plain, want)
	}
	if want := 4*len(cfg.Sizes) + 3*len(cfg.LatSizes) + len(cfg.QPs) + 3 + 2; attached != want {
		t.Errorf("%d points with xdproce open, want %d", attached, want)
	}
	for _, g := range groups {
		for _, s := range g.plain {
			if !strings.HasPrefix(s.what, "TCP ") && !strings.HasPrefix(s.what, "AF_XDP ") {
				t.Errorf("point %q runs while no xdproce device is open", s.what)
			}
		}
		for _, s := range g.attached {
			if !strings.HasPrefix(s.what, "xdproce ") && !strings.HasPrefix(s.what, "xdproce_daemon") && !strings.HasPrefix(s.what, "TCP+XDP ") {
				t.Errorf("point %q runs while the devices are open", s.what)
			}
		}
	}
	first := groups[0]
	var names []string
	for _, s := range first.attached {
		names = append(names, s.what)
	}
	if got := strings.Join(names, ", "); got != "xdproce WRITE 64 B, TCP+XDP stream 64 B, xdproce SEND 64 B, xdproce READ 64 B" {
		t.Errorf("first group with the devices open: %s", got)
	}
}

// TestRunLengths checks by arithmetic, not by timing, that the default run
// stays near the 3-minute budget and --quick within a minute, allowing one
// second per group for opening and closing the devices, with and without
// the comparison of stock perftest (whose points are as long as their
// iterations or -D, plus starting two processes each).
func TestRunLengths(t *testing.T) {
	// As xdproce bench sets it up: two rounds with --quick.
	stock := func(c Config, rounds int) Config {
		c.Stock = &Stock{Exe: "/x/xdproce", LibDir: "/x/lib", Rounds: rounds}
		return c
	}
	for _, c := range []struct {
		name string
		cfg  Config
		max  time.Duration
	}{{"default", Default(), 170 * time.Second}, {"quick", Quick(), 50 * time.Second},
		{"default with stock perftest", stock(Default(), 3), 200 * time.Second}, {"quick with stock perftest", stock(Quick(), 2), 65 * time.Second}} {
		est, points := estimate(c.cfg)
		t.Logf("%s run: %d points ≈ %v", c.name, points, est)
		if est > c.max {
			t.Errorf("%s run: %d points ≈ %v, more than %v", c.name, points, est, c.max)
		}
		if err := c.cfg.validate(); err != nil {
			t.Errorf("%s config: %v", c.name, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"nothing":       func(c *Config) { c.Sizes, c.LatSizes, c.QPs = nil, nil, nil },
		"zero size":     func(c *Config) { c.Sizes = []int{0} },
		"tiny rtt size": func(c *Config) { c.LatSizes = []int{2} },
		"depth":         func(c *Config) { c.Depth = 0 },
		"duration":      func(c *Config) { c.Duration = 0 },
		"one iface":     func(c *Config) { c.Ifaces = []string{"a/x"} },
	} {
		cfg := Default()
		mod(&cfg)
		if err := cfg.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestBusyPoll(t *testing.T) {
	for s, want := range map[string]BusyPoll{"rtt": BusyPollRTT, "off": BusyPollNever, "false": BusyPollNever, "on": BusyPollAlways, "true": BusyPollAlways} {
		if got, err := ParseBusyPoll(s); err != nil || got != want {
			t.Errorf("ParseBusyPoll(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseBusyPoll("sometimes"); err == nil {
		t.Error("\"sometimes\" accepted")
	}
	if Default().BusyPoll != BusyPollRTT {
		t.Errorf("default busy-poll %v, want rtt", Default().BusyPoll)
	}
	for _, c := range []struct {
		mode         BusyPoll
		rtt, streams bool
	}{{BusyPollRTT, true, false}, {BusyPollNever, false, false}, {BusyPollAlways, true, true}} {
		if c.mode.busy(true) != c.rtt || c.mode.busy(false) != c.streams {
			t.Errorf("%v: round trips busy %v, streams busy %v", c.mode, c.mode.busy(true), c.mode.busy(false))
		}
	}
	for _, g := range plan(Default(), [2]*Host{}) {
		if len(g.attached) > 0 && g.rtt != strings.Contains(g.attached[0].what, "ping-pong") {
			t.Errorf("group of %q marked rtt=%v", g.attached[0].what, g.rtt)
		}
	}
	if bw, rtt := daemonGroups(Default()); len(bw) != 2 || !bw[0].daemon || bw[0].rtt || bw[0].ownMemory || !bw[1].ownMemory || bw[1].rtt ||
		len(rtt) != 1 || !rtt[0].daemon || !rtt[0].rtt {
		t.Errorf("daemon groups %+v %+v", bw, rtt)
	}
	// Each daemon point follows the same point in-process.
	groups := plan(Default(), [2]*Host{})
	for i, g := range groups {
		if g.daemon && !g.ownMemory {
			prev := groups[i-1]
			want := "xdproce WRITE 64 KiB"
			if g.rtt {
				want = "xdproce WRITE ping-pong 8 B"
			}
			if len(prev.attached) == 0 || prev.attached[0].what != want {
				t.Errorf("daemon group %q follows %+v", g.attached[0].what, prev.attached)
			}
		}
	}
}

// TestPlanDeviceMemory: with DeviceMemory a run adds, right after the
// AF_XDP floor, the 8 B WRITE round trip and the message rate over one QP
// into device memory, with the fast path and without, each in a group of
// its own that opens devices with regions of device memory.
func TestPlanDeviceMemory(t *testing.T) {
	cfg := Default()
	without := plan(cfg, [2]*Host{})
	cfg.DeviceMemory = true
	groups := plan(cfg, [2]*Host{})
	if len(groups) != len(without)+4 {
		t.Fatalf("%d groups, want %d", len(groups), len(without)+4)
	}
	at := -1
	for i, g := range groups {
		if slices.ContainsFunc(g.plain, func(s step) bool { return strings.HasPrefix(s.what, "AF_XDP ") }) {
			at = i
		}
	}
	var got []string
	for _, g := range groups[at+1 : at+5] {
		if !g.dm || len(g.plain) != 0 || len(g.attached) != 1 {
			t.Errorf("group %+v: want one point on device memory", g)
			continue
		}
		got = append(got, fmt.Sprintf("%s (fast %v, rtt %v)", g.attached[0].what, g.fast, g.rtt))
	}
	want := []string{
		"xdproce WRITE ping-pong 8 B into device memory, fast path (fast true, rtt true)",
		"xdproce WRITE 64 B message rate, 1 QP, into device memory, fast path (fast true, rtt false)",
		"xdproce WRITE ping-pong 8 B into device memory (fast false, rtt true)",
		"xdproce WRITE 64 B message rate, 1 QP, into device memory (fast false, rtt false)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("device-memory points\n got %q\nwant %q", got, want)
	}
}
