package rdmacm

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

// TestJoinMulticast: rdma_cm's RoCEv2 join, as mckey uses it. A UD ID
// bound to the device's address joins 239.1.2.3: MULTICAST_JOIN reports
// the group's GID (::ffff:239.1.2.3), the ID's GID index, hop limit 64,
// QPN 0xFFFFFF and rdma_cm's Q_Key; with that a sender's datagram reaches
// the joined QP (attached as librdmacm attaches it). The kernel's errnos:
// EINVAL for a TCP ID and for an unbound one, ENOTSUPP for an IPv6 group,
// EADDRNOTAVAIL for leaving a group not joined.
func TestJoinMulticast(t *testing.T) {
	a, b := pairOf(t)
	g := netip.MustParseAddr("239.1.2.3")
	join := func(n *node, ip netip.Addr, sendOnly bool) (*ID, *verbs.QP, Event) {
		t.Helper()
		ch := NewEventChannel()
		id, err := n.svc.CreateID(ch, PortSpaceUDP, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { id.Destroy() })
		if err := id.Bind(netip.AddrPortFrom(ip, 0)); err != nil {
			t.Fatal(err)
		}
		qp := n.qp(t, verbs.QPTypeUD)
		if err := id.AttachQP(qp); err != nil {
			t.Fatal(err)
		}
		if err := id.JoinMulticast(g, sendOnly); err != nil {
			t.Fatal(err)
		}
		ev, err := ch.Get(ctxFor(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != EventMulticastJoin || ev.Status != 0 || ev.ID != id || ev.UD.QPNum != 0xffffff || ev.UD.QKey != UDPQKey ||
			ev.UD.AH.DGID != netip.MustParseAddr("::ffff:239.1.2.3") || ev.UD.AH.SGIDIndex != id.GIDIndex() || ev.UD.AH.HopLimit != 64 {
			t.Fatalf("join event %+v", ev)
		}
		return id, qp, ev
	}
	_, rq, ev := join(b, ipB, false)
	if err := rq.AttachMcast(ev.UD.AH.DGID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := rq.PostRecv([]verbs.RecvWR{{ID: 1, SGList: b.sge(0, 1024)}}); err != nil {
		t.Fatal(err)
	}
	_, sq, sev := join(a, ipA, true)
	ah, err := a.pd.CreateAH(sev.UD.AH)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sq.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 64), AH: ah,
		RemoteQPN: sev.UD.QPNum, RemoteQKey: sev.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	a.complete(t)
	if wc := b.complete(t); wc.SrcQP != sq.QPN() || wc.ByteLen != 40+64 {
		t.Fatalf("the group's datagram: %+v", wc)
	}

	ch := NewEventChannel()
	tcp, _ := a.svc.CreateID(ch, PortSpaceTCP, nil)
	defer tcp.Destroy()
	if err := tcp.Bind(netip.AddrPortFrom(ipA, 0)); err != nil {
		t.Fatal(err)
	}
	if err := tcp.JoinMulticast(g, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("join of a TCP ID: %v, want EINVAL", err)
	}
	ud, _ := a.svc.CreateID(ch, PortSpaceUDP, nil)
	defer ud.Destroy()
	if err := ud.JoinMulticast(g, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("join of an unbound ID: %v, want EINVAL", err)
	}
	if err := ud.Bind(netip.AddrPortFrom(ipA, 0)); err != nil {
		t.Fatal(err)
	}
	if err := ud.JoinMulticast(netip.MustParseAddr("ff0e::1"), false); !errors.Is(err, ErrNotSupp) {
		t.Errorf("join of an IPv6 group: %v, want ENOTSUPP (524)", err)
	}
	if err := ud.LeaveMulticast(g); !errors.Is(err, ErrAddrNotAvail) {
		t.Errorf("leave of a group not joined: %v, want EADDRNOTAVAIL", err)
	}
	if err := ud.JoinMulticast(g, false); err != nil {
		t.Fatal(err)
	}
	if err := ud.LeaveMulticast(g); err != nil {
		t.Fatal(err)
	}
}
