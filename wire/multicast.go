package wire

import (
	"net"
	"net/netip"
)

// MulticastQPN is the BTH destination QP of a datagram sent to a multicast
// group (IBTA 9.2: QP 0xFFFFFF); the receiver delivers it to every QP
// attached to the group its destination GID names, as rxe_rcv_mcast_pkt.
const MulticastQPN = 0xffffff

// IsMulticastGID reports whether gid names a multicast group: an
// IPv4-mapped GID of 224.0.0.0/4, or an IPv6 GID of ff00::/8 (the kernel's
// rdma_is_multicast_addr).
func IsMulticastGID(gid netip.Addr) bool { return gid.IsValid() && gid.Unmap().IsMulticast() }

// MulticastMAC is the Ethernet address a frame to the multicast group gid
// goes to, as ib_resolve_eth_dmac maps it: an IPv4-mapped GID to
// 01:00:5e and the low 23 bits of the address (ip_eth_mc_map), an IPv6 one to
// 33:33 and its last 4 bytes (ipv6_eth_mc_map). nil if gid is not multicast.
func MulticastMAC(gid netip.Addr) net.HardwareAddr {
	if !IsMulticastGID(gid) {
		return nil
	}
	a := gid.Unmap()
	if a.Is4() {
		b := a.As4()
		return net.HardwareAddr{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}
	}
	b := a.As16()
	return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
}
