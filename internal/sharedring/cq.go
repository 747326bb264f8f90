package sharedring

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/uverbs"
)

// CQ writes a CQ's completions to a client's ring: a transport.CQSink.
// notify runs, on an engine, when a completion matches the request the
// client armed in the ring.
type CQ struct {
	ring   *uverbs.Ring
	notify func()
}

// NewCQ is the sink of a CQ whose client reads ring (checked by the
// caller).
func NewCQ(ring *uverbs.Ring, notify func()) *CQ { return &CQ{ring: ring, notify: notify} }

// Full reports whether slot t is still the client's: depth completions
// are unread.
func (c *CQ) Full(t uint32, depth int) bool { return t-c.ring.Consumer() >= uint32(depth) }

// Overflowed tells the client the CQ lost completions.
func (c *CQ) Overflowed() { c.ring.Aux2().Store(1) }

// Put writes completion wc to slot t and publishes it.
func (c *CQ) Put(t uint32, wc ibv.WorkCompletion) {
	r := c.ring
	uverbs.PutCQE(r.Slot(t), &uverbs.CQE{
		WRID: wc.WRID, Status: uint8(wc.Status), Opcode: uint8(wc.Opcode), VendorErr: wc.VendorErr,
		ByteLen: wc.ByteLen, Imm: wc.ImmData, InvalidatedKey: wc.InvalidatedKey, QPNum: wc.QPNum,
		SrcQP: wc.SrcQP, WCFlags: uint32(wc.Flags), NetHdr: wc.IPVersion,
	})
	r.SetProducer(t + 1)
}

// Notify runs notify if the client armed the ring for a completion that is
// solicited (or an error) or for any.
func (c *CQ) Notify(solicited bool) {
	r := c.ring
	if a := r.Aux().Load(); a != uverbs.NotifyOff && (a == uverbs.NotifyAny || solicited) &&
		r.Aux().CompareAndSwap(a, uverbs.NotifyOff) && c.notify != nil {
		c.notify()
	}
}

// MoveTo copies the completions the client has not read, from its
// consumer index to tail, to the start of dst (a fresh ring), with the
// client's notification request, and returns how many. More unread
// completions than dst's depth is EINVAL (rxe's rxe_cq_chk_attr), as is a
// consumer index the ring cannot hold (a client's word).
func (c *CQ) MoveTo(dst *CQ, tail uint32, depth int) (uint32, error) {
	n := tail - c.ring.Consumer()
	if n > c.ring.Slots() || int(n) > depth || depth > int(dst.ring.Slots()) {
		return 0, fmt.Errorf("sharedring: %d unread completions, new depth %d: %w", n, depth, ibv.ErrInvalid)
	}
	for i := range n {
		copy(dst.ring.Slot(i), c.ring.Slot(tail-n+i))
	}
	dst.ring.Aux().Store(c.ring.Aux().Load())
	dst.ring.Aux2().Store(c.ring.Aux2().Load())
	dst.ring.SetProducer(n)
	return n, nil
}
