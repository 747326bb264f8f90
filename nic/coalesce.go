package nic

import "time"

// coalescer sizes receive coalescing's sleeps (FrameLink.SetRxCoalesce)
// to the stream: a sleep should gather about coalesceBatch frames, so its
// length follows the arrival rate, between coalesceShortest and the
// longest the link's owner allows. What a sleep gathered is read from the
// RX rings when it ends, before anything takes from them. Bounding the
// batch, not only the time, keeps ACKs coming: a sender holds at most its
// window (rxe's is 128 PSNs) unacknowledged, and on a fast link a sleep of
// the longest interval would hold back all of it.
type coalescer struct {
	longest time.Duration
	cur     time.Duration // a stream's next sleep
}

const (
	// coalesceMinFrames is how many frames since the last Wait make a
	// stream (if more than were sent meanwhile): request and response
	// traffic brings one a wakeup, and holding its wakeups back would only
	// delay the answers.
	coalesceMinFrames = 2
	// coalesceBatch is the batch a sleep aims at: with one batch
	// gathering and one being taken in, well inside rxe's 128-PSN window,
	// so the sender need not stop for an ACK.
	coalesceBatch = 48
	// coalesceShortest is the shortest sleep: below it the timer costs
	// about what the wakeups it saves do.
	coalesceShortest = 20 * time.Microsecond
	// coalesceFirst is a stream's first sleep, before it has been measured.
	coalesceFirst = 100 * time.Microsecond
)

func newCoalescer(longest time.Duration) coalescer {
	if longest <= 0 {
		return coalescer{}
	}
	return coalescer{longest: longest, cur: min(longest, coalesceFirst)}
}

// sleep is how long the Wait after received frames came and sent frames
// left sleeps with the sockets' wakeups disarmed: 0, to arm them, unless
// the frames are a stream into this side, which owes it only ACKs. A side
// that answers requests (a READ responder's requests bring many more
// frames back) must take the next ones as they come: its requester keeps
// only a few outstanding, and would wait out every sleep.
func (c *coalescer) sleep(received, sent int64) time.Duration {
	if c.longest == 0 || received < coalesceMinFrames || received <= sent {
		return 0
	}
	return c.cur
}

// gathered adapts the sleeps to one that ran its course and gathered
// frames: a quarter shorter after a batch half again as big as the aim, a
// quarter longer after one under half of it.
func (c *coalescer) gathered(frames int) {
	switch {
	case frames > coalesceBatch*3/2:
		c.cur = max(c.cur*3/4, min(coalesceShortest, c.longest))
	case frames < coalesceBatch/2:
		c.cur = min(c.cur*5/4, c.longest)
	}
}
