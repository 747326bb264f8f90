// Package faketime is a clock for tests that moves only when told, as
// gVisor's faketime: retransmission and RNR timers then run instantly and
// deterministically.
package faketime

import (
	"sync"
	"time"
)

// Clock moves only when Advance is called. While a timer is armed the
// engine looks at the clock at least every idleWait of real time, so an
// Advance takes effect within that.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Clock reading start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
