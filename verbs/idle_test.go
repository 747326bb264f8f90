package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// sleepRecorder is a link that records how long its engine asks to sleep.
type sleepRecorder struct {
	*memlink.Link
	mu    sync.Mutex
	waits []time.Duration
}

func (r *sleepRecorder) Wait(d time.Duration) {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	r.mu.Unlock()
	r.Link.Wait(d)
}

// take returns the sleeps asked for since the last take.
func (r *sleepRecorder) take() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waits
	r.waits = nil
	return w
}

// TestIdleEngineSleepsUntilWoken: an engine with nothing to do and no
// timer armed sleeps until something wakes it (with a long safety net),
// rather than waking every few milliseconds, so that an idle daemon costs
// next to no CPU; a post and a frame still wake it at once.
func TestIdleEngineSleepsUntilWoken(t *testing.T) {
	la, lb := memlink.NewPair(4096 + 200)
	rec := &sleepRecorder{Link: la}
	a := newNode(t, newDeviceWith(t, rec, macA, ipA, DeviceConfig{ActiveMTU: 4096}), 1<<16)
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{})
	for round := range 2 {
		time.Sleep(50 * time.Millisecond) // the last ACK's timer is disarmed
		rec.take()
		time.Sleep(300 * time.Millisecond)
		waits := rec.take()
		if len(waits) > 3 {
			t.Fatalf("round %d: an idle engine slept %d times in 300 ms (%v...), want a few long sleeps", round, len(waits), waits[:3])
		}
		for _, w := range waits {
			if w < 500*time.Millisecond {
				t.Fatalf("round %d: an idle engine with no timer armed asked to sleep %v", round, w)
			}
		}
		start := time.Now()
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("round %d: WRITE %+v", round, wc)
		}
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Errorf("round %d: a WRITE from a sleeping engine took %v", round, d)
		}
	}
}
