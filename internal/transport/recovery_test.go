package transport

import "testing"

// TestReorderWindow: a re-ask whose packet then arrives twice widens the
// window to twice the depth its original was overtaken by; a copy outside
// the re-ask, or a second copy, changes nothing; after reoPersist re-asks
// without a spurious one the window is dupThresh again; it never passes
// reoMax.
func TestReorderWindow(t *testing.T) {
	var r reorderWindow
	if r.threshold() != dupThresh {
		t.Fatalf("initial threshold %d", r.threshold())
	}
	r.asked(100, 101)
	r.filled(100, 6)
	if r.duplicate(99) || r.duplicate(101) || r.threshold() != dupThresh {
		t.Fatalf("a copy outside the re-ask widened the window to %d", r.threshold())
	}
	if !r.duplicate(100) || r.threshold() != 12 {
		t.Fatalf("after a spurious re-ask overtaken by 6: threshold %d, want 12", r.threshold())
	}
	if r.duplicate(100) || r.threshold() != 12 {
		t.Fatalf("a third copy widened the window again: %d", r.threshold())
	}
	for i := range reoPersist - 1 {
		r.asked(uint32(200+i), uint32(201+i))
		if r.threshold() != 12 {
			t.Fatalf("after %d genuine re-asks: threshold %d, want 12", i+1, r.threshold())
		}
	}
	r.asked(300, 301)
	if r.threshold() != dupThresh {
		t.Fatalf("after %d genuine re-asks: threshold %d, want %d", reoPersist, r.threshold(), dupThresh)
	}
	// A re-ask the timer asked for again: its second copy proves nothing.
	r.asked(600, 601)
	r.forget()
	if r.duplicate(600) || r.threshold() != dupThresh {
		t.Fatalf("a copy of a re-ask the timer repeated widened the window to %d", r.threshold())
	}
	// Two re-asks out before either's second copy: both count.
	r.asked(500, 501)
	r.asked(520, 522)
	if !r.duplicate(521) || !r.duplicate(500) || r.threshold() != 4*dupThresh {
		t.Fatalf("two spurious re-asks out at once: threshold %d, want %d", r.threshold(), 4*dupThresh)
	}
	for range 10 {
		r.asked(400, 401)
		r.filled(400, 1000)
		r.duplicate(400)
	}
	if r.threshold() != reoMax {
		t.Fatalf("threshold %d, want at most %d", r.threshold(), reoMax)
	}
}
