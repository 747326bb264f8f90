package loader

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestActiveMTU(t *testing.T) {
	// Values observed on real rxe (shared/rxe-peer README) plus the edges.
	for netdev, want := range map[int]int{
		9000: 4096, 4176: 4096, 4172: 2048, 4154: 2048, 2128: 2048, 2127: 1024,
		2100: 1024, 1500: 1024, 1104: 1024, 1103: 512, 592: 512, 591: 256, 576: 256, 68: 256,
	} {
		if got := ActiveMTU(netdev); got != want {
			t.Errorf("ActiveMTU(%d) = %d, want %d", netdev, got, want)
		}
	}
}

func TestDefaultGID(t *testing.T) {
	// VM1 of the rxe peer: MAC 52:54:00:18:00:01, gid[0] fe80::5054:ff:fe18:1.
	g, err := DefaultGID(net.HardwareAddr{0x52, 0x54, 0x00, 0x18, 0x00, 0x01})
	if err != nil {
		t.Fatal(err)
	}
	if g.String() != "fe80::5054:ff:fe18:1" {
		t.Errorf("default GID %s, want fe80::5054:ff:fe18:1", g)
	}
	if _, err := DefaultGID(net.HardwareAddr{1, 2, 3}); err == nil {
		t.Error("DefaultGID accepted a 3-byte MAC")
	}
	v4 := GIDFromAddr(netip.MustParseAddr("198.18.0.11"))
	if v4.String() != "::ffff:198.18.0.11" || v4.Addr() != netip.MustParseAddr("198.18.0.11") {
		t.Errorf("IPv4 GID %s / %s", v4, v4.Addr())
	}
}

func TestLinkInfo(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 4200, queues: 2})
	l := linkInfo(t, p.A, p.AName)
	if l.Name != p.AName || l.Index != p.AIndex || l.MTU != 4200 || l.MAC.String() != p.AMAC.String() ||
		l.NumRXQueues != 2 || l.NumTXQueues != 2 || !l.Up || l.OperState != "up" || l.XDPProgramID != 0 {
		t.Errorf("LinkInfo = %+v", l)
	}
	err := p.A.do(func() error {
		_, err := LinkInfo("xdpl-nosuchlnk")
		return err
	})
	if !errors.Is(err, ErrLinkNotFound) {
		t.Errorf("LinkInfo of a missing link: %v, want ErrLinkNotFound", err)
	}
}

// A veth made without queue counts (as `ip link add ... type veth`, and so
// rxe-peer's veth) allocates a queue per CPU but uses one; LinkInfo must
// count the one in use, or AF_XDP sockets would be bound to queues that do
// not exist.
func TestLinkInfoCountsActiveQueues(t *testing.T) {
	ns := newNS(t)
	name := shortName("xlq")
	if out, err := exec.Command("ip", "-n", ns.name, "link", "add", name, "type", "veth", "peer", "name", name+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v\n%s", err, out)
	}
	if l := linkInfo(t, ns, name); l.NumRXQueues != 1 {
		t.Errorf("NumRXQueues = %d, want the one queue veth uses", l.NumRXQueues)
	}
}

func TestGIDTable(t *testing.T) {
	p := newPair(t, pairOpts{})
	second := netip.MustParseAddr("198.18.101.1")
	global := netip.MustParseAddr("fd00:198:18::1")
	p.A.run(t, func() error {
		l, err := netlink.LinkByName(p.AName)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: prefix(second, 24)}); err != nil {
			return err
		}
		return addAddr6(p.AName, global)
	})
	var gids []GID
	var kernelLL []netip.Addr
	p.A.run(t, func() error {
		var err error
		if gids, err = GIDTable(p.AName); err != nil {
			return err
		}
		// The kernel's own link-local address (EUI-64, the default
		// addr_gen_mode) must coincide with gid[0].
		l, err := netlink.LinkByName(p.AName)
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, unix.AF_INET6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, _ := netip.AddrFromSlice(a.IP); ip.IsLinkLocalUnicast() {
				kernelLL = append(kernelLL, ip)
			}
		}
		return nil
	})
	want := []string{"fe80::5eff:fe10:1", "::ffff:198.18.100.1", "::ffff:198.18.101.1", "fd00:198:18::1"}
	var got []string
	for _, g := range gids {
		got = append(got, g.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("GID table %v, want %v", got, want)
	}
	for _, ll := range kernelLL {
		if GIDFromAddr(ll) != gids[0] {
			t.Errorf("kernel link-local %v differs from gid[0] %v", ll, gids[0])
		}
	}
}

