package idle

import (
	"time"
)

// Spinner decides whether an idle engine spins or sleeps: it spins for
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
type Spinner struct {
	window time.Duration
	idleAt time.Time // when the current idle gap began; zero while busy
	// spun says the last round was idle and chose to spin, at lastLook.
	spun     bool
	lastLook time.Time
	// quiet is the current quiet period after a stall, and quietUntil
	// when it ends; the engine does not spin before then.
	quiet      time.Duration
	quietUntil time.Time
	Stalls     uint64 // stalls seen, for tests and counters
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

// Next records a step's outcome and reports whether to spin on. It reads
// the clock (now) only at the ends of an idle gap and while idle: a busy
// engine's rounds cost no clock read.
func (s *Spinner) Next(busy bool, now func() time.Time, max time.Duration) bool {
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
func (s *Spinner) stall(t time.Time) {
	s.Stalls++
	if t.Sub(s.quietUntil) < 4*s.quiet {
		s.quiet = min(2*s.quiet, quietMax)
	} else {
		s.quiet = quietMin
	}
	s.quietUntil = t.Add(s.quiet)
	s.window = 0
}
