package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/bench"
	"github.com/xdproce/xdproce/internal/netns"
)

// TestBenchRunsEndToEnd runs a tiny bench through namespaces it creates:
// every figure present and positive, the tables printed, nothing left behind.
func TestBenchRunsEndToEnd(t *testing.T) {
	netns.RequireRoot(t)
	out, errOut := runTinyBench(t, []int{1, 2})
	for _, title := range []string{"Bandwidth, Gbit/s", "Round trip, µs", "Message rate, 64 B", "CPU seconds per GB"} {
		if !strings.Contains(out, title) {
			t.Errorf("stdout lacks the table %q:\n%s", title, out)
		}
	}
	if !strings.Contains(errOut, "[17/17]") {
		t.Errorf("stderr lacks the progress of the last of 17 points:\n%s", errOut)
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("xdpbench-%d-", os.Getpid())) {
			t.Errorf("bench left namespace %s behind", e.Name())
		}
	}
}

// TestBenchOnGivenInterfaces measures between the two ends of a veth pair
// that already exists, named as NETNS/IFNAME.
func TestBenchOnGivenInterfaces(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	spec := func(h *netns.Host) string { return h.Namespace.Name() + "/" + h.Link }
	_, errOut := runTinyBench(t, []int{1}, "--ifaces", spec(a)+","+spec(b))
	if want := fmt.Sprintf("%s (%s) <-> %s %s (%s)", a.Link, a.Addr, b.Namespace.Name(), b.Link, b.Addr); !strings.Contains(errOut, want) {
		t.Errorf("progress does not name the given interfaces %q:\n%s", want, errOut)
	}

	var out, errs strings.Builder
	if code := run(t.Context(), []string{"bench", "--ifaces", spec(a) + "," + spec(a)}, &out, &errs); code != 1 ||
		!strings.Contains(errs.String(), "same network namespace") {
		t.Errorf("two interfaces of one namespace: exit %d, stderr %q", code, errs.String())
	}
}

// runTinyBench runs one size per measure for 200 ms a point and checks that
// every figure is present and positive and that the JSON follows the schema
// and the plot is drawn.
func runTinyBench(t *testing.T, qps []int, extra ...string) (stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	jsonFile, plotFile := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.svg")
	var out, errOut strings.Builder
	qpList := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(qps)), ","), "[]")
	args := append([]string{"bench", "--sizes", "4K", "--lat-sizes", "8", "--qps", qpList, "--time", "200ms", "--warmup", "50ms",
		"--json", jsonFile, "--plot", plotFile}, extra...)
	if code := run(t.Context(), args, &out, &errOut); code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}

	f, err := os.Open(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	results, err := bench.ReadJSON(f)
	if err != nil {
		t.Fatalf("JSON does not follow the schema: %v", err)
	}
	type fig struct {
		contender string
		attached  bool
		measure   string
		op        string
		size, qps int
	}
	got := map[fig]bench.Result{}
	for _, r := range results {
		k := fig{r.Contender, r.XDPAttached, r.Measure, r.Op, r.Size, r.QPs}
		if _, dup := got[k]; dup {
			t.Errorf("figure %+v twice", k)
		}
		got[k] = r
	}
	var want []fig
	for _, op := range []string{"write", "send", "read"} {
		want = append(want, fig{"xdproce", false, "bandwidth", op, 4096, 0}, fig{"xdproce", false, "cpu_per_gb", op, 4096, 0})
	}
	for _, attached := range []bool{false, true} {
		want = append(want, fig{"tcp", attached, "bandwidth", "stream", 4096, 0}, fig{"tcp", attached, "cpu_per_gb", "stream", 4096, 0},
			fig{"tcp", attached, "rtt", "pingpong", 8, 0})
	}
	want = append(want, fig{"xdproce", false, "rtt", "write", 8, 0}, fig{"xdproce", false, "rtt", "send", 8, 0})
	// Through each host's daemon (xdproce up, in the bench's process): the
	// 8 B WRITE round trip; the WRITE 64 KiB point needs --sizes 64K.
	want = append(want, fig{"xdproce_daemon", false, "rtt", "write", 8, 0})
	for _, n := range qps {
		want = append(want, fig{"xdproce", false, "msgrate", "write", 64, n}, fig{"tcp", false, "msgrate", "stream", 64, n})
	}
	// The AF_XDP floor: a frame round trip, the 64 B frame rate, and the
	// largest frames (4 KiB at MTU 4200) one way.
	want = append(want, fig{"afxdp", false, "rtt", "frame", 8, 0}, fig{"afxdp", false, "msgrate", "frame", 64, 1},
		fig{"afxdp", false, "bandwidth", "frame", 4096, 0}, fig{"afxdp", false, "cpu_per_gb", "frame", 4096, 0})
	for _, k := range want {
		r, ok := got[k]
		if !ok {
			t.Errorf("no figure %+v", k)
			continue
		}
		var values []float64
		switch k.measure {
		case "bandwidth":
			values = []float64{r.GbitS}
		case "cpu_per_gb":
			values = []float64{r.CPUSPerGB}
		case "rtt":
			values = []float64{r.P50us, r.P99us, r.P999us}
			if !(r.P50us <= r.P99us && r.P99us <= r.P999us) {
				t.Errorf("%+v: percentiles out of order: %+v", k, r)
			}
		case "msgrate":
			values = []float64{r.MmsgS}
		}
		for _, v := range values {
			if !(v > 0) {
				t.Errorf("%+v: figure %v is not positive", k, v)
			}
		}
	}
	if len(results) != len(want) {
		t.Errorf("%d figures, want %d", len(results), len(want))
	}
	if b, err := os.ReadFile(plotFile); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("plot not written as SVG (%v)", err)
	}
	return out.String(), errOut.String()
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--sizes", "4X"},
		{"bench", "--qps", "0"},
		{"bench", "--plot", "out.pdf"},
		{"bench", "--msg-size", "64,128"},
		{"bench", "extra"},
		{"bench", "--busy-poll=sometimes"},
	} {
		var out, errOut strings.Builder
		if code := run(t.Context(), args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errOut.String())
		}
	}
}
