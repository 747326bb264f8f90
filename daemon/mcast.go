package daemon

import (
	"net/netip"
	"syscall"

	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/uverbs"
)

// mcastOp is ATTACH_MCAST and DETACH_MCAST (ibv_attach_mcast and
// ibv_detach_mcast) on one of the session's QPs. A QP's groups go with it
// when it is destroyed, by its owner or because the client went away.
func (ss *session) mcastOp(op uverbs.Op, d *uverbs.Decoder) error {
	var m uverbs.McastReq
	m.Get(d)
	if err := d.End(); err != nil {
		return err
	}
	q := ss.qps[m.QP]
	if q == nil {
		return syscall.EINVAL
	}
	gid := netip.AddrFrom16(m.GID)
	if op == uverbs.OpAttachMcast {
		return q.qp.AttachMcast(gid, m.LID)
	}
	return q.qp.DetachMcast(gid, m.LID)
}

// cmJoinMcast is CM_JOIN_MCAST: the kernel's half of rdma_join_multicast
// (the client's library attaches its QP when MULTICAST_JOIN is reported).
func (ss *session) cmJoinMcast(id *rdmacm.ID, d *uverbs.Decoder) error {
	var r uverbs.CMJoinMcast
	d.Get(&r)
	if err := d.End(); err != nil {
		return err
	}
	sendOnly := r.SendOnly
	ap, err := r.Group.AddrPort()
	if err != nil {
		return err
	}
	return id.JoinMulticast(ap.Addr(), sendOnly)
}

// cmLeaveMcast is CM_LEAVE_MCAST.
func (ss *session) cmLeaveMcast(id *rdmacm.ID, d *uverbs.Decoder) error {
	var a uverbs.CMAddr
	a.Get(d)
	if err := d.End(); err != nil {
		return err
	}
	ap, err := a.AddrPort()
	if err != nil {
		return err
	}
	return id.LeaveMulticast(ap.Addr())
}
