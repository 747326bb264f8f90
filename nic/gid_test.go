package nic

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/loader"
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

// TestGIDTable builds the table from a link with two IPv4 addresses and
// IPv6: the default GID first, which must be the kernel's own link-local
// address, then the IPv4 addresses, then IPv6, the link-local once.
func TestGIDTable(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1, IPv6: true})
	h := topo.Hosts[0]
	second := netip.MustParseAddr("198.19.101.1")
	var link loader.Link
	var kernelLL []netip.Addr
	err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Link)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: second.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
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
		link, err = loader.LinkInfo(h.Link)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	gids, err := GIDTable(link)
	if err != nil {
		t.Fatal(err)
	}
	def, err := DefaultGID(h.MAC)
	if err != nil {
		t.Fatal(err)
	}
	want := []GID{def, GIDFromAddr(h.Addr), GIDFromAddr(second), GIDFromAddr(h.Addr6)}
	if !slices.Equal(gids, want) {
		t.Errorf("GID table %v, want %v (link addresses %v)", gids, want, link.Addrs)
	}
	for _, ll := range kernelLL {
		if GIDFromAddr(ll) != gids[0] {
			t.Errorf("kernel link-local %v differs from gid[0] %v", ll, gids[0])
		}
	}
	if _, err := GIDTable(loader.Link{Name: "x", MAC: net.HardwareAddr{1, 2, 3}}); err == nil {
		t.Error("GIDTable accepted a 3-byte MAC")
	}
}
