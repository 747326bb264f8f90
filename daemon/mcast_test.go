package daemon

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/verbs"
)

// daemonCounter is the named transport counter of the daemon's device.
func daemonCounter(t *testing.T, d *verbs.Device, name string) uint64 {
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

// TestMcastThroughDaemon: a client's UD QP attaches to a group through the
// daemon (ATTACH_MCAST) and receives a datagram device B sends to it; the
// errnos cross as ibv_attach_mcast's (EINVAL for an RC QP, for a second
// detach); when the client goes away its QP leaves the group, and the
// daemon's device drops the next datagram as for a group nobody joined.
func TestMcastThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x, y := udEnd(t, c), udEnd(t, tb.b)
	g := netip.MustParseAddr("::ffff:239.7.7.7")
	if err := x.qp.AttachMcast(g, 0); err != nil {
		t.Fatal(err)
	}
	toG, err := y.pd.CreateAH(verbs.AH{DGID: g})
	if err != nil {
		t.Fatal(err)
	}
	send := func() {
		t.Helper()
		if _, err := y.qp.PostSend([]verbs.SendWR{{ID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: y.mr.Addr(), Length: 100, LKey: y.mr.LKey()}}, AH: toG,
			RemoteQPN: verbs.McastQPN, RemoteQKey: 0x11111111}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollOne(t, y.cq); wc.Status != verbs.WCSuccess {
			t.Fatalf("send: %+v", wc)
		}
	}
	if _, err := x.qp.PostRecv([]verbs.RecvWR{{ID: 5, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 2048, LKey: x.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	send()
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.WRID != 5 || wc.SrcQP != y.qp.QPN() || wc.ByteLen != 140 {
		t.Fatalf("the group's datagram: %+v", wc)
	}

	rc := newEnd(t, c, 4096)
	if err := rc.qp.AttachMcast(g, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("attach of an RC QP through the daemon: %v, want EINVAL", err)
	}
	if err := x.qp.DetachMcast(g, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.DetachMcast(g, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second detach through the daemon: %v, want EINVAL", err)
	}
	if err := x.qp.AttachMcast(g, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	before := daemonCounter(t, tb.a, "dropped_no_mcast_group")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		send() // until the daemon has destroyed the client's QP
		if daemonCounter(t, tb.a, "dropped_no_mcast_group") > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the departed client's QP still holds the group")
		}
	}
}

// TestCMJoinThroughDaemon: a Go client of the daemon joins a group with
// rdma_cm (CM_JOIN_MCAST): MULTICAST_JOIN reaches it with the group's
// address handle, QPN 0xFFFFFF and rdma_cm's Q_Key; its QP, attached as
// librdmacm attaches it, receives a datagram device B sends with them.
func TestCMJoinThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := tb.dial(t)
	svc, err := rdmacm.Start(client, rdmacm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ch := rdmacm.NewEventChannel()
	id, err := svc.CreateID(ch, rdmacm.PortSpaceUDP, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.Bind(netip.AddrPortFrom(ipA, 0)); err != nil {
		t.Fatal(err)
	}
	x := udEnd(t, client)
	g := netip.MustParseAddr("239.9.8.7")
	if err := id.JoinMulticast(g, false); err != nil {
		t.Fatal(err)
	}
	ev, err := ch.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != rdmacm.EventMulticastJoin || ev.ID != id || ev.UD.QPNum != verbs.McastQPN || ev.UD.QKey != rdmacm.UDPQKey ||
		ev.UD.AH.DGID.Unmap() != g {
		t.Fatalf("join event %+v", ev)
	}
	if err := x.qp.Modify(verbs.QPAttr{QKey: ev.UD.QKey}, verbs.AttrQKey); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.AttachMcast(ev.UD.AH.DGID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := x.qp.PostRecv([]verbs.RecvWR{{ID: 5, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 2048, LKey: x.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	y := udEnd(t, tb.b)
	ah, err := y.pd.CreateAH(verbs.AH{DGID: ev.UD.AH.DGID, HopLimit: ev.UD.AH.HopLimit})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := y.qp.PostSend([]verbs.SendWR{{ID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: y.mr.Addr(), Length: 64, LKey: y.mr.LKey()}}, AH: ah,
		RemoteQPN: ev.UD.QPNum, RemoteQKey: ev.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.WRID != 5 || wc.SrcQP != y.qp.QPN() {
		t.Fatalf("the group's datagram: %+v", wc)
	}
	if err := id.LeaveMulticast(g); err != nil {
		t.Fatal(err)
	}
	if err := id.LeaveMulticast(g); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("second leave: %v, want EADDRNOTAVAIL", err)
	}
}
