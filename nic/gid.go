package nic

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/xdproce/xdproce/loader"
)

// GID is a RoCEv2 global identifier: an IPv6 address, IPv4 ones mapped as
// ::ffff:a.b.c.d.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address.
func GIDFromAddr(a netip.Addr) GID {
	return GID(a.Unmap().As16())
}

// Addr returns the GID as an address, IPv4-mapped GIDs as IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats the GID as an IPv6 address, e.g. "fe80::5054:ff:fe18:1" or
// "::ffff:198.18.0.11".
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// DefaultGID returns the link-local GID rxe puts at index 0: fe80::/64 with
// the modified EUI-64 interface identifier of the MAC address.
func DefaultGID(mac net.HardwareAddr) (GID, error) {
	if len(mac) != 6 {
		return GID{}, fmt.Errorf("nic: default GID needs a 6-byte MAC address, got %q", mac)
	}
	var g GID
	g[0], g[1] = 0xfe, 0x80
	g[8], g[9], g[10] = mac[0]^0x02, mac[1], mac[2]
	g[11], g[12] = 0xff, 0xfe
	g[13], g[14], g[15] = mac[3], mac[4], mac[5]
	return g, nil
}

// GIDTable returns the RoCEv2 GID table rxe would build for link: the
// default link-local GID derived from the MAC address, then one GID per
// IPv4 address, then the IPv6 addresses, each in the kernel's address order
// and without duplicates (the kernel's own EUI-64 link-local address equals
// the default GID). It describes a table built from scratch: rxe's table
// keeps holes and the order of events when addresses come and go.
func GIDTable(link loader.Link) ([]GID, error) {
	def, err := DefaultGID(link.MAC)
	if err != nil {
		return nil, fmt.Errorf("nic: GID table of %s: %w", link.Name, err)
	}
	gids := []GID{def}
	seen := map[GID]bool{def: true}
	for _, a := range link.Addrs {
		g := GIDFromAddr(a)
		if !seen[g] {
			seen[g] = true
			gids = append(gids, g)
		}
	}
	return gids, nil
}

// rxeMaxHeaderLen is RXE_MAX_HDR_LENGTH: the bytes rxe reserves below the
// netdev MTU for IP, UDP and the IB transport headers.
const rxeMaxHeaderLen = 80

// ActiveMTU returns the IB MTU rxe reports as the port's active_mtu for a
// netdev MTU: the largest of 4096, 2048, 1024, 512 that is at most
// netdevMTU-80, and 256 below that (as rxe, whatever the netdev MTU).
func ActiveMTU(netdevMTU int) int {
	room := netdevMTU - rxeMaxHeaderLen
	for _, m := range []int{4096, 2048, 1024, 512} {
		if room >= m {
			return m
		}
	}
	return 256
}
