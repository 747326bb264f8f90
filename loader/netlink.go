package loader

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrLinkNotFound is returned when the named link does not exist in the
// calling thread's network namespace.
var ErrLinkNotFound = errors.New("link not found")

// Link describes a network interface.
type Link struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	MTU   int
	// OperState is the RFC 2863 operational state as the kernel reports
	// it: "up", "down", "unknown", "lower-layer-down", "dormant", ...
	OperState string
	// Up reports whether the link is administratively up (IFF_UP).
	Up bool
	// NumRXQueues is how many RX queues the driver uses (its ethtool
	// channels); where it does not report them, how many it allocated.
	NumRXQueues int
	NumTXQueues int
	// XDPProgramID is the ID of the attached XDP program, 0 if none.
	XDPProgramID uint32
}

// LinkInfo describes the link ifname of the calling thread's network
// namespace.
func LinkInfo(ifname string) (Link, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return Link{}, fmt.Errorf("loader: netlink: %w", err)
	}
	defer h.Close()
	l, err := linkByName(h, ifname)
	if err != nil {
		return Link{}, err
	}
	a := l.Attrs()
	info := Link{
		Name:        a.Name,
		Index:       a.Index,
		MAC:         a.HardwareAddr,
		MTU:         a.MTU,
		OperState:   a.OperState.String(),
		Up:          a.Flags&net.FlagUp != 0,
		NumRXQueues: a.NumRxQueues,
		NumTXQueues: a.NumTxQueues,
	}
	if a.Xdp != nil && a.Xdp.Attached {
		info.XDPProgramID = a.Xdp.ProgId
	}
	if n, ok, err := activeRXQueues(a.Name); err != nil {
		return Link{}, err
	} else if ok && n < info.NumRXQueues {
		info.NumRXQueues = n
	}
	return info, nil
}

func linkByName(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("loader: link %q: %w in this network namespace", name, ErrLinkNotFound)
		}
		return nil, fmt.Errorf("loader: link %q: %w", name, err)
	}
	return l, nil
}

// dumpRetries bounds the retries of a netlink dump that the kernel reports
// as interrupted (the table changed during the dump).
const dumpRetries = 5

func addrList(h *netlink.Handle, l netlink.Link, family int) ([]netlink.Addr, error) {
	var (
		addrs []netlink.Addr
		err   error
	)
	for range dumpRetries {
		addrs, err = h.AddrList(l, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return addrs, err
}

// linkAddrs lists the link's IPv4 addresses then its IPv6 addresses, in the
// kernel's order.
func linkAddrs(h *netlink.Handle, l netlink.Link) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		addrs, err := addrList(h, l, family)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

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
		return GID{}, fmt.Errorf("loader: default GID needs a 6-byte MAC address, got %q", mac)
	}
	var g GID
	g[0], g[1] = 0xfe, 0x80
	g[8], g[9], g[10] = mac[0]^0x02, mac[1], mac[2]
	g[11], g[12] = 0xff, 0xfe
	g[13], g[14], g[15] = mac[3], mac[4], mac[5]
	return g, nil
}

// GIDTable returns the RoCEv2 GID table rxe would build for the link ifname
// of the calling thread's network namespace: the default link-local GID
// derived from the MAC address, then one GID per IPv4 address, then the
// IPv6 addresses, each in the kernel's address order and without
// duplicates (the kernel's own EUI-64 link-local address equals the default
// GID). It describes a table built from scratch: rxe's table keeps holes
// and the order of events when addresses come and go.
func GIDTable(ifname string) ([]GID, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("loader: netlink: %w", err)
	}
	defer h.Close()
	l, err := linkByName(h, ifname)
	if err != nil {
		return nil, err
	}
	def, err := DefaultGID(l.Attrs().HardwareAddr)
	if err != nil {
		return nil, fmt.Errorf("loader: GID table of %s: %w", ifname, err)
	}
	addrs, err := linkAddrs(h, l)
	if err != nil {
		return nil, fmt.Errorf("loader: addresses of %s: %w", ifname, err)
	}
	gids := []GID{def}
	seen := map[GID]bool{def: true}
	for _, a := range addrs {
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

// Path is where the kernel routes packets for a destination.
type Path struct {
	// Ifindex is the output interface.
	Ifindex int
	// Gateway is the router, invalid when the destination is on-link.
	Gateway netip.Addr
	// NextHop is the neighbour frames go to: Gateway, or the destination.
	NextHop netip.Addr
	// Src is the preferred source address.
	Src netip.Addr
}

// Route looks up dst in the routing table of the calling thread's network
// namespace, as `ip route get` does.
func Route(dst netip.Addr) (Path, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return Path{}, fmt.Errorf("loader: netlink: %w", err)
	}
	defer h.Close()
	return route(h, dst, 0)
}

func route(h *netlink.Handle, dst netip.Addr, oif int) (Path, error) {
	if !dst.IsValid() {
		return Path{}, errors.New("loader: route: invalid destination address")
	}
	dst = dst.Unmap()
	routes, err := h.RouteGetWithOptions(net.IP(dst.AsSlice()), &netlink.RouteGetOptions{OifIndex: oif})
	if err != nil {
		return Path{}, fmt.Errorf("loader: route to %s: %w", dst, err)
	}
	if len(routes) == 0 {
		return Path{}, fmt.Errorf("loader: route to %s: %w", dst, unix.ENETUNREACH)
	}
	r := routes[0]
	p := Path{Ifindex: r.LinkIndex, NextHop: dst.WithZone("")}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && !gw.IsUnspecified() {
		p.Gateway = gw.Unmap()
		p.NextHop = p.Gateway
	}
	if src, ok := netip.AddrFromSlice(r.Src); ok {
		p.Src = src.Unmap()
	}
	return p, nil
}

