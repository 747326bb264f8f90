package verbs

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

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
