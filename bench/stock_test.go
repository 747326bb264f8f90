package bench

import (
	"bufio"
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bench/report"
)

// What the two contenders print, client side: stock perftest 4.5's
// ib_write_lat and ib_write_bw -D (through xdproce run) and xdproce perf's,
// rows copied from runs between two namespaces.
const (
	stockLatOut = `---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
 Dual-port       : OFF		Device         : xdp_stkA6477
 Number of qps   : 1		Transport type : IB
 Connection type : RC		Using SRQ      : OFF
 TX depth        : 1
 Mtu             : 4096[B]
 GID index       : 1
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0897 PSN 0x4fb492 RKey 0x0001cb VAddr 0x00563eb48ca000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:19:77:01
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       20000          27.92          1482.82      89.48    	       94.51       	36.06  		176.57  		578.57 
---------------------------------------------------------------------------------------
`
	goLatRow   = " 8       20000          4.05           6519.08      5.27     	       24.85       	172.07 		597.63  		2381.91\n"
	stockBWOut = ` #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      22248            0.00               695.24 		   0.011124
---------------------------------------------------------------------------------------
`
	goBWRow = " 65536      27074            0.00               846.06 		   0.013537\n"
)

func TestParsePerftestLat(t *testing.T) {
	l, err := parsePerftestLat(stockLatOut, 8)
	if err != nil {
		t.Fatal(err)
	}
	if l != (perftestLat{iters: 20000, typical: 89.48, p99: 176.57, p999: 578.57}) {
		t.Errorf("stock row read as %+v", l)
	}
	// perftest prints half round trips; the figure is the round trip.
	r := l.roundTrip(report.PerftestLibibverbs, 8)
	if r.P50us != 2*89.48 || r.P99us != 2*176.57 || r.P999us != 2*578.57 || r.Measure != report.RTT || r.Op != report.OpWrite || r.Validate() != nil {
		t.Errorf("round trip %+v (%v)", r, r.Validate())
	}
	if l, err := parsePerftestLat(goLatRow, 8); err != nil || l.typical != 5.27 || l.p999 != 2381.91 {
		t.Errorf("xdproce perf's row read as %+v, %v", l, err)
	}
	// Stock perftest's t_stdev of a run with one huge sample (its variance
	// summed in floating point comes out negative).
	nanRow := " 8       1000          28.30          182218.94      601.62   \t       1456.05     \t-nan   \t\t10377.23 \t\t182218.94\n"
	if l, err := parsePerftestLat(nanRow, 8); err != nil || l != (perftestLat{iters: 1000, typical: 601.62, p99: 10377.23, p999: 182218.94}) {
		t.Errorf("a row with t_stdev -nan read as %+v, %v", l, err)
	}
	for name, out := range map[string]string{
		"no row":                   strings.Split(stockLatOut, " 8       20000")[0],
		"another size":             strings.Replace(goLatRow, " 8 ", " 64 ", 1),
		"a bandwidth row":          stockBWOut,
		"no iterations":            strings.Replace(goLatRow, "20000", "0", 1),
		"zero typical":             strings.Replace(goLatRow, "5.27", "0.00", 1),
		"percentiles out of order": " 8       20000          4.05           6519.08      5.27     	       24.85       	172.07 		2.00  		2381.91\n",
	} {
		if l, err := parsePerftestLat(out, 8); err == nil {
			t.Errorf("%s: read %+v", name, l)
		}
	}
}

func TestParsePerftestBW(t *testing.T) {
	for out, want := range map[string]struct {
		mbps  float64
		iters int
	}{stockBWOut: {695.24, 22248}, goBWRow: {846.06, 27074}} {
		g, iters, err := parsePerftestBW(out, 65536)
		// MB/s is perftest's: 2^20 bytes per second.
		if err != nil || iters != want.iters || math.Abs(g-want.mbps*1048576*8/1e9) > 1e-9 {
			t.Errorf("%q read as %v Gbit/s, %d iterations, %v", out, g, iters, err)
		}
	}
	for name, out := range map[string]string{
		"no row":        "",
		"another size":  strings.Replace(goBWRow, "65536", "4096 ", 1),
		"a latency row": goLatRow,
		"zero average":  strings.Replace(goBWRow, "846.06", "0.00  ", 1),
	} {
		if g, _, err := parsePerftestBW(out, 65536); err == nil {
			t.Errorf("%s: read %v", name, g)
		}
	}
	// The client's row is the last of its size (-a prints one per size).
	if g, _, err := parsePerftestBW(goBWRow+stockBWOut, 65536); err != nil || math.Abs(g-695.24*1048576*8/1e9) > 1e-9 {
		t.Errorf("last row read as %v, %v", g, err)
	}
}

