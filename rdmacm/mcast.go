package rdmacm

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// Multicast joins on RoCEv2, the kernel's half of rdma_join_multicast
// (cma_iboe_join_multicast): no SA to ask, the group's GID is its address
// (an IPv4 group as ::ffff:a.b.c.d) and MULTICAST_JOIN follows at once with
// how to send to it. librdmacm's half attaches the ID's QP to the group
// when the event is reported (ucma_process_join); the port joins the group
// on the interface when a QP of the device attaches (verbs.QP.AttachMcast).

// ErrNotSupp is the kernel's ENOTSUPP (524), which an IPv6 join on RoCEv2
// fails with (cma_iboe_join_multicast).
const ErrNotSupp = syscall.Errno(524)

// JoinMulticast joins the ID to the multicast group addr (rdma_join_multicast;
// sendOnly: RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER). The ID must be a UD one
// bound to one of the device's addresses (ADDR_BOUND or ADDR_RESOLVED);
// EINVAL otherwise, and for the unspecified address; ENOTSUPP for an IPv6
// group, as the kernel's RoCEv2 join. MULTICAST_JOIN then carries the
// address handle attributes of the group, QPN 0xFFFFFF and the ID's Q_Key.
func (id *ID) JoinMulticast(addr netip.Addr, sendOnly bool) error {
	if id.rem != nil {
		return id.remoteOp(uverbs.OpCMJoinMcast, &uverbs.CMJoinMcast{Group: uverbs.CMAddrFrom(netip.AddrPortFrom(addr, 0)), SendOnly: sendOnly})
	}
	ev, err := id.join(addr)
	if err != nil {
		return err
	}
	id.post(ev)
	return nil
}

// join records the group and returns its MULTICAST_JOIN.
func (id *ID) join(addr netip.Addr) (Event, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if !id.ud() {
		return Event{}, fmt.Errorf("rdmacm: multicast on a %v ID: %w", id.ps, ErrInvalid)
	}
	if id.state != stateAddrBound && id.state != stateAddrResolved || !id.src.Addr().IsValid() || id.src.Addr().IsUnspecified() {
		return Event{}, fmt.Errorf("rdmacm: join in %v bound to %v (no device): %w", id.state, id.src.Addr(), ErrInvalid)
	}
	if !addr.IsValid() || addr.IsUnspecified() {
		return Event{}, fmt.Errorf("rdmacm: joining %v: %w", addr, ErrInvalid)
	}
	if !addr.Unmap().Is4() {
		return Event{}, fmt.Errorf("rdmacm: joining IPv6 group %v on RoCEv2: %w", addr, ErrNotSupp)
	}
	mgid := netip.AddrFrom16(addr.Unmap().As16())
	id.groups = append(id.groups, mgid)
	return Event{Type: EventMulticastJoin, UD: UDParam{
		AH:    verbs.AH{DGID: mgid, SGIDIndex: id.sgid, HopLimit: hopLimit},
		QPNum: verbs.McastQPN, QKey: id.qkey,
	}}, nil
}

// LeaveMulticast leaves a group the ID joined (rdma_leave_multicast's kernel
// half): EADDRNOTAVAIL if it did not.
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	if id.rem != nil {
		a := uverbs.CMAddrFrom(netip.AddrPortFrom(addr, 0))
		return id.remoteOp(uverbs.OpCMLeaveMcast, &a)
	}
	mgid := netip.AddrFrom16(addr.Unmap().As16())
	id.mu.Lock()
	defer id.mu.Unlock()
	i := slices.Index(id.groups, mgid)
	if i < 0 {
		return fmt.Errorf("rdmacm: the ID did not join %v: %w", addr, ErrAddrNotAvail)
	}
	id.groups = slices.Delete(id.groups, i, i+1)
	return nil
}
