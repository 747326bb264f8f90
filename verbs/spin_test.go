package verbs

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// TestSpinnerFollowsIdleGaps: an idle engine spins only while the gaps it
// sees between work are short enough for spinning to pay.
func TestSpinnerFollowsIdleGaps(t *testing.T) {
	const max = 50 * time.Microsecond
	var s spinner
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	// gap runs an idle gap of d ending in work and says whether the engine
	// was still spinning at its end.
	gap := func(d time.Duration) bool {
		s.next(false, clock, max)
		now = now.Add(d)
		spinning := s.next(false, clock, max)
		now = now.Add(time.Nanosecond)
		s.next(true, clock, max)
		return spinning
	}
	if s.next(false, clock, max) {
		t.Fatal("a new engine spins before it has seen a gap")
	}
	now = now.Add(time.Second)
	s.next(true, clock, max) // a long first gap: nothing learned
	if s.window != 0 {
		t.Fatalf("window %v after a long gap", s.window)
	}
	gap(10 * time.Microsecond) // slept through a short gap: spinning would pay
	if s.window != max {
		t.Fatalf("window %v after a short gap, want %v", s.window, max)
	}
	if !gap(20 * time.Microsecond) {
		t.Fatal("not spinning through a short gap with the window open")
	}
	for i, want := range []time.Duration{max / 2, max / 4, max / 8} {
		if gap(time.Millisecond); s.window != want {
			t.Fatalf("long gap %d: window %v, want %v", i, s.window, want)
		}
	}
	for range 8 {
		gap(time.Millisecond)
	}
	if s.window != 0 {
		t.Fatalf("window %v after many long gaps: it should close", s.window)
	}
	if gap(200 * time.Nanosecond) {
		t.Fatal("spinning with the window closed")
	}
	if s.window != max {
		t.Fatalf("a short gap did not reopen the window: %v", s.window)
	}
}

// TestNoSpinOnOneCPU: with one CPU to share (GOMAXPROCS follows a
// cgroup's limit too) a device never spins, unless BusyPoll asks.
func TestNoSpinOnOneCPU(t *testing.T) {
	start := func(cfg DeviceConfig) *Device {
		la, _ := memlink.NewPair(4096 + 200)
		cfg.ActiveMTU, cfg.MAC, cfg.GIDs = 4096, macA, []netip.Addr{ipA}
		d, err := NewDevice(la, cfg)
		must(t, err)
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	if d := start(DeviceConfig{}); runtime.GOMAXPROCS(0) > 1 && d.cfg.SpinMax != DefaultSpinMax {
		t.Fatalf("SpinMax %v on %d CPUs, want the default", d.cfg.SpinMax, runtime.GOMAXPROCS(0))
	}
	if d := start(DeviceConfig{SpinMax: -1}); d.cfg.SpinMax != 0 {
		t.Fatalf("SpinMax -1 gave %v", d.cfg.SpinMax)
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	if d := start(DeviceConfig{SpinMax: time.Millisecond}); d.cfg.SpinMax != 0 {
		t.Fatalf("SpinMax %v with one CPU", d.cfg.SpinMax)
	}
	if d := start(DeviceConfig{BusyPoll: true}); !d.BusyPolling() {
		t.Fatal("BusyPoll not kept with one CPU")
	}
}

// TestRxCoalesceOnOneCPU: receive coalescing is on by default only where
// engines never spin (one CPU); an explicit choice holds everywhere.
func TestRxCoalesceOnOneCPU(t *testing.T) {
	if runtime.GOMAXPROCS(0) > 1 && RxCoalesceFor(0) != 0 {
		t.Fatalf("coalescing %v by default on %d CPUs", RxCoalesceFor(0), runtime.GOMAXPROCS(0))
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	for _, c := range []struct{ set, want time.Duration }{{0, DefaultRxCoalesce}, {-1, 0}, {300 * time.Microsecond, 300 * time.Microsecond}} {
		if got := RxCoalesceFor(c.set); got != c.want {
			t.Errorf("RxCoalesce %v on one CPU: %v, want %v", c.set, got, c.want)
		}
	}
	if d := DescribeRxCoalesce(RxCoalesceFor(0)); d != ", receive wakeups coalesced up to 2ms" {
		t.Errorf("described as %q", d)
	}
}
