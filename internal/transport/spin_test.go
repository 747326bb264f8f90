package transport

import (
	"testing"
	"time"
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
