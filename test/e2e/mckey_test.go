package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// TestStockMckey runs Debian's mckey, unmodified, on xdproce's
// librdmacm.so.1 and libibverbs.so.1 between the daemons of two namespaces,
// each side as receiver and as sender: rdma_join_multicast through the
// daemon's CM, MULTICAST_JOIN's address handle (the group's GID, QPN
// 0xFFFFFF, rdma_cm's Q_Key), the receiver's QP attached to the group by
// the library, the port's IGMP membership and XDP steering of the group,
// and ten datagrams to the group's MAC address received (mcast_pkts). A
// send-only sender (-o) attaches no QP, so its device is no member and
// nothing loops back to it (loopback_pkts). (A full member's own datagrams
// loop back only while it is still attached: mckey posts its sends
// unsignaled and leaves the group at once, on rxe as here, so whether they
// do is mckey's race, not asserted; verbs.TestMcastDeliversToAttached is.)
// counterOf is the named transport counter of the daemon serving h's link.
func counterOf(t *testing.T, h *netns.Host, name string) uint64 {
	t.Helper()
	n, found := countersOf(t, h)[name]
	if !found {
		t.Fatalf("no counter %s", name)
	}
	return n
}

// countersOf is every named transport counter of the daemon serving h's link.
func countersOf(t *testing.T, h *netns.Host) map[string]uint64 {
	t.Helper()
	out := make(map[string]uint64)
	if err := h.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := verbs.Dial(ctx, h.Link)
		if err != nil {
			return err
		}
		defer d.Close()
		c, err := d.Counters()
		for _, f := range c.Named() {
			out[f.Name] = f.Value
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// nonZero lists a device's counters that are not zero, for a failure's log.
func nonZero(c map[string]uint64) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(c)) {
		if c[name] != 0 {
			fmt.Fprintf(&b, " %s=%d", name, c[name])
		}
	}
	return b.String()
}

// joined waits until h's interface is a member of group (the kernel
// reports it: the daemon's port joined it for an attached QP).
func joined(t *testing.T, ctx context.Context, h *netns.Host, group string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := h.Exec(ctx, "ip", "maddr", "show", "dev", h.Link)
		if err == nil && strings.Contains(string(out), "inet  "+group) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never joined %s: %s %v", h.Link, group, out, err)
		}
	}
}

func TestStockMckey(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "mckey")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, c := range []struct {
		name       string
		recv, send *netns.Host
		group      string
		extra      []string
	}{
		{"A sends to B", b, a, "239.1.2.3", nil},
		{"B sends to A", a, b, "239.1.2.4", nil},
		{"A sends to B, send-only", b, a, "239.1.2.5", []string{"-o"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			recv, send := []string{"mckey", "-m", c.group, "-b", c.recv.Addr.String()},
				append([]string{"mckey", "-m", c.group, "-b", c.send.Addr.String(), "-s"}, c.extra...)
			rcvd0, loop0 := counterOf(t, c.recv, "mcast_pkts"), counterOf(t, c.send, "loopback_pkts")
			r, rout := startOnLibrary(t, ctx, lib, c.recv, recv...)
			// The sender's datagrams go out as soon as it joins: it starts
			// once the receiver's device is a member of the group.
			joined(t, ctx, c.recv, c.group)
			s, sout := startOnLibrary(t, ctx, lib, c.send, send...)
			serr := s.Wait()
			if serr != nil {
				_ = r.Process.Kill()
			}
			rerr := r.Wait()
			srv, cli := rout.String(), sout.String()
			if serr != nil || rerr != nil {
				t.Fatalf("sender %v, receiver %v\nsender:\n%s\nreceiver:\n%s\nsender's device:%s\nreceiver's device:%s",
					serr, rerr, cli, srv, nonZero(countersOf(t, c.send)), nonZero(countersOf(t, c.recv)))
			}
			if !strings.Contains(srv, "joined dgid: ::ffff:"+c.group) || !strings.Contains(srv, "data transfers complete") {
				t.Fatalf("receiver:\n%s\nsender:\n%s", srv, cli)
			}
			if !strings.Contains(cli, "joined dgid: ::ffff:"+c.group) || !strings.Contains(cli, "data transfers complete") {
				t.Fatalf("sender:\n%s\nreceiver:\n%s", cli, srv)
			}
			if n := counterOf(t, c.recv, "mcast_pkts") - rcvd0; n < 10 {
				t.Errorf("the receiver's device took %d datagrams to the group, want 10", n)
			}
			loop := counterOf(t, c.send, "loopback_pkts") - loop0
			if sendOnly := len(c.extra) > 0; sendOnly && loop != 0 {
				t.Errorf("the send-only sender's device looped %d datagrams back to itself", loop)
			}
			t.Log(lastLines(srv, 3))
		})
	}
}

