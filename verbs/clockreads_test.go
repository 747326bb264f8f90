package verbs

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
)

// countingClock counts the engine's clock reads.
type countingClock struct {
	*faketime.Clock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.Clock.Now()
}

// TestStepReadsClockOnce: a step that builds and sends a WRITE reads the
// clock once, not for every timer, RTT sample and ask it arms (issue 34:
// each read is ~50 ns on the fast path's turnaround); with lazy asks on, as
// on the fast path. The WRITE still completes, and its timers still fire
// from that one reading (the lazy-ask tests cover them).
func TestStepReadsClockOnce(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		clk := &countingClock{Clock: faketime.New(time.Unix(1e9, 0))}
		la, lb := memlink.NewPair(4096 + 200)
		cfg := DeviceConfig{ActiveMTU: 4096, Clock: clk, AckHold: -1, AckCoalesce: coalesce}
		a := newNode(t, newDeviceWith(t, la, macA, ipA, cfg), 4096)
		b := newNode(t, newDeviceWith(t, lb, macB, ipB, cfg), 4096)
		connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU4096, timeout: 14, retry: 7, rnr: 7})
		na, nb := nicOf(a.dev), nicOf(b.dev)
		na.LockEngine(0)
		nb.LockEngine(0)
		wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
		for i := range 4 {
			if _, err := a.qp.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			before := clk.reads.Load()
			na.StepEngine(0)
			if got := clk.reads.Load() - before; got > 1 {
				t.Errorf("coalesce=%v WRITE %d: its step read the clock %d times, want at most 1", coalesce, i, got)
			}
			var wc [4]WorkCompletion
			got := 0
			for steps := 0; got == 0 && steps < 100; steps++ {
				nb.StepEngine(0)
				na.StepEngine(0)
				got = a.scq.Poll(wc[:])
			}
			if got != 1 || wc[0].Status != WCSuccess {
				t.Fatalf("coalesce=%v WRITE %d: %d completions %+v", coalesce, i, got, wc[:got])
			}
		}
		na.UnlockEngine(0)
		nb.UnlockEngine(0)
	}
}
