package bench

import (
	"slices"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/bench/report"
)

func TestFormatRatio(t *testing.T) {
	for _, c := range []struct {
		a, b     float64
		okA, okB bool
		want     string
	}{
		{5, 20, true, true, "0.25×"},
		{30, 10, true, true, "3.00×"},
		{1, 3, true, true, "0.33×"},
		{1, 0, true, true, "-"},
		{1, 2, false, true, "-"},
		{1, 2, true, false, "-"},
	} {
		if got := report.FormatRatio(c.a, c.b, c.okA, c.okB); got != c.want {
			t.Errorf("FormatRatio(%v, %v, %v, %v) = %q, want %q", c.a, c.b, c.okA, c.okB, got, c.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{1234.4: "1234", 22.66: "22.7", 5.304: "5.30", 0.0741: "0.074", 0: "0.000"} {
		if got := report.FormatValue(v, true); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
	if got := report.FormatValue(1, false); got != "-" {
		t.Errorf("missing value printed as %q", got)
	}
}

func TestWriteTables(t *testing.T) {
	results := append(sample(),
		report.Result{Contender: report.Xdproce, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: 6.25, P99us: 30, P999us: 95},
		report.Result{Contender: report.TCP, Measure: report.MsgRate, Op: report.OpStream, Size: 64, QPs: 2, MmsgS: 0.2},
	)
	var out strings.Builder
	if err := report.WriteTables(&out, results); err != nil {
		t.Fatal(err)
	}
	want := `
Bandwidth, Gbit/s (xdproce: RC, one QP; TCP: one stream; TCP+XDP: xdproce's program attached; ratio: higher is better)
    size  WRITE  SEND  READ   TCP  TCP+XDP  WRITE/TCP  SEND/TCP  READ/TCP
  64 KiB   5.25     -     -  21.0     8.00      0.25×         -         -

Round trip, µs: median / p99 / p99.9 (ratio of medians: lower is better)
             exchange  size             xdproce                TCP  TCP+XDP  xdproce/TCP
  WRITE (poll memory)   8 B  6.25 / 30.0 / 95.0  12.5 / 43.0 / 180        -        0.50×
            SEND/RECV   8 B  10.5 / 20.0 / 40.0  12.5 / 43.0 / 180        -        0.84×

Message rate, 64 B messages, million/s (xdproce: WRITE over N QPs; TCP: N streams)
  N  xdproce    TCP  xdproce/TCP
  2    0.500  0.200        2.50×
  4        -  0.250            -

CPU seconds per GB moved (process user+system plus all softirq time; ratio: lower is better)
   size  WRITE  SEND  READ    TCP  TCP+XDP  WRITE/TCP  SEND/TCP  READ/TCP
  1 MiB      -     -  1.50  0.500        -          -         -     3.00×
`
	if out.String() != want {
		t.Errorf("tables:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestWriteTargets(t *testing.T) {
	results := []report.Result{
		{Contender: report.Xdproce, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: 12},
		{Contender: report.TCP, Measure: report.Bandwidth, Op: report.OpStream, Size: 65536, GbitS: 10},
		{Contender: report.Xdproce, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: 5, P99us: 6, P999us: 7},
		{Contender: report.TCP, Measure: report.RTT, Op: report.OpPingPong, Size: 8, P50us: 10, P99us: 20, P999us: 30},
		{Contender: report.Xdproce, Measure: report.MsgRate, Op: report.OpWrite, Size: 64, QPs: 1, MmsgS: 0.5},
		{Contender: report.Xdproce, Measure: report.MsgRate, Op: report.OpWrite, Size: 64, QPs: 4, MmsgS: 1.25},
		{Contender: report.Xdproce, Measure: report.CPUPerGB, Op: report.OpWrite, Size: 65536, CPUSPerGB: 0.9},
		{Contender: report.TCP, Measure: report.CPUPerGB, Op: report.OpStream, Size: 65536, CPUSPerGB: 0.6},
		{Contender: report.AFXDP, Measure: report.Bandwidth, Op: report.OpFrame, Size: 1024, GbitS: 3},
		{Contender: report.AFXDP, Measure: report.Bandwidth, Op: report.OpFrame, Size: 4096, GbitS: 8},
		{Contender: report.AFXDP, Measure: report.RTT, Op: report.OpFrame, Size: 8, P50us: 4, P99us: 5, P999us: 6},
		{Contender: report.AFXDP, Measure: report.MsgRate, Op: report.OpFrame, Size: 64, QPs: 1, MmsgS: 0.7},
	}
	var out strings.Builder
	if err := report.WriteTargets(&out, results, true); err != nil {
		t.Fatal(err)
	}
	lines := squeezed(out.String())
	want := []string{
		"Targets (issues 6, 14 and 15)",
		"target measured held AF_XDP floor",
		"RC WRITE 64 KiB bandwidth ≥ 1.0× TCP 1.20× yes 0.80×",
		"8 B WRITE round trip (busy-poll) ≤ 0.35× TCP ping-pong, medians 0.50× no 0.40×",
		"64 B WRITE message rate ≥ 1 million/s 1.250 M/s (4 QPs) yes 0.700 M/s",
		"CPU per GB ≤ TCP's (RC WRITE 64 KiB) 1.50× no -",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("targets:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	out.Reset()
	loop := append(results[:4:4], report.Result{Contender: report.XdproceLoopback, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: 18},
		report.Result{Contender: report.XdproceLoopback, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: 4, P99us: 5, P999us: 6})
	if err := report.WriteTargets(&out, loop, true); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"WRITE 64 KiB over loopback (one device) > over the link (issue 32) 1.50× (18.00 Gbit/s) yes -",
		"8 B WRITE round trip over loopback < over the link, medians (issue 32) 0.80× (4.00 µs) yes -"} {
		if !slices.Contains(squeezed(out.String()), w) {
			t.Errorf("no loopback target %q in:\n%s", w, out.String())
		}
	}
	out.Reset()
	if err := report.WriteTargets(&out, results[2:4], false); err != nil || !strings.Contains(out.String(), "(target busy-polls, this run did not)") {
		t.Errorf("round trips without busy-poll: %q (%v)", out.String(), err)
	}
	out.Reset()
	if err := report.WriteTargets(&out, sample()[3:5], true); err != nil || strings.Count(strings.TrimSpace(out.String()), "\n") != 1 {
		t.Errorf("targets without their figures printed %q (%v)", out.String(), err)
	}
}

// The AF_XDP floor shows under each table it bounds, never as a size row.
func TestWriteTablesFloor(t *testing.T) {
	results := append(sample(),
		report.Result{Contender: report.AFXDP, Measure: report.Bandwidth, Op: report.OpFrame, Size: 4096, GbitS: 8},
		report.Result{Contender: report.AFXDP, Measure: report.CPUPerGB, Op: report.OpFrame, Size: 4096, CPUSPerGB: 1.25},
		report.Result{Contender: report.AFXDP, Measure: report.RTT, Op: report.OpFrame, Size: 8, P50us: 4, P99us: 5, P999us: 6},
		report.Result{Contender: report.AFXDP, Measure: report.MsgRate, Op: report.OpFrame, Size: 64, QPs: 1, MmsgS: 0.7},
	)
	var out strings.Builder
	if err := report.WriteTables(&out, results); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"AF_XDP floor (raw 4 KiB frames one way, no transport): 8.00 Gbit/s, 1.25 CPU s/GB",
		"AF_XDP floor (raw 64 B frames one way, no transport): 0.700 million/s",
		"4.00 / 5.00 / 6.00",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("tables lack %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "4 KiB      -") {
		t.Errorf("the floor's frame size became a row:\n%s", s)
	}
}

// squeezed is out's lines with runs of blanks squeezed: a table's column
// widths are tabwriter's.
func squeezed(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return lines
}

// TestWriteDMTable: the device-memory points print as a table of host
// memory, device memory and device memory with the fast path against the
// AF_XDP floor, and as issue 34's two targets.
func TestWriteDMTable(t *testing.T) {
	results := []report.Result{
		{Contender: report.Xdproce, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: 24, P99us: 30, P999us: 40},
		{Contender: report.XdproceDM, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: 24.5, P99us: 31, P999us: 41},
		{Contender: report.XdproceDMFast, Measure: report.RTT, Op: report.OpWrite, Size: 8, P50us: 10, P99us: 12, P999us: 20},
		{Contender: report.AFXDP, Measure: report.RTT, Op: report.OpFrame, Size: 8, P50us: 12.5, P99us: 15, P999us: 22},
		{Contender: report.XdproceDM, Measure: report.MsgRate, Op: report.OpWrite, Size: 64, QPs: 1, MmsgS: 0.3},
		{Contender: report.XdproceDMFast, Measure: report.MsgRate, Op: report.OpWrite, Size: 64, QPs: 1, MmsgS: 0.45},
		{Contender: report.AFXDP, Measure: report.MsgRate, Op: report.OpFrame, Size: 64, QPs: 1, MmsgS: 0.9},
	}
	for _, r := range results {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := report.WriteTables(&out, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"host                   24.0 / 30.0 / 40.0    1.92×    -                   -",
		"device                 24.5 / 31.0 / 41.0    1.96×    0.300               0.33×",
		"device, fast path      10.0 / 12.0 / 20.0    0.80×    0.450               0.50×",
		"AF_XDP floor (frames)  12.5 / 15.0 / 22.0    -        0.900               -",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q in\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := report.WriteTargets(&out, results, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"8 B WRITE round trip on device memory (fast path) ≤ 1.0× the AF_XDP floor", "0.80× (10.00 µs)",
		"64 B WRITE message rate on device memory (fast path) ≥ 1.0× the AF_XDP floor's frame rate", "0.50× (0.450 M/s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in the targets:\n%s", want, out.String())
		}
	}
}