// Backoff of ResolveNeighbor's polling.
const (
	neighPollMin = time.Millisecond
	neighPollMax = 100 * time.Millisecond
)

// ResolveNeighbor returns the MAC address frames to ip leave ifname with:
// that of ip itself if it is on-link, else that of the gateway the routing
// table names. If the neighbour table has no usable entry it triggers ARP or
// neighbour discovery and polls, with backoff, until the entry is usable
// (REACHABLE, STALE, DELAY, PROBE, PERMANENT) or ctx ends. It acts in the
// calling thread's network namespace.
func ResolveNeighbor(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("loader: netlink: %w", err)
	}
	defer h.Close()
	l, err := linkByName(h, ifname)
	if err != nil {
		return nil, err
	}
	ifindex := l.Attrs().Index
	p, err := route(h, ip, ifindex)
	if err != nil {
		return nil, err
	}
	nh := p.NextHop
	family := netlink.FAMILY_V4
	if nh.Is6() {
		family = netlink.FAMILY_V6
	}

	var trigger *resolver
	defer func() { trigger.close() }()
	state := "none"
	delay := neighPollMin
	for {
		n, found, err := lookupNeighbor(h, ifindex, family, nh)
		if err != nil {
			return nil, fmt.Errorf("loader: neighbour %s on %s: %w", nh, ifname, err)
		}
		if found {
			state = neighStateString(n.State)
			if n.State&nudValid != 0 && len(n.HardwareAddr) > 0 {
				return n.HardwareAddr, nil
			}
		}
		// Missing and failed entries need a (new) solicitation; an
		// INCOMPLETE one is being resolved by the kernel.
		if !found || n.State == netlink.NUD_NONE || n.State&netlink.NUD_FAILED != 0 {
			if trigger == nil {
				trigger = &resolver{h: h, ifindex: ifindex, ifname: ifname, ip: nh}
			}
			if err := trigger.solicit(); err != nil {
				return nil, fmt.Errorf("loader: neighbour %s on %s: %w", nh, ifname, err)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("loader: neighbour %s on %s not resolved (state %s): %w", nh, ifname, state, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, neighPollMax)
	}
}

// nudValid is the kernel's NUD_VALID: states whose link-layer address is
// used for sending.
const nudValid = netlink.NUD_PERMANENT | netlink.NUD_NOARP | netlink.NUD_REACHABLE |
	netlink.NUD_PROBE | netlink.NUD_STALE | netlink.NUD_DELAY

func lookupNeighbor(h *netlink.Handle, ifindex, family int, ip netip.Addr) (netlink.Neigh, bool, error) {
	var (
		neighs []netlink.Neigh
		err    error
	)
	for range dumpRetries {
		neighs, err = h.NeighList(ifindex, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return netlink.Neigh{}, false, err
	}
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n, true, nil
		}
	}
	return netlink.Neigh{}, false, nil
}

func neighStateString(s int) string {
	names := []struct {
		bit  int
		name string
	}{
		{netlink.NUD_INCOMPLETE, "INCOMPLETE"}, {netlink.NUD_REACHABLE, "REACHABLE"},
		{netlink.NUD_STALE, "STALE"}, {netlink.NUD_DELAY, "DELAY"}, {netlink.NUD_PROBE, "PROBE"},
		{netlink.NUD_FAILED, "FAILED"}, {netlink.NUD_NOARP, "NOARP"}, {netlink.NUD_PERMANENT, "PERMANENT"},
	}
	for _, n := range names {
		if s&n.bit != 0 {
			return n.name
		}
	}
	return "NONE"
}

// resolver makes the kernel solicit a neighbour: first with an RTM_NEWNEIGH
// carrying NTF_USE (as `ip neigh ... use`), else by sending an empty UDP
// datagram to the discard port through a socket bound to the device.
type resolver struct {
	h       *netlink.Handle
	ifindex int
	ifname  string
	ip      netip.Addr
	fd      int // UDP fallback socket, 0 until created
}

func (r *resolver) solicit() error {
	err := r.h.NeighSet(&netlink.Neigh{
		LinkIndex: r.ifindex,
		IP:        net.IP(r.ip.AsSlice()),
		Flags:     netlink.NTF_USE,
	})
	if err == nil {
		return nil
	}
	if udpErr := r.sendUDP(); udpErr != nil {
		return fmt.Errorf("trigger resolution: netlink: %v; UDP: %w", err, udpErr)
	}
	return nil
}

func (r *resolver) sendUDP() error {
	const discardPort = 9
	var sa unix.Sockaddr
	family := unix.AF_INET
	if r.ip.Is6() {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: discardPort, Addr: r.ip.As16(), ZoneId: uint32(r.ifindex)}
	} else {
		sa = &unix.SockaddrInet4{Port: discardPort, Addr: r.ip.As4()}
	}
	if r.fd == 0 {
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		if err := unix.BindToDevice(fd, r.ifname); err != nil {
			unix.Close(fd)
			return err
		}
		r.fd = fd
	}
	err := unix.Sendto(r.fd, nil, unix.MSG_DONTWAIT, sa)
	// The datagram may be refused or queued; the solicitation is what
	// counts.
	if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.EHOSTUNREACH) {
		return err
	}
	return nil
}

func (r *resolver) close() {
	if r != nil && r.fd > 0 {
		unix.Close(r.fd)
	}
}
