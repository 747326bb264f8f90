package bench

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bench/report"
)

// daemonModesResults are the figures of issue 34's comparison: stock
// ib_write_lat through default and busy-polling daemons, an idle default
// daemon's CPU, and the in-process WRITE ping-pong of the same run.
func daemonModesResults(def, busy, idlePct float64) []report.Result {
	return []report.Result{
		{Contender: report.Xdproce, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: 11, P99us: 20, P999us: 30},
		{Contender: report.XdproceDaemon, Measure: report.IdleCPU, Op: report.OpIdle, CPUPct: idlePct},
		{Contender: report.PerftestDefaultDaemons, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: def, P99us: def + 10, P999us: def + 20},
		{Contender: report.PerftestBusyDaemons, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: busy, P99us: busy + 10, P999us: busy + 20},
	}
}

// TestPlanDaemonModes: the comparison runs only when asked, right after
// the stock round trips, each round once per mode with the modes
// alternating who goes first, and only its first default round measures
// the daemons idle.
func TestPlanDaemonModes(t *testing.T) {
	cfg := Default()
	cfg.Stock = &Stock{Exe: "/x/xdproce", LibDir: "/x/lib"}
	without := plan(cfg, [2]*Host{})
	if slices.ContainsFunc(without, func(g group) bool { return g.ownDaemons }) {
		t.Fatal("daemon modes compared without Stock.DaemonModes")
	}
	cfg.Stock.DaemonModes = true
	groups := plan(cfg, [2]*Host{})
	if len(groups) != len(without)+1 {
		t.Fatalf("%d groups, want %d", len(groups), len(without)+1)
	}
	g := groups[len(groups)-2] // before the stock bandwidth group
	if !g.ownDaemons || g.stock == nil || !g.rtt || len(g.attached) != 0 {
		t.Fatalf("daemon-modes group %+v", g)
	}
	var order []string
	for _, s := range g.plain {
		order = append(order, strings.Fields(strings.SplitN(s.what, " through ", 2)[1])[0])
	}
	if got, want := strings.Join(order, ", "), "default, busy-polling, busy-polling, default, default, busy-polling"; got != want {
		t.Errorf("modes in order %s, want %s", got, want)
	}
	if !strings.Contains(g.plain[0].what, "ib_write_lat 8 B through default daemons, round 1 of 3") {
		t.Errorf("first point %q", g.plain[0].what)
	}
	if s := cfg.Stock.withDefaults(cfg); s.IdleWindow != 3*time.Second {
		t.Errorf("idle window %v by default", s.IdleWindow)
	}
	// The idle window is part of the run's estimate.
	short := *cfg.Stock
	short.IdleWindow = -1
	cfg2 := cfg
	cfg2.Stock = &short
	long, _ := estimate(cfg)
	noIdle, _ := estimate(cfg2)
	if d := long - noIdle; d < 2*time.Second || d > 4*time.Second {
		t.Errorf("the idle window adds %v to the estimate, want about 3 s", d)
	}
	cfg.LatSizes = []int{4096}
	if slices.ContainsFunc(plan(cfg, [2]*Host{}), func(g group) bool { return g.ownDaemons }) {
		t.Error("daemon modes compared without 8 B round trips")
	}
}

func TestParseSchedstat(t *testing.T) {
	if d, err := parseSchedstat([]byte("123456789 5000 42\n")); err != nil || d != 123456789 {
		t.Errorf("read %v, %v", d, err)
	}
	for _, bad := range []string{"", "1 2", "x 2 3", "-1 2 3", "1 2 3 4"} {
		if d, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("%q read as %v", bad, d)
		}
	}
}

func TestWriteTablesDaemonModes(t *testing.T) {
	var out strings.Builder
	if err := report.WriteTables(&out, daemonModesResults(19.5, 18, 0.4)); err != nil {
		t.Fatal(err)
	}
	want := `
Stock ib_write_lat 8 B over libibverbs through daemons (xdproce up) with their defaults vs busy-polling (--busy-poll),
a fresh pair of daemons per round, medians of alternating rounds (round trips in µs: t_typical, 99%, 99.9% doubled)
path                                         round trip, median / p99 / p99.9  default − this
default daemons                              19.5 / 29.5 / 39.5                -
busy-polling daemons                         18.0 / 28.0 / 38.0                +1.50 µs
in-process WRITE ping-pong (xdproce, above)  11.0 / 20.0 / 30.0                +8.50 µs
An idle default daemon: 0.40% of a CPU (user+system over its first seconds with no client).
`
	if got := out.String(); !strings.HasSuffix(got, want) {
		t.Errorf("tables:\n%s\nwant at the end:\n%s", got, want)
	}
	out.Reset()
	if err := report.WriteTables(&out, sample()); err != nil || strings.Contains(out.String(), "busy-polling daemons") {
		t.Errorf("tables without the comparison:\n%s (%v)", out.String(), err)
	}
}

func TestDaemonModesTargets(t *testing.T) {
	for _, c := range []struct {
		def, busy, idle   float64
		rttHeld, idleHeld string
	}{
		{20, 18, 0.99, "yes", "yes"}, // exactly +2 µs, just under 1%
		{20.01, 18, 1, "no", "no"},
		{236, 5900, 0.2, "yes", "yes"}, // busy-polling daemons losing on a crowded host
	} {
		var out strings.Builder
		if err := report.WriteTargets(&out, daemonModesResults(c.def, c.busy, c.idle), true); err != nil {
			t.Fatal(err)
		}
		var rtt, idle string
		for _, l := range strings.Split(out.String(), "\n") {
			f := strings.Fields(l)
			switch {
			case strings.HasPrefix(l, "stock ib_write_lat 8 B through default daemons"):
				rtt = f[len(f)-2]
			case strings.HasPrefix(l, "an idle daemon < 1% of a CPU"):
				idle = f[len(f)-2]
			}
		}
		if rtt != c.rttHeld || idle != c.idleHeld {
			t.Errorf("%+v: held %q and %q in\n%s", c, rtt, idle, out.String())
		}
	}
}

func TestIdleCPUJSON(t *testing.T) {
	var buf bytes.Buffer
	rs := daemonModesResults(20, 18, 0.4)
	if err := report.WriteJSON(&buf, rs); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Results[1]; len(got) != 5 || got["contender"] != report.XdproceDaemon || got["measure"] != report.IdleCPU || got["op"] != report.OpIdle || got["cpu_percent"] != 0.4 || got["size"] != 0.0 {
		t.Errorf("idle figure written as %v", got)
	}
	back, err := report.ReadJSON(bytes.NewReader(buf.Bytes()))
	if err != nil || !slices.Equal(back, rs) {
		t.Errorf("read back %+v, %v", back, err)
	}
	if err := (report.Result{Contender: report.Xdproce, Measure: report.IdleCPU, Op: report.OpIdle, CPUPct: 1}).Validate(); err == nil {
		t.Error("an in-process device has an idle-CPU figure")
	}
	if _, err := report.ReadJSON(strings.NewReader(`{"results":[{"contender":"xdproce_daemon","measure":"idle_cpu","op":"idle","size":0,"cpu_percent":1,"gbit_s":2}]}`)); err == nil {
		t.Error("an idle figure with a bandwidth read")
	}
}