// udQP is a UD QP of r in RTS with Q_Key qkey, its completions on r's CQs.
func udQP(t *testing.T, r *rnic, qkey uint32) *verbs.QP {
	t.Helper()
	qp, err := r.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: r.scq, RecvCQ: r.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, Port: 1, QKey: qkey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := qp.Modify(m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
	return qp
}

// portCounter is the named counter of r's port (its XDP program's).
func portCounter(t *testing.T, r *rnic, name string) uint64 {
	t.Helper()
	c, err := r.dev.PortCounters()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c {
		if f.Name == name {
			return f.Value
		}
	}
	t.Fatalf("no port counter %s", name)
	return 0
}

// TestMcastOverXDP: UD multicast between two xdproce devices in two
// namespaces through the real XDP/AF_XDP path. A datagram from one of b's
// QPs to a group reaches a's attached QP (a's port joined the group: its
// XDP program steers the group's address) and b's own attached QP (looped
// back inside b, from the AF_XDP transmit buffer it was built in), not b's
// sender, which is not attached. A datagram to a group nobody joined is
// not steered by a's program (xdp_not_local: the kernel, no member, drops
// it) and reaches no QP.
func TestMcastOverXDP(t *testing.T) {
	netns.RequireRoot(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a, b := openRNIC(t, topo.Hosts[0], 1<<16), openRNIC(t, topo.Hosts[1], 1<<16)
	const qkey = 0x11111111
	g := netip.MustParseAddr("::ffff:239.5.6.7")
	ax, bx, bs := udQP(t, a, qkey), udQP(t, b, qkey), udQP(t, b, qkey)
	for _, qp := range []*verbs.QP{ax, bx} {
		if err := qp.AttachMcast(g, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i, qp := range []*verbs.QP{ax, bx, bs} {
		r := a
		if i > 0 {
			r = b
		}
		if _, err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGList: sgl(r.mr, 8192*(i+1), 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(to netip.Addr, id uint64) {
		t.Helper()
		ah, err := b.pd.CreateAH(verbs.AH{DGID: to, SGIDIndex: 1, HopLimit: 1})
		if err != nil {
			t.Fatal(err)
		}
		copy(b.mr.Bytes(), "to the group")
		if _, err := bs.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(b.mr, 0, 12),
			AH: ah, RemoteQPN: verbs.McastQPN, RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, b.scq, 1, 5*time.Second)
	}
	loop0 := counterOfDevice(t, b.dev, "loopback_pkts")
	send(g, 1)
	got := append(waitWC(t, a.rcq, 1, 5*time.Second), waitWC(t, b.rcq, 1, 5*time.Second)...)
	if got[0].QPNum != ax.QPN() || got[1].QPNum != bx.QPN() || got[0].SrcQP != bs.QPN() || got[1].SrcQP != bs.QPN() ||
		string(a.mr.Bytes()[8192+40:8192+52]) != "to the group" || string(b.mr.Bytes()[16384+40:16384+52]) != "to the group" {
		t.Fatalf("the group's datagram: %+v", got)
	}
	if n := counterOfDevice(t, b.dev, "loopback_pkts") - loop0; n != 1 {
		t.Errorf("b looped %d datagrams back, want 1", n)
	}
	notLocal := portCounter(t, a, "xdp_not_local")
	send(netip.MustParseAddr("::ffff:239.5.6.8"), 2)
	for deadline := time.Now().Add(5 * time.Second); portCounter(t, a, "xdp_not_local") == notLocal; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a's XDP program never saw the datagram to a group nobody joined")
		}
	}
	time.Sleep(50 * time.Millisecond)
	var wc [1]verbs.WorkCompletion
	if a.rcq.Poll(wc[:]) != 0 || b.rcq.Poll(wc[:]) != 0 {
		t.Fatalf("a datagram to a group nobody joined was received: %+v", wc[0])
	}
}

// counterOfDevice is the named transport counter of d.
func counterOfDevice(t *testing.T, d *verbs.Device, name string) uint64 {
	t.Helper()
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.Named() {
		if f.Name == name {
			return f.Value
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
