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
		e.Counters.SpinStalls = e.spin.stalls // e.spin is this goroutine's
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
			spin = e.spin.next(busy, time.Now, d.Cfg.SpinMax)
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

// spinner decides whether an idle engine spins or sleeps: it spins for
// up to window after its last work, and the window follows the idle gaps
// the engine sees, sleeping or spinning: a gap shorter than the most a
// device spins (a ping-pong's) opens the window fully, a longer one (an
// application thinking, a link gone quiet) halves it, and a window below
// spinMin closes. So an engine spins through the gaps spinning shortens
// and sleeps through the others, after at most a few wasted spins.
//
// Spinning pays only with a processor to spare. When the processors are
// all wanted (a daemon's engines beside clients that spin on memory, as
// ib_write_lat does, on a small host), a spinning engine holds a core a
// client needs until the kernel preempts it, and every hand-over waits
// for a time slice. The spinner sees that as a stall, one idle round
// taking far longer than a round takes, and then sleeps for a quiet
// period, doubled at each stall that soon follows the last quiet period,
// so that an engine on a crowded host sleeps and wakes (tens of µs a
// hand-over) instead of fighting for a core (milliseconds), and tries
// spinning again once a second at most.
type spinner struct {
	window time.Duration
	idleAt time.Time // when the current idle gap began; zero while busy
	// spun says the last round was idle and chose to spin, at lastLook.
	spun     bool
	lastLook time.Time
	// quiet is the current quiet period after a stall, and quietUntil
	// when it ends; the engine does not spin before then.
	quiet      time.Duration
	quietUntil time.Time
	stalls     uint64 // stalls seen, for tests and counters
}

const (
	spinMin = time.Microsecond
	// spinStall is how long one idle spinning round may take before the
	// spinner takes it for a preemption: an idle round is a step with
	// nothing to do and a yield, around a microsecond.
	spinStall = 20 * time.Microsecond
	// The quiet period after a stall starts at quietMin and doubles up to
	// quietMax: a crowded host costs a stall (a time slice) per quietMax.
	quietMin = time.Millisecond
	quietMax = time.Second
)

// next records a step's outcome and reports whether to spin on. It reads
// the clock (now) only at the ends of an idle gap and while idle: a busy
// engine's rounds cost no clock read.
func (s *spinner) next(busy bool, now func() time.Time, max time.Duration) bool {
	if busy {
		if !s.idleAt.IsZero() {
			if now().Sub(s.idleAt) <= max {
				s.window = max
			} else if s.window /= 2; s.window < spinMin {
				s.window = 0
			}
			s.idleAt = time.Time{}
		}
		s.spun = false
		return false
	}
	t := now()
	if s.idleAt.IsZero() {
		s.idleAt = t
	}
	if s.spun && t.Sub(s.lastLook) > spinStall {
		s.stall(t)
	}
	s.spun = t.Sub(s.idleAt) < s.window && !t.Before(s.quietUntil)
	s.lastLook = t
	return s.spun
}

// stall notes, at t, that a spinning round was held up: the processors are
// wanted elsewhere. The window closes and the quiet period begins: twice
// the last if that ended recently (the host is still crowded), else the
// shortest.
func (s *spinner) stall(t time.Time) {
	s.stalls++
	if t.Sub(s.quietUntil) < 4*s.quiet {
		s.quiet = min(2*s.quiet, quietMax)
	} else {
		s.quiet = quietMin
	}
	s.quietUntil = t.Add(s.quiet)
	s.window = 0
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
