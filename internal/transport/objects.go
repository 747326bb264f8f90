// QPs by number, as control operations: their numbering, placement on
// an engine and removal.

package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/engine"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
)

// pickQPN chooses a free QPN at random (rxe numbers them from 0x11 up, so
// an off-path attacker knows them; here a forged frame must guess one of
// MaxQP-0x11 as well as the PSN window), or 0 when all are in use. A
// pinned QPN (the golden tests replay captures) is taken first.
func (d *NIC) pickQPN() uint32 {
	o := &d.dev.Objs
	free := func(c uint32) bool { return int(c) >= len(o.Qps) || o.Qps[c] == nil }
	if c := o.NextQPN; c != 0 {
		o.NextQPN = 0
		if c >= engine.FirstUserQPN && c < ibv.MaxQP && free(c) {
			return c
		}
	}
	span := ibv.MaxQP - engine.FirstUserQPN
	start := engine.FirstUserQPN + uint32(d.rng.IntN(span))
	for i := range uint32(span) {
		if c := engine.FirstUserQPN + (start-engine.FirstUserQPN+i)%uint32(span); free(c) {
			return c
		}
	}
	return 0
}

// addQP numbers qp and gives it to the first engine; placeQP moves it to
// its queue's engine once it has a flow. A control operation.
func (d *NIC) addQP(qp *queue.QP) error {
	o := &d.dev.Objs
	var qpn uint32
	switch {
	case qp.GSI && len(o.Qps) > ibv.GSIQPN && o.Qps[ibv.GSIQPN] != nil:
		return fmt.Errorf("verbs: the device has its QP1: %w", ibv.ErrBusy)
	case qp.GSI:
		qpn = ibv.GSIQPN
	default:
		if qpn = d.pickQPN(); qpn == 0 {
			return fmt.Errorf("verbs: all %d QPs in use: %w", ibv.MaxQP, ibv.ErrNoMem)
		}
	}
	for int(qpn) >= len(o.Qps) {
		o.Qps = append(o.Qps, nil)
	}
	qp.Number = qpn
	o.QPSeq++
	qp.OwnerID = memory.Owner(o.QPSeq)
	qp.Transport.Reset(qp)
	qp.Engine.Store(0)
	o.Qps[qpn] = qp
	o.Live = append(o.Live, qp)
	qp.PD.AddUsers(1)
	return nil
}

// removeQP forgets qp; ErrInvalid if it is not one of the device's QPs
// (destroyed already: uverbs rejects a stale handle the same way). A
// control operation.
func (d *NIC) removeQP(qp *queue.QP) error {
	o := &d.dev.Objs
	if int(qp.Number) >= len(o.Qps) || o.Qps[qp.Number] != qp {
		return fmt.Errorf("verbs: QP %#x was destroyed: %w", qp.Number, ibv.ErrInvalid)
	}
	d.detachAll(qp)
	o.Qps[qp.Number] = nil
	qp.PD.AddUsers(-1)
	if qp.Src != nil {
		o.ForgetShared(qp)
	}
	for i, q := range o.Live {
		if q == qp {
			o.Live = append(o.Live[:i], o.Live[i+1:]...)
			break
		}
	}
	d.dev.EngineOf(qp).Deactivate(qp)
	qp.Transport.State = ibv.StateReset
	qp.StateMirror.Store(uint32(ibv.StateReset))
	return nil
}

// placeQP moves qp to the engine of the queue its flow (the UDP source
// port) uses: the queue it transmits on and, on veth and behind a peer's
// RSS on the same port, the one its frames arrive on. A control operation,
// so neither engine is in a step.
func (d *NIC) placeQP(qp *queue.QP) {
	from, to := d.dev.EngineOf(qp), d.dev.Shards[int(qp.Transport.SrcPort)%len(d.dev.Shards)]
	if from == to {
		return
	}
	wasActive := qp.Active
	from.Deactivate(qp)
	qp.Engine.Store(int32(to.Index))
	if wasActive {
		to.Activate(qp)
	}
	// Posts waiting in from's list are passed on by from's next step.
}

// Posted rings the doorbell of the engine serving qp, which gained posted
// work requests (Device).
func (d *NIC) Posted(qp *queue.QP) { d.dev.EngineOf(qp).NotePosted(qp) }

// PostedSRQ rings every engine's doorbell: any may take from an SRQ
// (Device).
func (d *NIC) PostedSRQ() { d.dev.RingAll() }
