package netns_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustPing(t *testing.T, from *netns.Host, to *netns.Host, v6 bool, size int) {
	t.Helper()
	dst := to.Addr
	if v6 {
		dst = to.Addr6
	}
	if err := from.Ping(ctxFor(t, 5*time.Second), dst, size); err != nil {
		t.Fatalf("ping %s -> %s (%v, %d bytes): %v", from.Name, to.Name, dst, size, err)
	}
}

func TestKindsPing(t *testing.T) {
	for _, kind := range []netns.Kind{netns.Bridge, netns.Direct, netns.Router} {
		t.Run(kind.String(), func(t *testing.T) {
			cfg := netns.Config{Kind: kind, IPv6: true}
			if kind != netns.Direct {
				cfg.Hosts = []netns.HostConfig{{}, {}, {Name: "c3"}}
			}
			topo := netns.New(t, cfg)
			if (topo.Wire == nil) != (kind == netns.Direct) {
				t.Fatalf("wire namespace present = %v for %v", topo.Wire != nil, kind)
			}
			for _, from := range topo.Hosts {
				for _, to := range topo.Hosts {
					if from != to {
						mustPing(t, from, to, false, 56)
						mustPing(t, from, to, true, 56)
					}
				}
			}
			for _, h := range topo.Hosts {
				if !strings.HasPrefix(h.Addr.String(), "198.18.") || !netPrefix1518(h.Addr.AsSlice()) {
					t.Errorf("host %s address %v outside 198.18.0.0/15", h.Name, h.Addr)
				}
				if !strings.HasPrefix(h.Addr6.String(), "fd00:198:18:") {
					t.Errorf("host %s IPv6 address %v", h.Name, h.Addr6)
				}
			}
		})
	}
}

func netPrefix1518(ip net.IP) bool {
	_, n, _ := net.ParseCIDR("198.18.0.0/15")
	return n.Contains(ip)
}

