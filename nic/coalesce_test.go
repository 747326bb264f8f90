package nic

import (
	"testing"
	"time"
)

// TestCoalescer: only a stream into this side sleeps; sleeps start at
// coalesceFirst and follow what each gathered, within their bounds.
func TestCoalescer(t *testing.T) {
	var off coalescer
	if s := off.sleep(100, 0); s != 0 {
		t.Fatalf("coalescing off slept %v", s)
	}
	c := newCoalescer(2 * time.Millisecond)
	for _, tc := range []struct {
		received, sent int64
		stream         bool
	}{{0, 0, false}, {1, 0, false}, {2, 0, true}, {50, 1, true}, {16, 16, false}, {16, 512, false}} {
		if got := c.sleep(tc.received, tc.sent) > 0; got != tc.stream {
			t.Errorf("%d frames in, %d out: sleeps %v, want %v", tc.received, tc.sent, got, tc.stream)
		}
	}
	if s := c.sleep(2, 0); s != coalesceFirst {
		t.Fatalf("first sleep %v, want %v", s, coalesceFirst)
	}
	c.gathered(coalesceBatch) // on aim: unchanged
	if c.cur != coalesceFirst {
		t.Fatalf("a sleep on aim moved the next to %v", c.cur)
	}
	c.gathered(2) // too few: longer, up to the longest
	if c.cur != coalesceFirst*5/4 {
		t.Fatalf("after a small batch: %v", c.cur)
	}
	for range 50 {
		c.gathered(2)
	}
	if c.cur != 2*time.Millisecond {
		t.Fatalf("a slow stream's sleeps: %v, want the longest", c.cur)
	}
	c.gathered(coalesceBatch * 2) // too many: shorter, down to the shortest
	if c.cur != 1500*time.Microsecond {
		t.Fatalf("after a big batch: %v", c.cur)
	}
	for range 50 {
		c.gathered(1000)
	}
	if c.cur != coalesceShortest {
		t.Fatalf("a fast stream's sleeps: %v, want %v", c.cur, coalesceShortest)
	}
	tiny := newCoalescer(5 * time.Microsecond)
	tiny.gathered(1000)
	if s := tiny.sleep(2, 0); s != 5*time.Microsecond {
		t.Fatalf("sleeps of a 5µs coalescer: %v", s)
	}
}
