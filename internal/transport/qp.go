package transport

import (
	"net"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// CreateQP creates a QP in pd with the checked attributes a.
func (d *NIC) CreateQP(pd *PD, a queue.QPInit) (*queue.QP, error) {
	c := a.Cap
	qp := &queue.QP{Dev: d, PD: pd, QPType: a.Type, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ, Caps: c, SigAll: a.SigAll, SRQ: a.SRQ, GSI: a.GSI,
		Closing: &d.dev.CloseBegun, Mem: &d.dev.Objs.Mem, PortMTU: d.dev.Cfg.ActiveMTU}
	if c.MaxInlineData > 0 {
		qp.InlineBuf = make([]byte, c.MaxSendWR*c.MaxInlineData)
	}
	if err := d.do(func() error { return d.addQP(qp) }); err != nil {
		return nil, err
	}
	if qp.SRQ != nil {
		qp.SRQ.AttachedQPs.Add(1)
	}
	return qp, nil
}

// DestroyQP removes the QP. Outstanding work is dropped without completions.
func (d *NIC) DestroyQP(qp *queue.QP) error {
	err := d.do(func() error {
		d.dev.EngineOf(qp).FastTakeOver(qp) // the program stops executing its WRITEs
		return d.removeQP(qp)
	})
	if err == nil && qp.SRQ != nil {
		qp.SRQ.AttachedQPs.Add(-1)
	}
	return err
}

// QueryQP returns the QP's attributes.
func (d *NIC) QueryQP(qp *queue.QP) (ibv.QPAttr, error) {
	var a ibv.QPAttr
	err := d.do(func() error {
		a = qp.Transport.Attr
		a.State = qp.Transport.State
		a.CurState = qp.Transport.State
		a.SQDraining = qp.Transport.Draining
		a.Cap = qp.Caps
		return nil
	})
	return a, err
}

// ModifyQP applies a Modify the API validated: check, run as a control
// operation, vets the transition against the QP's current state (and
// whether its send queue is draining); dmac is the resolved next hop when
// mask has AttrAV.
func (d *NIC) ModifyQP(qp *queue.QP, attr ibv.QPAttr, mask ibv.AttrMask, dmac net.HardwareAddr, check func(cur ibv.QPState, draining bool) error) error {
	// A client of the daemon reads a shared QP's state from its ring.
	defer qp.PublishState()
	return d.do(func() error {
		if err := check(qp.Transport.State, qp.Transport.Draining); err != nil {
			return err
		}
		next := qp.Transport.State
		if mask&ibv.AttrState != 0 {
			next = attr.State
		}
		d.modify(d.dev.EngineOf(qp), qp, attr, mask, next, dmac)
		if mask&(ibv.AttrAV|ibv.AttrDestQPN) != 0 {
			d.placeQP(qp)
		}
		return nil
	})
}
