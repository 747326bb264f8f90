package e2e

import (
	"context"
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
	var n uint64
	found := false
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
			if f.Name == name {
				n, found = f.Value, true
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("no counter %s", name)
	}
	return n
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
				t.Fatalf("sender %v, receiver %v\nsender:\n%s\nreceiver:\n%s", serr, rerr, cli, srv)
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
