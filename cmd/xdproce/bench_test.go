package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/bench"
	"github.com/xdproce/xdproce/bench/report"
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
	if !strings.Contains(errOut, "[18/18]") {
		t.Errorf("stderr lacks the progress of the last of 18 points:\n%s", errOut)
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
	// The comparison with stock perftest runs xdproce up, run and perf as
	// processes, which this test binary is not (TestBenchStock runs it):
	// without the library it is skipped, with one line, and the rest runs.
	t.Setenv("XDPROCE_LIBDIR", t.TempDir())
	args := append([]string{"bench", "--sizes", "4K", "--lat-sizes", "8", "--qps", qpList, "--time", "200ms", "--warmup", "50ms",
		"--json", jsonFile, "--plot", plotFile}, extra...)
	if code := run(t.Context(), args, &out, &errOut); code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if n := strings.Count(errOut.String(), "bench: stock perftest over libibverbs vs xdproce perf skipped: no libibverbs.so.1 in "); n != 1 {
		t.Errorf("%d lines saying the comparison was skipped:\n%s", n, errOut.String())
	}

	f, err := os.Open(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	results, err := report.ReadJSON(f)
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
	got := map[fig]report.Result{}
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
	// Both ends on one device (looped back inside it): the 8 B WRITE round
	// trip; the WRITE 64 KiB point needs --sizes 64K.
	want = append(want, fig{"xdproce_loopback", false, "rtt", "write", 8, 0})
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
		{"bench", "--stock-rounds", "-1"},
	} {
		var out, errOut strings.Builder
		if code := run(t.Context(), args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errOut.String())
		}
	}
}

func TestFindStock(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin", "xdproce")
	lib := filepath.Join(dir, "bin", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	executable := func() (string, error) { return exe, nil }
	installed := func(string) (string, error) { return "/usr/bin/x", nil }
	missing := func(name string) (string, error) {
		if name == "ib_write_bw" {
			return "", exec.ErrNotFound
		}
		return "/usr/bin/" + name, nil
	}
	// No library beside the executable yet.
	if s, why := findStock(executable, installed, ""); s != nil || !strings.Contains(why, "no libibverbs.so.1") {
		t.Errorf("without the library: %+v, %q", s, why)
	}
	if err := os.WriteFile(filepath.Join(lib, "libibverbs.so.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if s, why := findStock(executable, installed, ""); s == nil || s.Exe != exe || s.LibDir != lib || why != "" {
		t.Errorf("with everything: %+v, %q", s, why)
	}
	if s, why := findStock(executable, missing, ""); s != nil || !strings.Contains(why, "ib_write_bw is not installed (apt-get install perftest)") {
		t.Errorf("without ib_write_bw: %+v, %q", s, why)
	}
	// $XDPROCE_LIBDIR is where xdproce run looks, then, and only there.
	if s, why := findStock(executable, installed, filepath.Join(dir, "elsewhere")); s != nil || !strings.Contains(why, "XDPROCE_LIBDIR") {
		t.Errorf("with $XDPROCE_LIBDIR elsewhere: %+v, %q", s, why)
	}
	if s, why := findStock(func() (string, error) { return "", errors.New("gone") }, installed, ""); s != nil || !strings.Contains(why, "gone") {
		t.Errorf("without an executable: %+v, %q", s, why)
	}
}

// TestBenchStock runs the comparison of stock perftest over xdproce's
// libibverbs with xdproce perf between two namespaces, through a built
// xdproce (its up, run and perf commands), with one short round trip and
// one bandwidth point besides: both contenders' figures present and
// positive, their table and targets printed, no daemon left behind.
func TestBenchStock(t *testing.T) {
	netns.RequireRoot(t)
	for _, tool := range bench.StockTools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (make test installs perftest)", tool)
			}
			t.Skipf("%s is not installed (apt-get install perftest)", tool)
		}
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if b, err := exec.Command("make", "-C", root, "--no-print-directory", "provider").CombinedOutput(); err != nil {
		t.Fatalf("make provider: %v\n%s", err, b)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "xdproce")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	jsonFile := filepath.Join(dir, "bench.json")
	cmd := exec.CommandContext(t.Context(), bin, "bench", "--sizes", "64K", "--lat-sizes", "8", "--qps", "1", "--time", "200ms",
		"--warmup", "50ms", "--daemon=false", "--json", jsonFile)
	cmd.Env = append(os.Environ(), "XDPROCE_LIBDIR="+filepath.Join(root, "bin", "lib"))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"Stock perftest over xdproce's libibverbs", "stock ib_write_lat 8 B over libibverbs ≤ xdproce perf + 1 µs",
		"stock ib_write_bw 64 KiB over libibverbs ≥ 0.9× xdproce perf"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"stock perftest over libibverbs: ib_write_lat 8 B, round 3 of 3", "xdproce perf: ib_write_bw 64 KiB, round 3 of 3"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	f, err := os.Open(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	results, err := report.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range results {
		if r.Contender != report.PerftestLibibverbs && r.Contender != report.XdprocePerf {
			continue
		}
		n++
		if r.Measure == report.RTT && !(r.P50us > 0 && r.P50us <= r.P99us && r.P99us <= r.P999us) || r.Measure == report.Bandwidth && !(r.GbitS > 0) {
			t.Errorf("figure %+v", r)
		}
	}
	if n != 4 {
		t.Errorf("%d figures of the comparison, want 4 (one per contender and point, the medians of the rounds): %+v", n, results)
	}
	// Its daemons are gone with the namespaces; none runs under this binary.
	if b, _ := exec.Command("pgrep", "-f", bin+" up").Output(); len(b) != 0 {
		t.Errorf("daemons left running: %s", b)
	}
}