func TestNamesAndLinks(t *testing.T) {
	topo := netns.New(t, netns.Config{Prefix: "xdptnames", Queues: 1})
	seen := map[string]bool{}
	for _, ns := range topo.Namespaces() {
		want := "xdptnames-" + strconv.Itoa(os.Getpid()) + "-"
		if !strings.HasPrefix(ns.Name(), want) {
			t.Errorf("namespace %q does not start with %q", ns.Name(), want)
		}
		if _, err := os.Stat(filepath.Join("/run/netns", ns.Name())); err != nil {
			t.Errorf("namespace %s not under /run/netns: %v", ns.Name(), err)
		}
	}
	for _, h := range topo.Hosts {
		for _, name := range []string{h.Link, h.PeerLink} {
			if len(name) > 15 || seen[name] {
				t.Errorf("link name %q: too long or repeated", name)
			}
			seen[name] = true
		}
		// The link exists in the host's namespace with the promised
		// MAC, MTU and queue counts, and is up.
		err := h.Do(func() error {
			l, err := netlink.LinkByName(h.Link)
			if err != nil {
				return err
			}
			a := l.Attrs()
			if a.HardwareAddr.String() != h.MAC.String() || a.MTU != 1500 || a.NumRxQueues != 1 || a.NumTxQueues != 1 {
				t.Errorf("host %s link: mac %v mtu %d queues rx %d tx %d", h.Name, a.HardwareAddr, a.MTU, a.NumRxQueues, a.NumTxQueues)
			}
			if a.Flags&net.FlagUp == 0 {
				t.Errorf("host %s link down", h.Name)
			}
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return err
			}
			if lo.Attrs().Flags&net.FlagUp == 0 {
				t.Errorf("host %s: lo down", h.Name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The caller's namespace has none of these links.
	for name := range seen {
		if _, err := netlink.LinkByName(name); err == nil {
			t.Errorf("link %s appeared in the test's own namespace", name)
		}
	}
}

func TestDefaultQueues(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct})
	h := topo.Hosts[0]
	err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Link)
		if err != nil {
			return err
		}
		// veth's default: one queue per possible CPU.
		if l.Attrs().NumRxQueues < 1 {
			t.Errorf("rx queues %d", l.Attrs().NumRxQueues)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMTU(t *testing.T) {
	topo := netns.New(t, netns.Config{MTU: 9000, Hosts: []netns.HostConfig{{}, {}, {Name: "small", MTU: 1280}}})
	a, b, small := topo.Hosts[0], topo.Hosts[1], topo.Hosts[2]
	for _, h := range topo.Hosts {
		err := h.Do(func() error {
			l, err := netlink.LinkByName(h.Link)
			if err != nil {
				return err
			}
			if l.Attrs().MTU != h.MTU {
				t.Errorf("host %s MTU %d, want %d", h.Name, l.Attrs().MTU, h.MTU)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The largest unfragmented ping fits; one byte more does not.
	mustPing(t, a, b, false, 9000-28)
	err := a.Ping(ctxFor(t, 5*time.Second), b.Addr, 9000-27)
	if !errors.Is(err, unix.EMSGSIZE) {
		t.Fatalf("ping 1 byte over the MTU: %v, want EMSGSIZE", err)
	}
	mustPing(t, small, a, false, 1280-28)
}

func TestStaticNeighbors(t *testing.T) {
	for _, kind := range []netns.Kind{netns.Bridge, netns.Router} {
		t.Run(kind.String(), func(t *testing.T) {
			topo := netns.New(t, netns.Config{Kind: kind, IPv6: true, StaticNeighbors: true})
			a, b := topo.Hosts[0], topo.Hosts[1]
			err := a.Do(func() error {
				for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
					neighs, err := netlink.NeighList(a.Ifindex, fam)
					if err != nil {
						return err
					}
					perm := 0
					for _, n := range neighs {
						if n.State&netlink.NUD_PERMANENT != 0 {
							perm++
							want := b.MAC
							if kind == netns.Router {
								want = a.PeerMAC
							}
							if n.HardwareAddr.String() != want.String() {
								t.Errorf("neighbour %v -> %v, want %v", n.IP, n.HardwareAddr, want)
							}
						}
					}
					if perm != 1 {
						t.Errorf("family %d: %d permanent neighbours, want 1", fam, perm)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			mustPing(t, a, b, false, 100)
			mustPing(t, a, b, true, 100)
		})
	}
}

func TestLearnedNeighbors(t *testing.T) {
	topo := netns.New(t, netns.Config{})
	a, b := topo.Hosts[0], topo.Hosts[1]
	mustPing(t, a, b, false, 56)
	err := a.Do(func() error {
		neighs, err := netlink.NeighList(a.Ifindex, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			if n.IP.Equal(b.Addr.AsSlice()) && n.State&netlink.NUD_PERMANENT == 0 && n.HardwareAddr.String() == b.MAC.String() {
				return nil
			}
		}
		t.Errorf("no learned neighbour entry for %v in %v", b.Addr, neighs)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestIPv6Disabled(t *testing.T) {
	topo := netns.New(t, netns.Config{})
	a := topo.Hosts[0]
	if a.Addr6.IsValid() {
		t.Fatalf("IPv6 address %v without Config.IPv6", a.Addr6)
	}
	out, err := a.Exec(ctxFor(t, 5*time.Second), "cat", "/proc/sys/net/ipv6/conf/"+a.Link+"/disable_ipv6")
	// /proc/sys/net follows the reader's namespace.
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("disable_ipv6 on %s = %q, want 1", a.Link, out)
	}
}

func TestDoRestoresNamespace(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct})
	before, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	var inside vnetns.NsHandle
	err = topo.Hosts[0].Do(func() error {
		var err error
		inside, err = vnetns.Get()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if !inside.Equal(topo.Hosts[0].Handle()) || inside.Equal(before) {
		t.Fatal("Do did not run fn in the host namespace")
	}
	// Do unlocked the thread only after switching back, so wherever this
	// goroutine runs now is the original namespace.
	after, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if !after.Equal(before) {
		t.Fatal("Do did not restore the namespace")
	}
	wantErr := errors.New("boom")
	if err := topo.Hosts[0].Do(func() error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = topo.Hosts[0].Do(func() error { panic("in fn") })
	}()
	again, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if !again.Equal(before) {
		t.Fatal("a panic in fn left the thread in the host namespace")
	}
}

func TestExec(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct})
	a := topo.Hosts[0]
	out, err := a.Exec(ctxFor(t, 10*time.Second), "ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), a.Link+"@") || strings.Contains(string(out), topo.Hosts[1].Link+"@") {
		t.Fatalf("ip link in host a shows:\n%s", out)
	}
	if _, err := a.Exec(ctxFor(t, 10*time.Second), "sh", "-c", "echo oops >&2; exit 3"); err == nil || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("failing command: err = %v, want the exit error with its output", err)
	}
}

func TestBadConfig(t *testing.T) {
	netns.RequireRoot(t)
	for name, cfg := range map[string]netns.Config{
		"mtu":          {MTU: 70000},
		"queues":       {Queues: -1},
		"name":         {Hosts: []netns.HostConfig{{Name: "Bad"}, {}}},
		"dup names":    {Hosts: []netns.HostConfig{{Name: "x"}, {Name: "x"}}},
		"direct 3":     {Kind: netns.Direct, Hosts: make([]netns.HostConfig, 3)},
		"prefix":       {Prefix: "Has-Dash"},
		"wire name":    {Hosts: []netns.HostConfig{{Name: "wire"}, {}}},
		"direct mtus":  {Kind: netns.Direct, Hosts: []netns.HostConfig{{MTU: 1500}, {MTU: 9000}}},
		"kind":         {Kind: netns.Kind(7)},
		"too few mtus": {MTU: 10},
	} {
		if topo, err := netns.Build(cfg); !errors.Is(err, netns.ErrBadConfig) {
			if topo != nil {
				topo.Close()
			}
			t.Errorf("%s: err = %v, want ErrBadConfig", name, err)
		}
	}
}
