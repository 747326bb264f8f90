// The device's object tables, shared by its engines: QPs by number and
// their placement on an engine.

package transport

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
)

// objects are the device's tables, shared by its engines: the QPs by QPN,
// the memory regions and windows, the protection domains' numbers and the
// asynchronous events. Control operations (Device.do) change them with
// every engine's mutex held, so an engine reads them under its own mutex
// alone; the few changes an engine makes itself (binding and invalidating
// windows, atomics) take the narrower locks below.
type objects struct {
	qps     []*queue.QP // by QPN; nil where free
	live    []*queue.QP // QPs that exist, in creation order
	nextQPN uint32      // a QPN to use next if free (the golden tests pin the captures' QPNs); 0: random
	// qpSeq numbers the QPs ever created: their owner identities, which
	// the memory windows bound through them keep (QPNs are reused).
	qpSeq uint64
	// mem holds the memory regions and windows; it has its own locks for
	// posters (inline data) and for the windows the engines bind.
	mem memory.Table
	// atomicMu makes each atomic operation's read-modify-write one step
	// for every engine (IBV_ATOMIC_HCA: atomic across all QPs of the
	// device), as rxe's atomic_ops_lock does.
	atomicMu sync.Mutex
	pdSeq    uint32
	// sharedQPs are the QPs whose work requests a daemon's clients post to
	// shared rings (shared.go).
	sharedQPs []*queue.QP
	// sharedSRQs are the SRQs a daemon's clients post to shared rings.
	sharedSRQs []*queue.SRQ
	events     queue.EventQueue // asynchronous events, read by Device.GetAsyncEvent
	// groups are the multicast groups QPs are attached to, by their
	// address as frames carry it; mcAttached counts the attachments
	// (mcast.go).
	groups     map[netip.Addr]*mcGroup
	mcAttached int
}

// pickQPN chooses a free QPN at random (rxe numbers them from 0x11 up, so
// an off-path attacker knows them; here a forged frame must guess one of
// MaxQP-0x11 as well as the PSN window), or 0 when all are in use. A
// pinned QPN (the golden tests replay captures) is taken first.
func (d *NIC) pickQPN() uint32 {
	o := &d.objs
	free := func(c uint32) bool { return int(c) >= len(o.qps) || o.qps[c] == nil }
	if c := o.nextQPN; c != 0 {
		o.nextQPN = 0
		if c >= firstUserQPN && c < ibv.MaxQP && free(c) {
			return c
		}
	}
	span := ibv.MaxQP - firstUserQPN
	start := firstUserQPN + uint32(d.rng.IntN(span))
	for i := range uint32(span) {
		if c := firstUserQPN + (start-firstUserQPN+i)%uint32(span); free(c) {
			return c
		}
	}
	return 0
}

// addQP numbers qp and gives it to the first engine; placeQP moves it to
// its queue's engine once it has a flow. A control operation.
func (d *NIC) addQP(qp *queue.QP) error {
	o := &d.objs
	var qpn uint32
	switch {
	case qp.GSI && len(o.qps) > ibv.GSIQPN && o.qps[ibv.GSIQPN] != nil:
		return fmt.Errorf("verbs: the device has its QP1: %w", ibv.ErrBusy)
	case qp.GSI:
		qpn = ibv.GSIQPN
	default:
		if qpn = d.pickQPN(); qpn == 0 {
			return fmt.Errorf("verbs: all %d QPs in use: %w", ibv.MaxQP, ibv.ErrNoMem)
		}
	}
	for int(qpn) >= len(o.qps) {
		o.qps = append(o.qps, nil)
	}
	qp.Number = qpn
	o.qpSeq++
	qp.OwnerID = memory.Owner(o.qpSeq)
	qp.Transport.Reset(qp)
	qp.Engine.Store(0)
	o.qps[qpn] = qp
	o.live = append(o.live, qp)
	qp.PD.AddUsers(1)
	return nil
}

// removeQP forgets qp; ErrInvalid if it is not one of the device's QPs
// (destroyed already: uverbs rejects a stale handle the same way). A
// control operation.
func (d *NIC) removeQP(qp *queue.QP) error {
	o := &d.objs
	if int(qp.Number) >= len(o.qps) || o.qps[qp.Number] != qp {
		return fmt.Errorf("verbs: QP %#x was destroyed: %w", qp.Number, ibv.ErrInvalid)
	}
	d.detachAll(qp)
	o.qps[qp.Number] = nil
	qp.PD.AddUsers(-1)
	if qp.Src != nil {
		o.forgetShared(qp)
	}
	for i, q := range o.live {
		if q == qp {
			o.live = append(o.live[:i], o.live[i+1:]...)
			break
		}
	}
	d.engineOf(qp).deactivate(qp)
	qp.Transport.State = ibv.StateReset
	qp.StateMirror.Store(uint32(ibv.StateReset))
	return nil
}

// placeQP moves qp to the engine of the queue its flow (the UDP source
// port) uses: the queue it transmits on and, on veth and behind a peer's
// RSS on the same port, the one its frames arrive on. A control operation,
// so neither engine is in a step.
func (d *NIC) placeQP(qp *queue.QP) {
	from, to := d.engineOf(qp), d.shards[int(qp.Transport.SrcPort)%len(d.shards)]
	if from == to {
		return
	}
	wasActive := qp.Active
	from.deactivate(qp)
	qp.Engine.Store(int32(to.index))
	if wasActive {
		to.activate(qp)
	}
	// Posts waiting in from's list are passed on by from's next step.
}

// engineOf is the engine serving qp.
func (d *device) engineOf(qp *queue.QP) *engine { return d.shards[qp.Engine.Load()] }

// Posted rings the doorbell of the engine serving qp, which gained posted
// work requests (Device).
func (d *NIC) Posted(qp *queue.QP) { d.engineOf(qp).notePosted(qp) }

// PostedSRQ rings every engine's doorbell: any may take from an SRQ
// (Device).
func (d *NIC) PostedSRQ() { d.ringAll() }