func TestStockArgv(t *testing.T) {
	got := strings.Join(stockArgv("/x/xdproce", report.PerftestLibibverbs, "ib_write_lat", "veth0", 19515, []string{"-s", "8"}, "198.18.0.2"), " ")
	if want := "/x/xdproce run -- ib_write_lat -d xdp_veth0 -x 1 -F -p 19515 -s 8 198.18.0.2"; got != want {
		t.Errorf("stock client: %s\nwant %s", got, want)
	}
	got = strings.Join(stockArgv("/x/xdproce", report.XdprocePerf, "ib_write_bw", "veth1", 19516, []string{"-D", "2"}, ""), " ")
	if want := "/x/xdproce perf ib_write_bw -d veth1 --own-memory -x 1 -F -p 19516 -D 2"; got != want {
		t.Errorf("xdproce perf server: %s\nwant %s", got, want)
	}
}

func TestListenerOn(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4C3B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0212C6C6:4C3C 0112C6C6:9A1E 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
`
	for port, want := range map[int]bool{0x4C3B: true, 0x4C3C: false, 18515: false} {
		if got := listenerOn(bufio.NewScanner(strings.NewReader(table)), port); got != want {
			t.Errorf("port %d: listening %v, want %v", port, got, want)
		}
	}
}

func TestMedianOfRounds(t *testing.T) {
	lat := func(c string, p50 float64) report.Result {
		return report.Result{Contender: c, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: p50, P99us: 2 * p50, P999us: 3 * p50}
	}
	bw := func(c string, g float64) report.Result {
		return report.Result{Contender: c, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: g}
	}
	got := medianOfRounds([]report.Result{
		lat(report.XdprocePerf, 20), lat(report.PerftestLibibverbs, 25), lat(report.PerftestLibibverbs, 21), lat(report.XdprocePerf, 19), lat(report.XdprocePerf, 40), lat(report.PerftestLibibverbs, 22),
		bw(report.XdprocePerf, 9), bw(report.PerftestLibibverbs, 8), bw(report.PerftestLibibverbs, 7), bw(report.XdprocePerf, 10),
	})
	want := []report.Result{lat(report.XdprocePerf, 20), lat(report.PerftestLibibverbs, 22), bw(report.XdprocePerf, 9.5), bw(report.PerftestLibibverbs, 7.5)}
	if !slices.Equal(got, want) {
		t.Errorf("medians\n%+v\nwant\n%+v", got, want)
	}
	lines := roundsSummary([]report.Result{lat(report.PerftestLibibverbs, 25), lat(report.XdprocePerf, 19), lat(report.PerftestLibibverbs, 210), lat(report.XdprocePerf, 20.5),
		bw(report.XdprocePerf, 9), bw(report.XdprocePerf, 10)})
	if got, want := strings.Join(lines, "\n"), `stock perftest over libibverbs: ib_write_lat 8 B round trip from 25.0 to 210 µs over 2 rounds, median 118
xdproce perf: ib_write_lat 8 B round trip from 19.0 to 20.5 µs over 2 rounds, median 19.8
xdproce perf: ib_write_bw 64 KiB BW average from 9.00 to 10.0 Gbit/s over 2 rounds, median 9.50`; got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
	if median(nil) != 0 || median([]float64{3, 1, 2}) != 2 {
		t.Error("median")
	}
}

// stockResults are the comparison's four figures: xdproce perf's round
// trip and bandwidth, and stock perftest's.
func stockResults(goRTT, cRTT, goBW, cBW float64) []report.Result {
	return []report.Result{
		{Contender: report.XdprocePerf, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: goRTT, P99us: goRTT + 10, P999us: goRTT + 20},
		{Contender: report.PerftestLibibverbs, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: cRTT, P99us: cRTT + 10, P999us: cRTT + 20},
		{Contender: report.XdprocePerf, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: goBW},
		{Contender: report.PerftestLibibverbs, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: cBW},
	}
}

func TestStockTargets(t *testing.T) {
	for _, c := range []struct {
		goRTT, cRTT, goBW, cBW float64
		latHeld, bwHeld        bool
	}{
		{20, 21, 10, 9, true, true}, // exactly +1 µs and 0.9×
		{20, 21.01, 10, 8.99, false, false},
		{20, 19.5, 10, 11, true, true},  // the library faster
		{180, 183, 9, 8.5, false, true}, // noise of a loaded machine decides
	} {
		extra, latHeld, latOK, ratio, bwHeld, bwOK := report.StockTargets(report.Index(stockResults(c.goRTT, c.cRTT, c.goBW, c.cBW)))
		if !latOK || !bwOK || latHeld != c.latHeld || bwHeld != c.bwHeld ||
			math.Abs(extra-(c.cRTT-c.goRTT)) > 1e-9 || math.Abs(ratio-c.cBW/c.goBW) > 1e-9 {
			t.Errorf("%+v: extra %v held %v, ratio %v held %v (figures %v %v)", c, extra, latHeld, ratio, bwHeld, latOK, bwOK)
		}
	}
	// One contender's figure alone judges nothing.
	if _, _, latOK, _, _, bwOK := report.StockTargets(report.Index(stockResults(20, 21, 10, 9)[1:3])); latOK || bwOK {
		t.Error("a target judged without both figures")
	}

	var out strings.Builder
	if err := report.WriteTargets(&out, stockResults(20, 21.5, 10, 9.5), true); err != nil {
		t.Fatal(err)
	}
	lines := squeezed(out.String())
	want := []string{
		"Targets (issues 6, 14 and 15)",
		"target measured held AF_XDP floor",
		"stock ib_write_lat 8 B over libibverbs ≤ xdproce perf + 1 µs per round trip, medians (issue 15) +1.50 µs (21.50 against 20.00 µs) no -",
		"stock ib_write_bw 64 KiB over libibverbs ≥ 0.9× xdproce perf (issue 15) 0.95× (9.50 against 10.00 Gbit/s) yes -",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("targets:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestWriteTablesStock(t *testing.T) {
	var out strings.Builder
	if err := report.WriteTables(&out, stockResults(20, 20.6, 10, 9.5)); err != nil {
		t.Fatal(err)
	}
	want := `
Stock perftest over xdproce's libibverbs (xdproce run) vs xdproce perf, each host's program on its daemon (xdproce up), medians of
alternating rounds (round trips in µs: perftest's t_typical, 99% and 99.9% percentiles doubled, for it prints half round trips)
point                                               xdproce perf        stock perftest      stock − Go / stock ÷ Go
ib_write_lat 8 B: round trip, median / p99 / p99.9  20.0 / 30.0 / 40.0  20.6 / 30.6 / 40.6  +0.60 µs
ib_write_bw 64 KiB: BW average, Gbit/s              10.0                9.50                0.95×
Both register memory of their own (stock perftest ibv_reg_mr of its buffers, xdproce perf --own-memory),
which the daemon reaches with process_vm_readv/writev: what differs is the C library's posts and polls.
`
	// Only this table: the others have none of the comparison's figures.
	if out.String() != want {
		t.Errorf("tables:\n%s\nwant:\n%s", out.String(), want)
	}
	// With the daemon column, what regions of the client's own memory cost there.
	out.Reset()
	if err := report.WriteTables(&out, append(stockResults(20, 20.6, 10, 9.5),
		report.Result{Contender: report.XdproceDaemon, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: 10},
		report.Result{Contender: report.XdproceDaemonOwnMemory, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: 8.5})); err != nil ||
		!strings.Contains(out.String(), "(that memory path itself: the daemon column's WRITE 64 KiB at 0.85× of shared regions in this run).") {
		t.Errorf("tables with the daemon column:\n%s (%v)", out.String(), err)
	}
	// Nothing of it without the comparison's figures.
	out.Reset()
	if err := report.WriteTables(&out, sample()); err != nil || strings.Contains(out.String(), "Stock perftest") {
		t.Errorf("tables without the comparison:\n%s (%v)", out.String(), err)
	}
}

func TestStockJSON(t *testing.T) {
	var buf bytes.Buffer
	rs := stockResults(20, 21, 10, 9)
	if err := report.WriteJSON(&buf, rs); err != nil {
		t.Fatal(err)
	}
	got, err := report.ReadJSON(&buf)
	if err != nil || !slices.Equal(got, rs) {
		t.Errorf("read back %+v, %v", got, err)
	}
	for _, c := range []string{report.PerftestLibibverbs, report.XdprocePerf} {
		if err := (report.Result{Contender: c, Measure: report.MsgRate, Op: report.OpWrite, Size: 64, QPs: 1, MmsgS: 1}).Validate(); err == nil {
			t.Errorf("%s has a message rate", c)
		}
		if err := (report.Result{Contender: c, Measure: report.Bandwidth, Op: report.OpRead, Size: 64, GbitS: 1}).Validate(); err == nil {
			t.Errorf("%s has READ bandwidth", c)
		}
	}
}

// TestPlanStock checks the comparison's place and shape in a run: two
// groups at the end (round trip, then bandwidth), each point Rounds times
// per contender with the contenders alternating who goes first, and only
// for the sizes the run measures.
func TestPlanStock(t *testing.T) {
	cfg := Default()
	if groups := plan(cfg, [2]*Host{}); slices.ContainsFunc(groups, func(g group) bool { return g.stock != nil }) {
		t.Fatal("a run without Config.Stock compares stock perftest")
	}
	cfg.Stock = &Stock{Exe: "/x/xdproce", LibDir: "/x/lib"}
	groups := plan(cfg, [2]*Host{})
	n := len(groups)
	if n != len(plan(Default(), [2]*Host{}))+2 {
		t.Fatalf("%d groups", n)
	}
	lat, bw := groups[n-2], groups[n-1]
	if lat.stock == nil || !lat.rtt || bw.stock == nil || bw.rtt || len(lat.attached)+len(bw.attached) != 0 {
		t.Fatalf("stock groups %+v %+v", lat, bw)
	}
	for _, g := range []group{lat, bw} {
		var order []string
		for _, s := range g.plain {
			order = append(order, strings.SplitN(s.what, ":", 2)[0])
		}
		if got, want := strings.Join(order, ", "),
			"xdproce perf, stock perftest over libibverbs, stock perftest over libibverbs, xdproce perf, xdproce perf, stock perftest over libibverbs"; got != want {
			t.Errorf("order %s\nwant %s", got, want)
		}
	}
	if !strings.Contains(lat.plain[0].what, "ib_write_lat 8 B, round 1 of 3") || !strings.Contains(bw.plain[5].what, "ib_write_bw 64 KiB, round 3 of 3") {
		t.Errorf("points %q, %q", lat.plain[0].what, bw.plain[5].what)
	}
	s := cfg.Stock.withDefaults(cfg)
	if s.Rounds != 3 || s.LatIters != 5000 || s.BWSeconds != 2 || s.Port != 19515 {
		t.Errorf("defaults %+v", s)
	}
	q := Quick()
	if s := cfg.Stock.withDefaults(q); s.LatIters != 1000 || s.BWSeconds != 1 {
		t.Errorf("quick defaults %+v", s)
	}
	cfg.Sizes, cfg.LatSizes = []int{4096}, []int{4096}
	if g := stockGroups(cfg, [2]*Host{}); len(g) != 0 {
		t.Errorf("%d stock groups without 8 B round trips or 64 KiB streams", len(g))
	}
	cfg.LatSizes = []int{8}
	if g := stockGroups(cfg, [2]*Host{}); len(g) != 1 || !g[0].rtt {
		t.Errorf("stock groups for 8 B round trips only: %+v", g)
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"0123", "4567", "89"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatal(n, err)
		}
	}
	if got := b.String(); got != "23456789" {
		t.Errorf("kept %q", got)
	}
	if got := tail("abcdef", 3); got != "…def" {
		t.Errorf("tail %q", got)
	}
}

// estimate is how long plan's run of cfg takes by arithmetic: each point
// its group's estimate or Warmup+Duration, one second per group for
// opening and closing the devices (or starting and stopping the daemons).
func estimate(cfg Config) (time.Duration, int) {
	var est time.Duration
	points := 0
	for _, g := range plan(cfg, [2]*Host{}) {
		per := cfg.Warmup + cfg.Duration
		if g.est > 0 {
			per = g.est
		}
		n := len(g.plain) + len(g.attached)
		points += n
		est += time.Duration(n)*per + time.Second
	}
	return est, points
}
