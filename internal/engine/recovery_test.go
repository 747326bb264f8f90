package engine

import (
	"testing"

	"github.com/xdproce/xdproce/internal/queue"
)

// TestReorderWindow: a re-ask whose packet then arrives twice widens the
// window to twice the depth its original was overtaken by; a copy outside
// the re-ask, or a second copy, changes nothing; after ReoPersist re-asks
// without a spurious one the window is DupThresh again; it never passes
// ReoMax.
func TestReorderWindow(t *testing.T) {
	var r queue.ReorderWindow
	if r.Threshold() != queue.DupThresh {
		t.Fatalf("initial threshold %d", r.Threshold())
	}
	r.Asked(100, 101)
	r.Filled(100, 6)
	if r.Duplicate(99) || r.Duplicate(101) || r.Threshold() != queue.DupThresh {
		t.Fatalf("a copy outside the re-ask widened the window to %d", r.Threshold())
	}
	if !r.Duplicate(100) || r.Threshold() != 12 {
		t.Fatalf("after a spurious re-ask overtaken by 6: threshold %d, want 12", r.Threshold())
	}
	if r.Duplicate(100) || r.Threshold() != 12 {
		t.Fatalf("a third copy widened the window again: %d", r.Threshold())
	}
	for i := range queue.ReoPersist - 1 {
		r.Asked(uint32(200+i), uint32(201+i))
		if r.Threshold() != 12 {
			t.Fatalf("after %d genuine re-asks: threshold %d, want 12", i+1, r.Threshold())
		}
	}
	r.Asked(300, 301)
	if r.Threshold() != queue.DupThresh {
		t.Fatalf("after %d genuine re-asks: threshold %d, want %d", queue.ReoPersist, r.Threshold(), queue.DupThresh)
	}
	// A re-ask the timer asked for again: its second copy proves nothing.
	r.Asked(600, 601)
	r.Forget()
	if r.Duplicate(600) || r.Threshold() != queue.DupThresh {
		t.Fatalf("a copy of a re-ask the timer repeated widened the window to %d", r.Threshold())
	}
	// Two re-asks out before either's second copy: both count.
	r.Asked(500, 501)
	r.Asked(520, 522)
	if !r.Duplicate(521) || !r.Duplicate(500) || r.Threshold() != 4*queue.DupThresh {
		t.Fatalf("two spurious re-asks out at once: threshold %d, want %d", r.Threshold(), 4*queue.DupThresh)
	}
	for range 10 {
		r.Asked(400, 401)
		r.Filled(400, 1000)
		r.Duplicate(400)
	}
	if r.Threshold() != queue.ReoMax {
		t.Fatalf("threshold %d, want at most %d", r.Threshold(), queue.ReoMax)
	}
}
