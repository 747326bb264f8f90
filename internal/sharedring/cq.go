package sharedring

import (
	"fmt"
	"syscall"

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

// MoveTo is the sink of ring (checked by the caller to hold depth CQEs),
// with this one's unpolled completions moved to it in order, as
// rxe_queue_resize copies a user queue: what the client consumed is read
// once from the old ring, and the completions before tail that it has not
// are copied to the same indices of the new one; its notification request
// and overflow flag go too. The client may write the old ring meanwhile:
// every index is taken modulo a ring's own size, so nothing it writes moves
// a copy outside either ring; a consumer index that claims more unpolled
// completions than the old ring holds, or more than depth, is EINVAL.
func (c *CQ) MoveTo(ring *uverbs.Ring, depth int, tail uint32) (*CQ, error) {
	old := c.ring
	cons := old.Consumer()
	if n := tail - cons; n > old.Slots() || n > uint32(depth) {
		return nil, fmt.Errorf("sharedring: CQ of %d completions, %d unpolled: %w", depth, n, syscall.EINVAL)
	}
	for i := cons; i != tail; i++ {
		copy(ring.Slot(i), old.Slot(i))
	}
	ring.SetConsumer(cons)
	ring.Aux().Store(old.Aux().Load())
	ring.Aux2().Store(old.Aux2().Load())
	ring.SetProducer(tail)
	return &CQ{ring: ring, notify: c.notify}, nil
}
