package verbs

import (
	"sync"
	"time"
)

// FakeClock is a Clock that moves only when Advance is called, so tests of
// retransmission and RNR timers run instantly and deterministically. The
// engine looks at the clock at least every idleWait of real time, so an
// Advance takes effect within that.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now implements Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
