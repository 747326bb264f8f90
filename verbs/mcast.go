package verbs

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/wire"
)

// Multicast on RoCEv2, as rxe: a UD QP attached to a group's GID receives
// the datagrams sent to the group's IP address with the multicast QPN
// (0xFFFFFF); a datagram to a group goes to its mapped MAC address
// (wire.MulticastMAC), and the device's own QPs attached to the group get
// it too. The first QP of the device to attach to a group joins it on the
// port (DeviceConfig.Groups: IGMP/MLD membership, the MAC in the
// interface's filter, the XDP program steering the group's address).

// McastQPN is the QPN a datagram to a multicast group is sent to, the
// qp_num of RDMA_CM_EVENT_MULTICAST_JOIN.
const McastQPN = wire.MulticastQPN

// AttachMcast attaches the UD QP to the multicast group gid
// (ibv_attach_mcast). lid is ignored, as the kernel ignores it on RoCE.
// EINVAL for a QP that is not UD or a GID that is not multicast; attaching
// again is no error; ENOMEM past the device's limits (rxe's).
func (qp *QP) AttachMcast(gid netip.Addr, lid uint16) error {
	if qp.att != nil {
		return qp.mcastAttached(uverbs.OpAttachMcast, gid, lid)
	}
	return qp.c.AttachMcast(gid)
}

// DetachMcast detaches the QP from the group gid (ibv_detach_mcast): EINVAL
// if it is not attached.
func (qp *QP) DetachMcast(gid netip.Addr, lid uint16) error {
	if qp.att != nil {
		return qp.mcastAttached(uverbs.OpDetachMcast, gid, lid)
	}
	return qp.c.DetachMcast(gid)
}

// mcastAttached asks the daemon to attach or detach the QP.
func (qp *QP) mcastAttached(op uverbs.Op, gid netip.Addr, lid uint16) error {
	if !gid.IsValid() {
		return fmt.Errorf("verbs: multicast GID missing: %w", ErrInvalid)
	}
	m := uverbs.McastReq{QP: qp.att.h, GID: gid.As16(), LID: lid}
	_, err := qp.dev.att.callNoFDs(op, m.Put)
	return err
}

// mcastMAC is the MAC address of a multicast GID; ok false if gid is
// not one.
func mcastMAC(gid netip.Addr) ([]byte, bool) {
	m := wire.MulticastMAC(gid)
	return m, m != nil
}
