package bench

import (
	"reflect"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bench/report"
)

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("64, 4K,16KiB,1M,2MiB,100B")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{64, 4096, 16384, 1 << 20, 2 << 20, 100}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "0", "-4", "4G", "K", "1,,2"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseCounts(t *testing.T) {
	if got, err := ParseCounts("1,2, 4"); err != nil || !reflect.DeepEqual(got, []int{1, 2, 4}) {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := ParseCounts("1,0"); err == nil {
		t.Error("0 accepted")
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int]string{8: "8 B", 1000: "1000 B", 1024: "1 KiB", 1536: "1536 B", 65536: "64 KiB", 1 << 20: "1 MiB", 3 << 20: "3 MiB"} {
		if got := report.FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPowersOf4(t *testing.T) {
	want := []int{64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}
	if got := PowersOf4(64, 1<<20); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v", got)
	}
}

func TestSummarizeNearestRank(t *testing.T) {
	// 1000 samples 1..1000 µs in reverse order: p50 is the 500th, p99 the
	// 990th, p99.9 the 999th.
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(1000-i) * time.Microsecond
	}
	got := Summarize(s)
	want := Latencies{N: 1000, P50: 500 * time.Microsecond, P99: 990 * time.Microsecond, P999: 999 * time.Microsecond}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// 100 samples: p99.9 is the largest; p99 the 99th.
	s = s[:0]
	for i := range 100 {
		s = append(s, time.Duration(i+1))
	}
	if got := Summarize(s); got.P99 != 99 || got.P999 != 100 || got.P50 != 50 {
		t.Errorf("100 samples: %+v", got)
	}
	if got := Summarize([]time.Duration{7}); got.P50 != 7 || got.P999 != 7 {
		t.Errorf("one sample: %+v", got)
	}
}

func TestSoftirqTicks(t *testing.T) {
	stat := []byte("cpu  10 20 30 40 50 60 777 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\nintr 5\n")
	if got, err := softirqTicks(stat); err != nil || got != 777 {
		t.Errorf("got %d, %v; want 777", got, err)
	}
	if _, err := softirqTicks([]byte("cpu0 1 2 3 4 5 6 7\n")); err == nil {
		t.Error("a /proc/stat without the aggregate line was accepted")
	}
}

func TestCPUSampleCountsThisProcess(t *testing.T) {
	a, err := sampleCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the process clock moves (bounded).
	end := time.Now().Add(5 * time.Second)
	x := 0
	for time.Now().Before(end) {
		for i := range 1 << 16 {
			x += i
		}
		if b, _ := sampleCPU(); b.process > a.process {
			return
		}
	}
	t.Fatalf("process CPU time did not move in 5 s of spinning (%d)", x)
}

func TestWindowFigures(t *testing.T) {
	w := window{bytes: 2e9, msgs: 4e6, elapsed: 2 * time.Second, cpu: 3 * time.Second}
	if got := w.gbitPerSec(); got != 8 {
		t.Errorf("Gbit/s %v, want 8", got)
	}
	if got := w.mmsgPerSec(); got != 2 {
		t.Errorf("Mmsg/s %v, want 2", got)
	}
	if got := w.cpuPerGB(); got != 1.5 {
		t.Errorf("CPU s/GB %v, want 1.5", got)
	}
}
