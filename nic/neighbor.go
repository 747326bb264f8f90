package nic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/loader"
)

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
		return Path{}, fmt.Errorf("nic: netlink: %w", err)
	}
	defer h.Close()
	return route(h, dst, 0)
}

func route(h *netlink.Handle, dst netip.Addr, oif int) (Path, error) {
	if !dst.IsValid() {
		return Path{}, errors.New("nic: route: invalid destination address")
	}
	dst = dst.Unmap()
	routes, err := h.RouteGetWithOptions(net.IP(dst.AsSlice()), &netlink.RouteGetOptions{OifIndex: oif})
	if err != nil {
		return Path{}, fmt.Errorf("nic: route to %s: %w", dst, err)
	}
	if len(routes) == 0 {
		return Path{}, fmt.Errorf("nic: route to %s: %w", dst, unix.ENETUNREACH)
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
		return nil, fmt.Errorf("nic: netlink: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err != nil {
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			return nil, fmt.Errorf("nic: link %q: %w in this network namespace", ifname, loader.ErrLinkNotFound)
		}
		return nil, fmt.Errorf("nic: link %q: %w", ifname, err)
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
			return nil, fmt.Errorf("nic: neighbour %s on %s: %w", nh, ifname, err)
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
				return nil, fmt.Errorf("nic: neighbour %s on %s: %w", nh, ifname, err)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("nic: neighbour %s on %s not resolved (state %s): %w", nh, ifname, state, ctx.Err())
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
	for range loader.DumpRetries {
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
