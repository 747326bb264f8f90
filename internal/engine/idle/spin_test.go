package idle

import (
	"testing"
	"time"
)

// TestSpinnerFollowsIdleGaps: an idle engine spins only while the gaps it
// sees between work are short enough for spinning to pay.
func TestSpinnerFollowsIdleGaps(t *testing.T) {
	const max = 50 * time.Microsecond
	var s Spinner
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	gap := func(d time.Duration) bool { return idleGap(&s, &now, d, max) }
	if s.Next(false, clock, max) {
		t.Fatal("a new engine spins before it has seen a gap")
	}
	now = now.Add(time.Second)
	s.Next(true, clock, max) // a long first gap: nothing learned
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

// spinRound is how long an idle spinning round takes in these tests.
const spinRound = 500 * time.Nanosecond

// idleGap runs an idle gap of d ending in work on s, whose clock is *now:
// a round every spinRound while the engine spins, one jump to the end once
// it sleeps. It says whether the engine was still spinning at the gap's end.
func idleGap(s *Spinner, now *time.Time, d time.Duration, max time.Duration) bool {
	clock := func() time.Time { return *now }
	end := now.Add(d)
	spinning := s.Next(false, clock, max)
	for spinning && now.Add(spinRound).Before(end) {
		*now = now.Add(spinRound)
		spinning = s.Next(false, clock, max)
	}
	*now = end
	spinning = s.Next(false, clock, max)
	*now = now.Add(time.Nanosecond)
	s.Next(true, clock, max)
	return spinning
}

// TestSpinnerStopsWhenPreempted: an engine whose spinning rounds are held
// up (its thread preempted: the processors are wanted by others, as by
// clients spinning on memory beside a daemon) sleeps through the gaps it
// would have spun through, for a quiet period that doubles with each
// stall that soon follows the last, and spins again after it.
func TestSpinnerStopsWhenPreempted(t *testing.T) {
	const max = 50 * time.Microsecond
	var s Spinner
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	for range 3 {
		idleGap(&s, &now, 10*time.Microsecond, max)
	}
	if !idleGap(&s, &now, 10*time.Microsecond, max) {
		t.Fatal("not spinning through short gaps on an idle host")
	}
	// A spinning round preempted for a time slice.
	if !s.Next(false, clock, max) {
		t.Fatal("not spinning after work")
	}
	now = now.Add(700 * time.Microsecond)
	if s.Next(false, clock, max) {
		t.Fatal("still spinning after a round held up for 700 µs")
	}
	if s.Stalls != 1 {
		t.Fatalf("%d stalls counted, want 1", s.Stalls)
	}
	now = now.Add(time.Microsecond)
	s.Next(true, clock, max)
	// Short gaps within the quiet period: sleep, do not spin.
	quietEnd := s.quietUntil
	if got := quietEnd.Sub(now); got <= 0 || got > quietMin {
		t.Fatalf("quiet for %v after one stall, want up to %v", got, quietMin)
	}
	for now.Add(20 * time.Microsecond).Before(quietEnd) {
		if idleGap(&s, &now, 10*time.Microsecond, max) {
			t.Fatal("spinning in the quiet period after a stall")
		}
	}
	// After it: short gaps open the window again, and spinning resumes.
	idleGap(&s, &now, 10*time.Microsecond, max)
	if !idleGap(&s, &now, 10*time.Microsecond, max) {
		t.Fatal("not spinning again after the quiet period")
	}
	// Stalls that keep coming lengthen the quiet period, up to quietMax.
	var last time.Duration
	for i := range 16 {
		for now.Before(s.quietUntil) {
			idleGap(&s, &now, 10*time.Microsecond, max)
		}
		idleGap(&s, &now, 10*time.Microsecond, max) // reopens the window
		if !s.Next(false, clock, max) {
			t.Fatalf("stall %d: not spinning after the quiet period", i)
		}
		now = now.Add(time.Millisecond)
		s.Next(false, clock, max)
		if s.quiet < last || s.quiet > quietMax {
			t.Fatalf("stall %d: quiet period %v after %v (at most %v)", i, s.quiet, last, quietMax)
		}
		last = s.quiet
		now = now.Add(time.Microsecond)
		s.Next(true, clock, max)
	}
	if last != quietMax {
		t.Fatalf("quiet period %v after 16 stalls in a row, want %v", last, quietMax)
	}
	// A stall long after the last quiet period starts over from the
	// shortest.
	now = s.quietUntil.Add(time.Minute)
	for range 3 {
		idleGap(&s, &now, 10*time.Microsecond, max)
	}
	s.Next(false, clock, max)
	now = now.Add(time.Millisecond)
	s.Next(false, clock, max)
	if s.quiet != quietMin {
		t.Fatalf("quiet period %v after a stall a minute after the last, want %v", s.quiet, quietMin)
	}
}