func TestRoute(t *testing.T) {
	p := newPair(t, pairOpts{})
	offLink := netip.MustParseAddr("198.19.50.7")
	p.A.run(t, func() error {
		return netlink.RouteAdd(&netlink.Route{
			LinkIndex: p.AIndex,
			Dst:       prefix(netip.MustParseAddr("198.19.50.0"), 24),
			Gw:        p.BAddr.AsSlice(),
		})
	})
	var onLink, viaGW Path
	p.A.run(t, func() error {
		var err error
		if onLink, err = Route(p.BAddr); err != nil {
			return err
		}
		viaGW, err = Route(offLink)
		return err
	})
	if onLink != (Path{Ifindex: p.AIndex, NextHop: p.BAddr, Src: p.AAddr}) {
		t.Errorf("Route(%v) = %+v", p.BAddr, onLink)
	}
	if viaGW != (Path{Ifindex: p.AIndex, Gateway: p.BAddr, NextHop: p.BAddr, Src: p.AAddr}) {
		t.Errorf("Route(%v) = %+v", offLink, viaGW)
	}
	err := p.A.do(func() error {
		_, err := Route(netip.MustParseAddr("198.19.60.1"))
		return err
	})
	if err == nil {
		t.Error("Route to an unroutable address succeeded")
	}
}

func TestResolveNeighbor(t *testing.T) {
	p := newPair(t, pairOpts{})
	aV6, bV6 := netip.MustParseAddr("fd00:198:18:100::1"), netip.MustParseAddr("fd00:198:18:100::2")
	p.A.run(t, func() error {
		if err := addAddr6(p.AName, aV6); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{
			LinkIndex: p.AIndex,
			Dst:       prefix(netip.MustParseAddr("198.19.50.0"), 24),
			Gw:        p.BAddr.AsSlice(),
		})
	})
	p.B.run(t, func() error { return addAddr6(p.BName, bV6) })

	resolve := func(ip netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
		var mac net.HardwareAddr
		err := p.A.do(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			var err error
			mac, err = ResolveNeighbor(ctx, p.AName, ip)
			return err
		})
		return mac, err
	}

	for _, ip := range []netip.Addr{
		p.BAddr,                            // on-link IPv4, nothing cached
		netip.MustParseAddr("198.19.50.7"), // off-link: the gateway's MAC
		bV6,                                // IPv6 neighbour discovery
		netip.MustParseAddr("::ffff:198.18.100.2"), // mapped form of the IPv4 peer
	} {
		// IPv6 may take a second or two here: the kernel sends no neighbour
		// solicitation before the link-local address of the fresh link has
		// passed duplicate address detection.
		mac, err := resolve(ip, waitLimit)
		if err != nil {
			t.Errorf("resolve %v: %v", ip, err)
			continue
		}
		if mac.String() != p.BMAC.String() {
			t.Errorf("resolve %v = %v, want %v", ip, mac, p.BMAC)
		}
	}

	// Nobody answers for .99: the context ends the wait.
	_, err := resolve(netip.MustParseAddr("198.18.100.99"), 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("resolve of an absent host: %v, want DeadlineExceeded", err)
	}
	if _, err := resolve(p.BAddr, waitLimit); err != nil {
		t.Errorf("resolve after a failure: %v", err)
	}
}

// The UDP fallback of the resolver alone makes the kernel resolve the
// neighbour.
func TestResolverUDPFallback(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.A.run(t, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		r := &resolver{h: h, ifindex: p.AIndex, ifname: p.AName, ip: p.BAddr}
		defer r.close()
		if err := r.sendUDP(); err != nil {
			return err
		}
		deadline := time.Now().Add(waitLimit)
		for {
			n, found, err := lookupNeighbor(h, p.AIndex, netlink.FAMILY_V4, p.BAddr)
			if err != nil {
				return err
			}
			if found && n.State&nudValid != 0 {
				if n.HardwareAddr.String() != p.BMAC.String() {
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
