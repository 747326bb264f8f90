package nic

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
)

// waitLimit bounds waits for the kernel (ARP, ND after DAD).
const waitLimit = 5 * time.Second

// run runs fn in h's namespace and fails the test on error.
func run(t *testing.T, h *netns.Host, fn func() error) {
	t.Helper()
	if err := h.Do(fn); err != nil {
		t.Fatal(err)
	}
}

func prefix(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

func TestRoute(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1, IPv6: true})
	a, b := topo.Hosts[0], topo.Hosts[1]
	offLink := netip.MustParseAddr("198.19.50.7")
	run(t, a, func() error {
		return netlink.RouteAdd(&netlink.Route{
			LinkIndex: a.Ifindex,
			Dst:       prefix(netip.MustParseAddr("198.19.50.0"), 24),
			Gw:        b.Addr.AsSlice(),
		})
	})
	var onLink, viaGW Path
	run(t, a, func() error {
		var err error
		if onLink, err = Route(b.Addr); err != nil {
			return err
		}
		viaGW, err = Route(offLink)
		return err
	})
	if onLink != (Path{Ifindex: a.Ifindex, NextHop: b.Addr, Src: a.Addr}) {
		t.Errorf("Route(%v) = %+v", b.Addr, onLink)
	}
	if viaGW != (Path{Ifindex: a.Ifindex, Gateway: b.Addr, NextHop: b.Addr, Src: a.Addr}) {
		t.Errorf("Route(%v) = %+v", offLink, viaGW)
	}
	err := a.Do(func() error {
		_, err := Route(netip.MustParseAddr("198.19.60.1"))
		return err
	})
	if err == nil {
		t.Error("Route to an unroutable address succeeded")
	}
}

func TestResolveNeighbor(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1, IPv6: true})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bV6 := b.Addr6
	run(t, a, func() error {
		return netlink.RouteAdd(&netlink.Route{
			LinkIndex: a.Ifindex,
			Dst:       prefix(netip.MustParseAddr("198.19.50.0"), 24),
			Gw:        b.Addr.AsSlice(),
		})
	})

	resolve := func(ip netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
		var mac net.HardwareAddr
		err := a.Do(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			var err error
			mac, err = ResolveNeighbor(ctx, a.Link, ip)
			return err
		})
		return mac, err
	}

	for _, ip := range []netip.Addr{
		b.Addr,                             // on-link IPv4, nothing cached
		netip.MustParseAddr("198.19.50.7"), // off-link: the gateway's MAC
		bV6,                                // IPv6 neighbour discovery
		netip.AddrFrom16(b.Addr.As16()),    // mapped form of the IPv4 peer
	} {
		// IPv6 may take a second or two here: the kernel sends no neighbour
		// solicitation before the link-local address of the fresh link has
		// passed duplicate address detection.
		mac, err := resolve(ip, waitLimit)
		if err != nil {
			t.Errorf("resolve %v: %v", ip, err)
			continue
		}
		if mac.String() != b.MAC.String() {
			t.Errorf("resolve %v = %v, want %v", ip, mac, b.MAC)
		}
	}

	// Nobody answers for .99: the context ends the wait.
	absent := b.Addr.As4()
	absent[3] = 99
	_, err := resolve(netip.AddrFrom4(absent), 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("resolve of an absent host: %v, want DeadlineExceeded", err)
	}
	if _, err := resolve(b.Addr, waitLimit); err != nil {
		t.Errorf("resolve after a failure: %v", err)
	}
}

// The UDP fallback of the resolver alone makes the kernel resolve the
// neighbour.
func TestResolverUDPFallback(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1, IPv6: true})
	a, b := topo.Hosts[0], topo.Hosts[1]
	run(t, a, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		r := &resolver{h: h, ifindex: a.Ifindex, ifname: a.Link, ip: b.Addr}
		defer r.close()
		if err := r.sendUDP(); err != nil {
			return err
		}
		deadline := time.Now().Add(waitLimit)
		for {
			n, found, err := lookupNeighbor(h, a.Ifindex, netlink.FAMILY_V4, b.Addr)
			if err != nil {
				return err
			}
			if found && n.State&nudValid != 0 {
				if n.HardwareAddr.String() != b.MAC.String() {
					return errors.New("resolved to " + n.HardwareAddr.String())
				}
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New("not resolved after the UDP datagram, state " + neighStateString(n.State))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
