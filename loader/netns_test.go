package loader

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	xnetns "github.com/xdproce/xdproce/internal/netns"
)

// Test network namespaces and veth pairs, self-contained (no shared harness).

var nameSeq atomic.Int64

// uniqueName returns prefix-pid-n, short enough for netns names; links use
// shortName.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), nameSeq.Add(1))
}

// shortName returns a link name of at most 15 bytes, unique in this run.
func shortName(prefix string) string {
	return fmt.Sprintf("%s%d%d", prefix, os.Getpid()%100000, nameSeq.Add(1))
}

type testNS struct {
	name string
	h    netns.NsHandle
}

// newNS creates a named network namespace with lo up, deleted at cleanup.
func newNS(t *testing.T) *testNS {
	t.Helper()
	xnetns.RequireRoot(t)
	name := uniqueName("xdpl")
	var h netns.NsHandle
	err := onFreshThread(func() error {
		var err error
		// NewNamed moves this throwaway thread into the new namespace.
		h, err = netns.NewNamed(name)
		return err
	})
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	ns := &testNS{name: name, h: h}
	t.Cleanup(func() {
		h.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	ns.run(t, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	return ns
}

// onFreshThread runs fn on a new locked OS thread that is thrown away
// afterwards, so a namespace switch never leaks to other goroutines.
func onFreshThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread exits with the goroutine.
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic: %v", r)
			}
		}()
		errc <- fn()
	}()
	return <-errc
}

// do runs fn in the namespace on a throwaway thread.
func (n *testNS) do(fn func() error) error {
	return onFreshThread(func() error {
		if err := netns.Set(n.h); err != nil {
			return fmt.Errorf("enter netns %s: %w", n.name, err)
		}
		return fn()
	})
}

// run is do that fails the test on error.
func (n *testNS) run(t testing.TB, fn func() error) {
	t.Helper()
	if err := n.do(fn); err != nil {
		t.Fatalf("in netns %s: %v", n.name, err)
	}
}

// pair is a veth pair: a in namespace A, b in namespace B, with IPv4
// addresses 198.18.100.1/24 and .2/24, both up.
type pair struct {
	A, B           *testNS
	AName, BName   string
	AAddr, BAddr   netip.Addr
	AMAC, BMAC     net.HardwareAddr
	AIndex, BIndex int
}

type pairOpts struct {
	mtu    int
	queues int
}

func newPair(t *testing.T, o pairOpts) *pair {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = 1500
	}
	if o.queues == 0 {
		o.queues = 1
	}
	p := &pair{
		A: newNS(t), B: newNS(t),
		AName: shortName("xla"), BName: shortName("xlb"),
		AAddr: netip.MustParseAddr("198.18.100.1"), BAddr: netip.MustParseAddr("198.18.100.2"),
		AMAC: net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01},
		BMAC: net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02},
	}
	p.A.run(t, func() error {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{
				Name: p.AName, MTU: o.mtu, HardwareAddr: p.AMAC,
				NumRxQueues: o.queues, NumTxQueues: o.queues,
			},
			PeerName:         p.BName,
			PeerHardwareAddr: p.BMAC,
			PeerMTU:          uint32(o.mtu),
			PeerNumRxQueues:  uint32(o.queues),
			PeerNumTxQueues:  uint32(o.queues),
			PeerNamespace:    netlink.NsFd(p.B.h),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s/%s: %w", p.AName, p.BName, err)
		}
		return setupLink(p.AName, p.AAddr, &p.AIndex)
	})
	p.B.run(t, func() error { return setupLink(p.BName, p.BAddr, &p.BIndex) })
	return p
}

func setupLink(name string, addr netip.Addr, index *int) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	*index = l.Attrs().Index
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: prefix(addr, 24)}); err != nil {
		return fmt.Errorf("add %s to %s: %w", addr, name, err)
	}
	return netlink.LinkSetUp(l)
}

func prefix(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

// addAddr6 adds an IPv6 address without duplicate address detection, so
// it is usable at once.
func addAddr6(name string, a netip.Addr) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.AddrAdd(l, &netlink.Addr{IPNet: prefix(a, 64), Flags: unix.IFA_F_NODAD})
}

func setMTU(name string, mtu int) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetMTU(l, mtu)
}
