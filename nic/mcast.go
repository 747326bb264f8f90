package nic

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The port's multicast groups. A group some QP of the device is attached
// to is joined on the interface by a socket the port holds for it
// (IP_ADD_MEMBERSHIP, IPV6_JOIN_GROUP): the kernel then puts the group's
// MAC address in the interface's filter and answers IGMP/MLD queries for
// it, as it does for rdma_cm's joins on rxe (cma_igmp_send). The XDP
// program steers the group's RoCEv2 datagrams to the sockets like those to
// the port's own addresses. One socket per group: a socket holds at most
// igmp_max_memberships (20) IPv4 groups.

// JoinGroup makes the port a member of the multicast group addr (IPv4,
// IPv4-mapped or IPv6). It must run in the interface's network namespace.
// Joining a group twice is an error (EEXIST): the device joins each group
// once, with its first member.
func (p *Port) JoinGroup(addr netip.Addr) (err error) {
	addr = addr.Unmap()
	if !addr.IsMulticast() {
		return fmt.Errorf("nic: %v is not a multicast address: %w", addr, unix.EINVAL)
	}
	p.groupsMu.Lock()
	defer p.groupsMu.Unlock()
	if p.xdp == nil {
		return fmt.Errorf("nic: joining %v: the port is closed: %w", addr, unix.ENODEV)
	}
	if _, ok := p.groups[addr]; ok {
		return fmt.Errorf("nic: already a member of %v: %w", addr, unix.EEXIST)
	}
	fd, err := joinSocket(addr, p.link.Index)
	if err != nil {
		return fmt.Errorf("nic: joining %v on %s: %w", addr, p.link.Name, err)
	}
	if err := p.xdp.AddLocalAddr(addr); err != nil {
		return errors.Join(err, unix.Close(fd))
	}
	if p.groups == nil {
		p.groups = make(map[netip.Addr]int)
	}
	p.groups[addr] = fd
	return nil
}

// LeaveGroup ends the port's membership of addr: the XDP program no longer
// steers it and the kernel leaves it (closing the socket drops it).
func (p *Port) LeaveGroup(addr netip.Addr) error {
	addr = addr.Unmap()
	p.groupsMu.Lock()
	defer p.groupsMu.Unlock()
	fd, ok := p.groups[addr]
	if !ok {
		return fmt.Errorf("nic: not a member of %v: %w", addr, unix.EINVAL)
	}
	delete(p.groups, addr)
	var errs []error
	if p.xdp != nil {
		errs = append(errs, p.xdp.RemoveLocalAddr(addr))
	}
	if err := unix.Close(fd); err != nil {
		errs = append(errs, fmt.Errorf("nic: leaving %v: %w", addr, err))
	}
	return errors.Join(errs...)
}

// Groups lists the groups the port is a member of.
func (p *Port) Groups() []netip.Addr {
	p.groupsMu.Lock()
	defer p.groupsMu.Unlock()
	out := make([]netip.Addr, 0, len(p.groups))
	for a := range p.groups {
		out = append(out, a)
	}
	return out
}

// leaveAll closes every membership (Close).
func (p *Port) leaveAll() error {
	p.groupsMu.Lock()
	defer p.groupsMu.Unlock()
	var errs []error
	for a, fd := range p.groups {
		if err := unix.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("nic: leaving %v: %w", a, err))
		}
	}
	p.groups = nil
	return errors.Join(errs...)
}

// joinSocket opens a datagram socket that holds the membership of addr on
// the interface ifindex; it never sends or receives.
func joinSocket(addr netip.Addr, ifindex int) (int, error) {
	family := unix.AF_INET6
	if addr.Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if addr.Is4() {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: addr.As4(), Ifindex: int32(ifindex)})
	} else {
		err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
			&unix.IPv6Mreq{Multiaddr: addr.As16(), Interface: uint32(ifindex)})
	}
	if err != nil {
		return -1, errors.Join(fmt.Errorf("membership: %w", err), unix.Close(fd))
	}
	return fd, nil
}
