package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Key finds one figure.
type Key struct {
	contender string
	attached  bool
	measure   string
	op        string
	size, qps int
}

func KeyOf(r Result) Key {
	return Key{r.Contender, r.XDPAttached, r.Measure, r.Op, r.Size, r.QPs}
}

// figures indexes results for the tables.
type figures map[Key]Result

func Index(results []Result) figures {
	f := make(figures, len(results))
	for _, r := range results {
		f[KeyOf(r)] = r
	}
	return f
}

// sizesOf lists the sizes that have figures of a measure from xdproce or
// TCP, ascending (the AF_XDP floor has its own sizes, and the comparison
// of stock perftest with xdproce perf its own table).
func sizesOf(results []Result, measure string) []int {
	var out []int
	for _, r := range results {
		if r.Measure == measure && r.Contender != AFXDP && r.Contender != PerftestLibibverbs && r.Contender != XdprocePerf &&
			!slices.Contains(out, r.Size) {
			out = append(out, r.Size)
		}
	}
	slices.Sort(out)
	return out
}

// FormatRatio prints a/b as "0.42×", or "-" when either is missing.
func FormatRatio(a, b float64, okA, okB bool) string {
	if !okA || !okB || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// FormatValue prints a figure with three significant digits, or "-".
func FormatValue(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// WriteTables prints one table per measure present in results, each with the
// ratio xdproce/TCP (TCP without an XDP program attached).
func WriteTables(w io.Writer, results []Result) error {
	f := Index(results)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	get := func(k Key, field func(Result) float64) (float64, bool) {
		r, ok := f[k]
		if !ok {
			return 0, false
		}
		return field(r), true
	}
	title := func(s string) {
		tw.Flush()
		fmt.Fprintf(w, "\n%s\n", s)
	}
	xdpOps := []string{OpWrite, OpSend, OpRead}

	perSize := func(measure string, field func(Result) float64, heading string) {
		sizes := sizesOf(results, measure)
		if len(sizes) == 0 {
			return
		}
		title(heading)
		row("size", "WRITE", "SEND", "READ", "TCP", "TCP+XDP", "WRITE/TCP", "SEND/TCP", "READ/TCP")
		for _, s := range sizes {
			cells := []string{FormatSize(s)}
			var x [3]float64
			var okX [3]bool
			for i, op := range xdpOps {
				x[i], okX[i] = get(Key{Xdproce, false, measure, op, s, 0}, field)
				cells = append(cells, FormatValue(x[i], okX[i]))
			}
			t, okT := get(Key{TCP, false, measure, OpStream, s, 0}, field)
			tx, okTX := get(Key{TCP, true, measure, OpStream, s, 0}, field)
			cells = append(cells, FormatValue(t, okT), FormatValue(tx, okTX))
			for i := range xdpOps {
				cells = append(cells, FormatRatio(x[i], t, okX[i], okT))
			}
			row(cells...)
		}
	}
	perSize(Bandwidth, func(r Result) float64 { return r.GbitS },
		"Bandwidth, Gbit/s (xdproce: RC, one QP; TCP: one stream; TCP+XDP: xdproce's program attached; ratio: higher is better)")
	for _, r := range results {
		if r.Contender == AFXDP && r.Measure == Bandwidth {
			tw.Flush()
			c, okC := f[Key{AFXDP, false, CPUPerGB, OpFrame, r.Size, 0}]
			fmt.Fprintf(w, "AF_XDP floor (raw %s frames one way, no transport): %s Gbit/s, %s CPU s/GB\n",
				FormatSize(r.Size), FormatValue(r.GbitS, true), FormatValue(c.CPUSPerGB, okC))
		}
	}

	if sizes := sizesOf(results, RTT); len(sizes) > 0 {
		title("Round trip, µs: median / p99 / p99.9 (ratio of medians: lower is better)")
		floorRTT := slices.ContainsFunc(results, func(r Result) bool { return r.Contender == AFXDP && r.Measure == RTT })
		head := []string{"exchange", "size", "xdproce", "TCP", "TCP+XDP", "xdproce/TCP"}
		if floorRTT {
			head = append(head, "AF_XDP floor")
		}
		row(head...)
		lat := func(k Key) (string, float64, bool) {
			r, ok := f[k]
			if !ok {
				return "-", 0, false
			}
			return fmt.Sprintf("%s / %s / %s", FormatValue(r.P50us, true), FormatValue(r.P99us, true), FormatValue(r.P999us, true)), r.P50us, true
		}
		for _, op := range []string{OpWrite, OpSend} {
			for _, s := range sizes {
				x, xm, okX := lat(Key{Xdproce, false, RTT, op, s, 0})
				t, tm, okT := lat(Key{TCP, false, RTT, OpPingPong, s, 0})
				tx, _, _ := lat(Key{TCP, true, RTT, OpPingPong, s, 0})
				name := "WRITE (poll memory)"
				if op == OpSend {
					name = "SEND/RECV"
				}
				cells := []string{name, FormatSize(s), x, t, tx, FormatRatio(xm, tm, okX, okT)}
				if floorRTT {
					fl, _, _ := lat(Key{AFXDP, false, RTT, OpFrame, s, 0})
					cells = append(cells, fl)
				}
				row(cells...)
			}
		}
	}

	var qps []int
	msgSize := 0
	for _, r := range results {
		if r.Measure == MsgRate && !slices.Contains(qps, r.QPs) {
			qps = append(qps, r.QPs)
			msgSize = r.Size
		}
	}
	if len(qps) > 0 {
		slices.Sort(qps)
		title(fmt.Sprintf("Message rate, %s messages, million/s (xdproce: WRITE over N QPs; TCP: N streams)", FormatSize(msgSize)))

		row("N", "xdproce", "TCP", "xdproce/TCP")
		for _, n := range qps {
			x, okX := get(Key{Xdproce, false, MsgRate, OpWrite, msgSize, n}, func(r Result) float64 { return r.MmsgS })
			t, okT := get(Key{TCP, false, MsgRate, OpStream, msgSize, n}, func(r Result) float64 { return r.MmsgS })
			row(fmt.Sprint(n), FormatValue(x, okX), FormatValue(t, okT), FormatRatio(x, t, okX, okT))
		}
		if r, ok := f[Key{AFXDP, false, MsgRate, OpFrame, msgSize, 1}]; ok {
			tw.Flush()
			fmt.Fprintf(w, "AF_XDP floor (raw %s frames one way, no transport): %s million/s\n", FormatSize(msgSize), FormatValue(r.MmsgS, true))
		}
	}

	perSize(CPUPerGB, func(r Result) float64 { return r.CPUSPerGB },
		"CPU seconds per GB moved (process user+system plus all softirq time; ratio: lower is better)")
	tw.Flush()
	if err := writeStockTable(w, f); err != nil {
		return err
	}
	if err := writeDMTable(w, f); err != nil {
		return err
	}
	return writeDaemonLatTable(w, f)
}

// writeDMTable prints issue 34's device-memory points, if results have
// them: host memory, device memory, and device memory with the XDP fast
// path, each against the AF_XDP floor of the same run.
func writeDMTable(w io.Writer, f figures) error {
	var msgSize int
	for k := range f {
		if (k.contender == XdproceDM || k.contender == XdproceDMFast) && k.measure == MsgRate {
			msgSize = k.size
		}
	}
	_, rtt := f[Key{XdproceDMFast, false, RTT, OpWrite, 8, 0}]
	if !rtt && msgSize == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nDevice memory (issue 34): 8 B WRITE round trip (median / p99 / p99.9, µs) and WRITE message rate over one QP (million/s),")
	fmt.Fprintln(w, "regions in host memory, in device memory, and in device memory with the XDP responder fast path (docs/fastpath.md)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	trip := func(r Result, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%s / %s / %s", FormatValue(r.P50us, true), FormatValue(r.P99us, true), FormatValue(r.P999us, true))
	}
	fmt.Fprintln(tw, "memory\t8 B WRITE round trip\t÷ floor\tWRITE message rate\t÷ floor")
	fl, okFL := f[Key{AFXDP, false, RTT, OpFrame, 8, 0}]
	fr, okFR := f[Key{AFXDP, false, MsgRate, OpFrame, msgSize, 1}]
	for _, c := range []struct{ name, contender string }{
		{"host", Xdproce}, {"device", XdproceDM}, {"device, fast path", XdproceDMFast},
	} {
		lat, okL := f[Key{c.contender, false, RTT, OpWrite, 8, 0}]
		rate, okR := f[Key{c.contender, false, MsgRate, OpWrite, msgSize, 1}]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.name, trip(lat, okL), FormatRatio(lat.P50us, fl.P50us, okL, okFL),
			FormatValue(rate.MmsgS, okR), FormatRatio(rate.MmsgS, fr.MmsgS, okR, okFR))
	}
	if okFL || okFR {
		fmt.Fprintf(tw, "AF_XDP floor (frames)\t%s\t-\t%s\t-\n", trip(fl, okFL), FormatValue(fr.MmsgS, okFR))
	}
	return tw.Flush()
}

