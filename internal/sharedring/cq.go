package sharedring

import (
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
