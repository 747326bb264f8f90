package verbs

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// dumpQP is qp's status line (the engine's view of both its sides).
func dumpQP(qp *QP) string {
	all, err := qp.dev.QPStatus()
	if err != nil {
		return err.Error()
	}
	for _, s := range all {
		if s.QPN == qp.qpn {
			return s.String()
		}
	}
	return fmt.Sprintf("QP %#x: gone", qp.qpn)
}

func counters(d *Device) Counters { c, _ := d.Counters(); return c }

// testDevices are the devices each running test opened, so that a helper
// that gives up can say what every one of them is waiting for.
var testDevices = struct {
	sync.Mutex
	m map[testing.TB][]*Device
}{m: map[testing.TB][]*Device{}}

func registerDevice(t testing.TB, d *Device) {
	testDevices.Lock()
	testDevices.m[t] = append(testDevices.m[t], d)
	testDevices.Unlock()
	t.Cleanup(func() {
		testDevices.Lock()
		delete(testDevices.m, t)
		testDevices.Unlock()
	})
}

// stallReport describes the QPs of t's devices that have work outstanding:
// which QP, in which state, at which PSNs (at most 8 per device).
func stallReport(t testing.TB) string {
	testDevices.Lock()
	devs := append([]*Device(nil), testDevices.m[t]...)
	testDevices.Unlock()
	var b strings.Builder
	for i, d := range devs {
		all, err := d.QPStatus()
		if err != nil {
			fmt.Fprintf(&b, "\ndevice %d: %v", i, err)
			continue
		}
		n := 0
		for _, s := range all {
			if s.SendQueued == 0 && s.InMessage == "" {
				continue
			}
			if n++; n <= 8 {
				fmt.Fprintf(&b, "\ndevice %d: %s", i, s)
			}
		}
		if n > 8 {
			fmt.Fprintf(&b, "\ndevice %d: and %d more QPs with work outstanding", i, n-8)
		}
		c, _ := d.Counters()
		fmt.Fprintf(&b, "\ndevice %d: counters %+v", i, c)
	}
	return b.String()
}