// writeDaemonLatTable prints issue 34's comparison, if results have it:
// stock ib_write_lat through daemons with their defaults against
// busy-polling daemons, beside the in-process busy-polled WRITE ping-pong
// of the same run, and what an idle default daemon costs.
func writeDaemonLatTable(w io.Writer, f figures) error {
	def, okD := f[Key{PerftestDefaultDaemons, false, RTT, OpWrite, StockLatSize, 0}]
	busy, okB := f[Key{PerftestBusyDaemons, false, RTT, OpWrite, StockLatSize, 0}]
	if !okD || !okB {
		return nil
	}
	fmt.Fprintln(w, "\nStock ib_write_lat 8 B over libibverbs through daemons (xdproce up) with their defaults vs busy-polling (--busy-poll),")
	fmt.Fprintln(w, "a fresh pair of daemons per round, medians of alternating rounds (round trips in µs: t_typical, 99%, 99.9% doubled)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	trip := func(r Result) string {
		return fmt.Sprintf("%s / %s / %s", FormatValue(r.P50us, true), FormatValue(r.P99us, true), FormatValue(r.P999us, true))
	}
	fmt.Fprintln(tw, "path\tround trip, median / p99 / p99.9\tdefault − this")
	fmt.Fprintf(tw, "default daemons\t%s\t-\n", trip(def))
	fmt.Fprintf(tw, "busy-polling daemons\t%s\t%+.2f µs\n", trip(busy), def.P50us-busy.P50us)
	if x, ok := f[Key{Xdproce, false, RTT, OpWrite, StockLatSize, 0}]; ok {
		fmt.Fprintf(tw, "in-process WRITE ping-pong (xdproce, above)\t%s\t%+.2f µs\n", trip(x), def.P50us-x.P50us)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if idle, ok := f[Key{XdproceDaemon, false, IdleCPU, OpIdle, 0, 0}]; ok {
		if _, err := fmt.Fprintf(w, "An idle default daemon: %.2f%% of a CPU (user+system over its first seconds with no client).\n", idle.CPUPct); err != nil {
			return err
		}
	}
	return nil
}

// writeStockTable prints issue 15's comparison, if results have it: stock
// perftest over xdproce's libibverbs against xdproce perf.
func writeStockTable(w io.Writer, f figures) error {
	lat, latOK := stockPair(f, RTT, StockLatSize)
	bw, bwOK := stockPair(f, Bandwidth, StockBWSize)
	if !latOK && !bwOK {
		return nil
	}
	fmt.Fprintln(w, "\nStock perftest over xdproce's libibverbs (xdproce run) vs xdproce perf, each host's program on its daemon (xdproce up), medians of")
	fmt.Fprintln(w, "alternating rounds (round trips in µs: perftest's t_typical, 99% and 99.9% percentiles doubled, for it prints half round trips)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	row("point", "xdproce perf", "stock perftest", "stock − Go / stock ÷ Go")
	if latOK {
		trip := func(r Result) string {
			return fmt.Sprintf("%s / %s / %s", FormatValue(r.P50us, true), FormatValue(r.P99us, true), FormatValue(r.P999us, true))
		}
		row(fmt.Sprintf("ib_write_lat %s: round trip, median / p99 / p99.9", FormatSize(StockLatSize)),
			trip(lat[0]), trip(lat[1]), fmt.Sprintf("%+.2f µs", lat[1].P50us-lat[0].P50us))
	}
	if bwOK {
		row(fmt.Sprintf("ib_write_bw %s: BW average, Gbit/s", FormatSize(StockBWSize)),
			FormatValue(bw[0].GbitS, true), FormatValue(bw[1].GbitS, true), FormatRatio(bw[1].GbitS, bw[0].GbitS, true, true))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	note := "Both register memory of their own (stock perftest ibv_reg_mr of its buffers, xdproce perf --own-memory),\n" +
		"which the daemon reaches with process_vm_readv/writev: what differs is the C library's posts and polls"
	own, okO := f[Key{XdproceDaemonOwnMemory, false, Bandwidth, OpWrite, StockBWSize, 0}]
	shared, okS := f[Key{XdproceDaemon, false, Bandwidth, OpWrite, StockBWSize, 0}]
	if okO && okS && shared.GbitS > 0 {
		note += fmt.Sprintf(" (that memory path itself: the daemon column's WRITE %s at %.2f× of shared regions in this run)", FormatSize(StockBWSize), own.GbitS/shared.GbitS)
	}
	_, err := fmt.Fprintln(w, note+".")
	return err
}

// Issue 34's bounds on a default daemon: its stock ib_write_lat round trip
// against busy-polling daemons', and its CPU when idle (percent of a CPU).
const (
	daemonMaxExtraRTTus = 2.0
	daemonMaxIdlePct    = 1.0
)

// stockPair finds the figures of issue 15's comparison for one measure:
// xdproce perf's, then stock perftest's over the library; ok if both are
// there.
func stockPair(f figures, measure string, size int) ([2]Result, bool) {
	g, okG := f[Key{XdprocePerf, false, measure, OpWrite, size, 0}]
	c, okC := f[Key{PerftestLibibverbs, false, measure, OpWrite, size, 0}]
	return [2]Result{g, c}, okG && okC
}

// Issue 15's bounds on what the C library may cost against the Go path:
// per round trip, and as a fraction of the bandwidth.
const (
	stockMaxExtraRTTus = 1.0
	stockMinBWRatio    = 0.9
)

// StockTargets judges issue 15's comparison: the extra round trip of
// stock ib_write_lat (median) over xdproce perf's, in µs, and the ratio
// of stock ib_write_bw's BW average to xdproce perf's; ok says the figures
// are there.
func StockTargets(f figures) (extraUS float64, latHeld, latOK bool, ratio float64, bwHeld, bwOK bool) {
	if lat, ok := stockPair(f, RTT, StockLatSize); ok {
		extraUS, latOK = lat[1].P50us-lat[0].P50us, true
		latHeld = extraUS <= stockMaxExtraRTTus
	}
	if bw, ok := stockPair(f, Bandwidth, StockBWSize); ok && bw[0].GbitS > 0 {
		ratio, bwOK = bw[1].GbitS/bw[0].GbitS, true
		bwHeld = ratio >= stockMinBWRatio
	}
	return
}

// WriteTargets prints issue 6's targets with what results show for each,
// beside what the AF_XDP floor of the same run reaches on the same terms (no
// transport can beat it, so a target the floor misses is ruled out by the
// link and the kernel's AF_XDP path, not by xdproce); a target whose figures
// are missing from the run is left out. rttBusy says whether the round trips
// were measured busy-polling, as the target asks.
func WriteTargets(w io.Writer, results []Result, rttBusy bool) error {
	f := Index(results)
	if _, err := fmt.Fprintln(w, "\nTargets (issues 6, 14 and 15)"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmeasured\theld\tAF_XDP floor")
	held := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	// floor finds the AF_XDP figure of a measure (at the largest size for
	// bandwidth and CPU: the full frames).
	floor := func(measure string, size int) (Result, bool) {
		var best Result
		found := false
		for _, r := range results {
			if r.Contender == AFXDP && r.Measure == measure && (size == 0 || r.Size == size) && (!found || r.Size > best.Size) {
				best, found = r, true
			}
		}
		return best, found
	}
	ratio := func(r Result, ok bool, num func(Result) float64, den float64) string {
		if !ok || den <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", num(r)/den)
	}
	const big = 64 << 10
	if x, ok := f[Key{Xdproce, false, Bandwidth, OpWrite, big, 0}]; ok {
		if t, ok := f[Key{TCP, false, Bandwidth, OpStream, big, 0}]; ok && t.GbitS > 0 {
			r := x.GbitS / t.GbitS
			fl, okF := floor(Bandwidth, 0)
			fmt.Fprintf(tw, "RC WRITE 64 KiB bandwidth ≥ 1.0× TCP\t%.2f×\t%s\t%s\n", r, held(r >= 1),
				ratio(fl, okF, func(r Result) float64 { return r.GbitS }, t.GbitS))
		}
	}
	if x, ok := f[Key{Xdproce, false, RTT, OpWrite, 8, 0}]; ok {
		if t, ok := f[Key{TCP, false, RTT, OpPingPong, 8, 0}]; ok && t.P50us > 0 {
			r := x.P50us / t.P50us
			how := "busy-poll"
			if !rttBusy {
				how = "target busy-polls, this run did not"
			}
			fl, okF := floor(RTT, 8)
			fmt.Fprintf(tw, "8 B WRITE round trip (%s) ≤ 0.35× TCP ping-pong, medians\t%.2f×\t%s\t%s\n", how, r, held(r <= 0.35),
				ratio(fl, okF, func(r Result) float64 { return r.P50us }, t.P50us))
		}
	}
	best, n := 0.0, 0
	for _, r := range results {
		if r.Contender == Xdproce && r.Measure == MsgRate && r.Size == 64 && r.MmsgS > best {
			best, n = r.MmsgS, r.QPs
		}
	}
	if n > 0 {
		fl := "-"
		if r, ok := floor(MsgRate, 64); ok {
			fl = fmt.Sprintf("%.3f M/s", r.MmsgS)
		}
		fmt.Fprintf(tw, "64 B WRITE message rate ≥ 1 million/s\t%.3f M/s (%d QPs)\t%s\t%s\n", best, n, held(best >= 1), fl)
	}
	if d, ok := f[Key{XdproceDaemon, false, Bandwidth, OpWrite, big, 0}]; ok {
		if x, ok := f[Key{Xdproce, false, Bandwidth, OpWrite, big, 0}]; ok && x.GbitS > 0 {
			r := d.GbitS / x.GbitS
			fmt.Fprintf(tw, "WRITE 64 KiB through the daemon ≥ 0.9× in-process (issue 14)\t%.2f× (%.2f Gbit/s)\t%s\t-\n", r, d.GbitS, held(r >= 0.9))
		}
	}
	if d, ok := f[Key{XdproceDaemonOwnMemory, false, Bandwidth, OpWrite, big, 0}]; ok {
		if x, ok := f[Key{Xdproce, false, Bandwidth, OpWrite, big, 0}]; ok && x.GbitS > 0 {
			fmt.Fprintf(tw, "  the same from and into the client's own memory (process_vm_readv/writev)\t%.2f× (%.2f Gbit/s)\t-\t-\n", d.GbitS/x.GbitS, d.GbitS)
		}
	}
	if d, ok := f[Key{XdproceDaemon, false, RTT, OpWrite, 8, 0}]; ok {
		if x, ok := f[Key{Xdproce, false, RTT, OpWrite, 8, 0}]; ok {
			diff := d.P50us - x.P50us
			fmt.Fprintf(tw, "8 B WRITE round trip through the daemon ≤ in-process + 2 µs, medians (issue 14)\t%+.2f µs (%.2f µs)\t%s\t-\n", diff, d.P50us, held(diff <= 2))
		}
	}
	if l, ok := f[Key{XdproceLoopback, false, Bandwidth, OpWrite, big, 0}]; ok {
		if x, ok := f[Key{Xdproce, false, Bandwidth, OpWrite, big, 0}]; ok && x.GbitS > 0 {
			r := l.GbitS / x.GbitS
			fmt.Fprintf(tw, "WRITE 64 KiB over loopback (one device) > over the link (issue 32)\t%.2f× (%.2f Gbit/s)\t%s\t-\n", r, l.GbitS, held(r > 1))
		}
	}
	if l, ok := f[Key{XdproceLoopback, false, RTT, OpWrite, 8, 0}]; ok {
		if x, ok := f[Key{Xdproce, false, RTT, OpWrite, 8, 0}]; ok && x.P50us > 0 {
			r := l.P50us / x.P50us
			fmt.Fprintf(tw, "8 B WRITE round trip over loopback < over the link, medians (issue 32)\t%.2f× (%.2f µs)\t%s\t-\n", r, l.P50us, held(r < 1))
		}
	}
	extra, latHeld, latOK, bwRatio, bwHeld, bwOK := StockTargets(f)
	if latOK {
		lat, _ := stockPair(f, RTT, StockLatSize)
		fmt.Fprintf(tw, "stock ib_write_lat 8 B over libibverbs ≤ xdproce perf + 1 µs per round trip, medians (issue 15)\t%+.2f µs (%.2f against %.2f µs)\t%s\t-\n",
			extra, lat[1].P50us, lat[0].P50us, held(latHeld))
	}
	if bwOK {
		bw, _ := stockPair(f, Bandwidth, StockBWSize)
		fmt.Fprintf(tw, "stock ib_write_bw 64 KiB over libibverbs ≥ 0.9× xdproce perf (issue 15)\t%.2f× (%.2f against %.2f Gbit/s)\t%s\t-\n",
			bwRatio, bw[1].GbitS, bw[0].GbitS, held(bwHeld))
	}
	def, okD := f[Key{PerftestDefaultDaemons, false, RTT, OpWrite, StockLatSize, 0}]
	busy, okB := f[Key{PerftestBusyDaemons, false, RTT, OpWrite, StockLatSize, 0}]
	if okD && okB {
		diff := def.P50us - busy.P50us
		fmt.Fprintf(tw, "stock ib_write_lat 8 B through default daemons ≤ busy-polling daemons + 2 µs, medians (issue 34)\t%+.2f µs (%.2f against %.2f µs)\t%s\t-\n",
			diff, def.P50us, busy.P50us, held(diff <= daemonMaxExtraRTTus))
	}
	if idle, ok := f[Key{XdproceDaemon, false, IdleCPU, OpIdle, 0, 0}]; ok {
		fmt.Fprintf(tw, "an idle daemon < 1%% of a CPU (issue 34)\t%.2f%%\t%s\t-\n", idle.CPUPct, held(idle.CPUPct < daemonMaxIdlePct))
	}
	if x, ok := f[Key{XdproceDMFast, false, RTT, OpWrite, 8, 0}]; ok {
		if fl, okF := floor(RTT, 8); okF && fl.P50us > 0 {
			r := x.P50us / fl.P50us
			fmt.Fprintf(tw, "8 B WRITE round trip on device memory (fast path) ≤ 1.0× the AF_XDP floor, medians (issue 34)\t%.2f× (%.2f µs)\t%s\t-\n", r, x.P50us, held(r <= 1))
		}
	}
	for _, r := range results {
		if r.Contender == XdproceDMFast && r.Measure == MsgRate {
			if fl, okF := floor(MsgRate, r.Size); okF && fl.MmsgS > 0 {
				q := r.MmsgS / fl.MmsgS
				fmt.Fprintf(tw, "%s WRITE message rate on device memory (fast path) ≥ 1.0× the AF_XDP floor's frame rate (issue 34)\t%.2f× (%.3f M/s)\t%s\t-\n", FormatSize(r.Size), q, r.MmsgS, held(q >= 1))
			}
		}
	}
	if x, ok := f[Key{Xdproce, false, CPUPerGB, OpWrite, big, 0}]; ok {
		if t, ok := f[Key{TCP, false, CPUPerGB, OpStream, big, 0}]; ok && t.CPUSPerGB > 0 {
			r := x.CPUSPerGB / t.CPUSPerGB
			fl, okF := floor(CPUPerGB, 0)
			fmt.Fprintf(tw, "CPU per GB ≤ TCP's (RC WRITE 64 KiB)\t%.2f×\t%s\t%s\n", r, held(r <= 1),
				ratio(fl, okF, func(r Result) float64 { return r.CPUSPerGB }, t.CPUSPerGB))
		}
	}
	return tw.Flush()
}

// The stock tools the comparison runs, and the one point of each.
const (
	StockLatTool = "ib_write_lat"
	StockBWTool  = "ib_write_bw"
	StockLatSize = 8
	StockBWSize  = 64 << 10
)
