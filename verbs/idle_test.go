package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// sleepRecorder is a link that records how long its engine asks to sleep,
// and when the last sleep was to end.
type sleepRecorder struct {
	*memlink.Link
	mu    sync.Mutex
	waits []time.Duration
	until time.Time
}

func (r *sleepRecorder) Wait(d time.Duration) {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	r.until = time.Now().Add(d)
	r.mu.Unlock()
	r.Link.Wait(d)
}

// sleepEnds is when the sleep last asked for would end unwoken.
func (r *sleepRecorder) sleepEnds() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until
}

// take returns the sleeps asked for since the last take.
func (r *sleepRecorder) take() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waits
	r.waits = nil
	return w
}

// idleSleep waits (bounded) until the engine asks for a sleep of at least
// 500 ms, as it does once no timer is armed (its last ACK's disarmed): a
// condition, not a guess of how long that takes under load.
func idleSleep(t *testing.T, rec *sleepRecorder) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if w := rec.take(); len(w) > 0 && w[len(w)-1] >= 500*time.Millisecond {
			return
		}
	}
	t.Fatal("the engine never went to a long sleep in 10 s")
}

// TestIdleEngineSleepsUntilWoken: an engine with nothing to do and no
// timer armed sleeps until something wakes it (with a long safety net),
// rather than waking every few milliseconds, so that an idle daemon costs
// next to no CPU; a post and a frame still wake it: the WRITE completes
// before the sleep the engine was in would have ended.
func TestIdleEngineSleepsUntilWoken(t *testing.T) {
	la, lb := memlink.NewPair(4096 + 200)
	rec := &sleepRecorder{Link: la}
	a := newNode(t, newDeviceWith(t, rec, macA, ipA, DeviceConfig{ActiveMTU: 4096}), 1<<16)
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{})
	for round := range 2 {
		idleSleep(t, rec)
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
		ends := rec.sleepEnds() // of the sleep the post finds the engine in
		start := time.Now()
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("round %d: WRITE %+v", round, wc)
		}
		// Not woken, the engine would have slept to the end of its sleep
		// before sending: the WRITE must complete before then. That is
		// what a post waking it means, and a slow machine does not move it
		// (as it did a fixed 200 ms).
		if done := time.Now(); !done.Before(ends) {
			t.Errorf("round %d: a WRITE from a sleeping engine took %v, completing %v after its sleep would have ended: the post did not wake it",
				round, done.Sub(start), done.Sub(ends))
		}
	}
}
