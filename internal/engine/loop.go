// The engine goroutine's life: its doorbell, the list of QPs with new
// posts and the run loop with its spin-then-sleep policy.

package engine

import (
	"runtime"
	"time"

	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/uverbs"
)

// RingAll rings every engine's doorbell.
func (d *Device) RingAll() {
	for _, e := range d.Shards {
		e.ring()
	}
}

// ring tells the engine there is work, waking it if it sleeps.
func (e *Engine) ring() {
	e.work.Store(true)
	if e.sleeping.Load() {
		d := e.dev
		d.WakeMu.RLock()
		if !d.LinkGone {
			e.Link.Wake()
		}
		d.WakeMu.RUnlock()
	}
}

// NotePosted hands the engine a QP that gained posted work requests.
func (e *Engine) NotePosted(qp *queue.QP) {
	if qp.Queued.CompareAndSwap(false, true) {
		e.postedMu.Lock()
		e.posted = append(e.posted, qp)
		e.postedMu.Unlock()
	}
	e.ring()
}

// takePosted swaps the list of QPs with new posts for the engine's spare one.
func (e *Engine) takePosted() []*queue.QP {
	e.postedMu.Lock()
	l := e.posted
	e.posted = e.spare[:0]
	e.postedMu.Unlock()
	return l
}

// Run is an engine's goroutine. Each round holds the engine's mutex, which
// an application's Progress and control operations take too.
func (d *Device) Run(e *Engine) {
	defer d.Stopped.Done()
	var drives uint64 // e.drives when this goroutine last looked
	var sleeps uint32 // the number of the engine's last sleep, for the doorbell page
	for {
		select {
		case <-d.Done:
			return
		default:
		}
		if e.DroveSince(&drives) {
			// An application ran the engine since this goroutine last
			// looked (Progress): its round would find the work done and
			// take the engine's mutex from the next Progress. Let the
			// application have the processor instead.
			runtime.Gosched()
			continue
		}
		e.Mu.Lock()
		e.Counters.SpinStalls = e.spin.Stalls // e.spin is this goroutine's
		e.Counters.EngineWakeups = e.wakeups
		if e.Watcher != nil {
			e.Counters.DoorbellWakes = e.Watcher.WatchWakes()
		}
		e.work.Store(false)
		busy := e.Step()
		holding := e.holding
		var wait time.Duration
		if !busy && !d.Cfg.BusyPoll {
			wait = e.NextTimer()
		}
		e.Mu.Unlock()
		spin := false
		if d.Cfg.SpinMax > 0 && !d.Cfg.BusyPoll { // BusyPoll spins regardless
			spin = e.spin.Next(busy, time.Now, d.Cfg.SpinMax)
		}
		switch {
		case busy:
			if holding {
				// Lone ACKs wait for a reply: let the application run.
				runtime.Gosched()
			}
		case d.Cfg.BusyPoll || spin:
			// Spinning, but the application's goroutines share the
			// processors with this one.
			runtime.Gosched()
		case wait > 0:
			e.sleeping.Store(true)
			if sleeps++; sleeps == 0 { // 0 says awake
				sleeps = 1
			}
			e.setSleeping(sleeps)
			if !e.work.Load() && !e.clientsPosted() && e.fastSleep() {
				e.Link.Wait(wait)
				e.fastWake()
				e.wakeups++
			}
			e.setSleeping(0)
			e.sleeping.Store(false)
		}
	}
}

// setSleeping says in the doorbell page, if the device has one, that the
// engine sleeps its sleep number n, or with 0 that it is awake: a client
// reads only whether it sleeps, a test also which sleep it is.
func (e *Engine) setSleeping(n uint32) {
	if p := e.dev.DoorbellPage.Load(); p != nil {
		uverbs.SetSleeping(*p, uint32(e.Index), n)
	}
}

// clientsPosted reports, for an engine about to sleep, whether a daemon's
// client posted to its shared rings: the client looks at the doorbell page
// after it posts, the engine at the rings after it wrote the page, so one
// of them sees the other.
func (e *Engine) clientsPosted() bool {
	if e.dev.DoorbellPage.Load() == nil {
		return false
	}
	e.Mu.Lock()
	defer e.Mu.Unlock()
	return e.sharedPending()
}

// DroveSince reports whether an application ran a round of the engine
// (Progress) since *seen was taken, and takes it again.
func (e *Engine) DroveSince(seen *uint64) bool {
	n := e.Drives.Load()
	if n == *seen {
		return false
	}
	*seen = n
	return true
}

// idleWait is the longest the engine sleeps while a timer is armed: a
// test's fake clock may move on without waking it. quietWait is how long
// it sleeps with nothing armed at all, when only a frame, a post or a
// control operation (each of which wakes it) can bring work: a safety net
// against a lost wakeup, not a poll: at idleWait an idle daemon would
// wake 500 times a second (what that costs: docs/performance.md).
const (
	idleWait  = 2 * time.Millisecond
	quietWait = time.Second
)
