package rdmacm

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

// sibling is a second consumer of n's device and CM: its own PD, CQ and
// region, as a second process attached to one daemon.
func sibling(t *testing.T, n *node) *node {
	t.Helper()
	s := &node{dev: n.dev, svc: n.svc, link: n.link}
	var err error
	if s.pd, err = n.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = n.dev.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if s.mr, err = s.pd.AllocMR(1<<16, access); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLoopbackConnection: rdma_cm on one device, to its own address: the
// address resolves without asking a neighbour, the CM's MADs (REQ, REP,
// RTU, DREQ, DREP) go from QP1 to QP1 inside the device, the connection
// moves SEND and READ, and nothing reaches the link.
func TestLoopbackConnection(t *testing.T) {
	var asked atomic.Int64
	a, _ := nodePair(t, pairSpec{ips: [2]netip.Addr{ipA, ipB}, macs: [2]net.HardwareAddr{macA, macB}, mtu: 1024, opts: testOptions,
		asked: func(ip netip.Addr) {
			if ip == ipA {
				asked.Add(1)
			}
		}})
	b := sibling(t, a)
	l, err := a.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(netip.IPv4Unspecified(), 7175), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for round := range 3 {
		exchangeTo(t, a, b, l, ipA, round)
	}
	settled(t, a, a, 2)
	if s := a.link.Stats().Sent; s != 0 || a.link.Peer().Queued() != 0 {
		t.Errorf("%d frames went to the link, %d wait at its peer", s, a.link.Peer().Queued())
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the resolver was asked %d times for the device's own address", n)
	}
	if c := a.svc.Counters(); c.Retransmitted != 0 || c.Dropped != 0 {
		t.Errorf("CM counters %+v over loopback", c)
	}
	cs, err := a.dev.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var looped uint64
	for _, f := range cs.Named() {
		if f.Name == "loopback_pkts" {
			looped = f.Value
		}
	}
	// Per round 5 MADs, a SEND and a READ with their ACK and response.
	if looped < 3*7 {
		t.Errorf("loopback_pkts %d, want at least %d", looped, 3*7)
	}
}

// TestResolveLoopbackAddress: a loopback or wildcard destination resolves
// as on Linux's rdma_cm over rxe (cma_resolve_loopback): ADDR_RESOLVED
// from the loopback address, asking no neighbour, and then no route
// (ENODEV), which is what `rping -c -a 127.0.0.1` meets on rxe.
func TestResolveLoopbackAddress(t *testing.T) {
	var asked atomic.Int64
	a, _ := nodePair(t, pairSpec{ips: [2]netip.Addr{ipA, ipB}, macs: [2]net.HardwareAddr{macA, macB}, mtu: 1024, opts: testOptions,
		asked: func(netip.Addr) { asked.Add(1) }})
	for _, c := range []struct{ dst, src string }{
		{"127.0.0.1", "127.0.0.1"}, {"127.1.2.3", "127.0.0.1"}, {"0.0.0.0", "127.0.0.1"},
		{"::1", "::1"}, {"::", "::1"}, {"::ffff:127.0.0.1", "127.0.0.1"},
	} {
		ch := NewEventChannel()
		id, err := a.svc.CreateID(ch, PortSpaceTCP, nil)
		if err != nil {
			t.Fatal(err)
		}
		dst := netip.MustParseAddr(c.dst)
		if err := id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(dst, 7471), time.Second); err != nil {
			t.Fatalf("%v: resolve_addr: %v", dst, err)
		}
		e, err := ch.Get(ctxFor(t, 5*time.Second))
		if err != nil || e.Type != EventAddrResolved || e.Status != 0 {
			t.Fatalf("%v: event %+v %v, want ADDR_RESOLVED", dst, e, err)
		}
		if got := id.LocalAddr().Addr(); got != netip.MustParseAddr(c.src) {
			t.Errorf("%v: source %v, want %v", dst, got, c.src)
		}
		if err := id.ResolveRoute(time.Second); !errors.Is(err, syscall.ENODEV) {
			t.Errorf("%v: resolve_route: %v, want ENODEV", dst, err)
		}
		if err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if n := asked.Load(); n != 0 || a.link.Stats().Sent != 0 {
		t.Errorf("resolver asked %d times, %d frames sent", n, a.link.Stats().Sent)
	}
}
