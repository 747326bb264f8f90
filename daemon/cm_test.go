package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/verbs"
)

// TestCMThroughDaemon: a client of the daemon connects with rdma_cm (the
// daemon's QP1 and CM, the client's QP) to a listener on the other device,
// moves data, and when it hangs up without disconnecting, the daemon
// disconnects for it: the peer sees DISCONNECTED.
func TestCMThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svcB, err := rdmacm.Start(tb.b, rdmacm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer svcB.Close()
	l, err := svcB.Listen(rdmacm.PortSpaceTCP, netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	y := newEnd(t, tb.b, 4096)
	type accepted struct {
		c   *rdmacm.Conn
		req *rdmacm.Request
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		req, err := l.Next(ctx)
		if err == nil {
			y.qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
			y.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGList: []verbs.SGE{{Addr: y.mr.Addr(), Length: 64, LKey: y.mr.LKey()}}}})
			var c *rdmacm.Conn
			c, err = req.Accept(ctx, y.qp, &rdmacm.ConnParam{PrivateData: []byte("from B"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
			done <- accepted{c, req, err}
			return
		}
		done <- accepted{err: err}
	}()

	client := tb.dial(t)
	x := newEnd(t, client, 4096)
	svcA, err := rdmacm.Start(client, rdmacm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := svcA.Dial(ctx, x.qp, netip.AddrPortFrom(ipB, 7174), rdmacm.ConnParam{PrivateData: []byte("through the daemon"),
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		t.Fatal(err)
	}
	acc := <-done
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	if !bytes.HasPrefix(acc.req.Param.PrivateData, []byte("through the daemon")) || acc.req.Param.QPNum != x.qp.QPN() ||
		!bytes.HasPrefix(conn.Param.PrivateData, []byte("from B")) || x.qp.State() != verbs.StateRTS ||
		conn.ID().LocalAddr().Addr() != ipA || conn.ID().RemoteAddr() != netip.AddrPortFrom(ipB, 7174) || conn.ID().Route().PathMTU != verbs.MTU1024 {
		t.Fatalf("request %+v, answer %q, QP in %v, addresses %v %v, route %+v", acc.req.Param, conn.Param.PrivateData,
			x.qp.State(), conn.ID().LocalAddr(), conn.ID().RemoteAddr(), conn.ID().Route())
	}
	copy(x.mr.Bytes(), "hello over rdma_cm")
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 18, LKey: x.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess {
		t.Fatalf("send %+v", wc)
	}
	if wc := pollOne(t, y.cq); wc.Status != verbs.WCSuccess || string(y.mr.Bytes()[:18]) != "hello over rdma_cm" {
		t.Fatalf("receive %+v %q", wc, y.mr.Bytes()[:18])
	}
	// A second Dial to nothing: the daemon's REJ comes back as ECONNREFUSED.
	if _, err := svcA.Dial(ctx, newEnd(t, client, 64).qp, netip.AddrPortFrom(ipB, 9), rdmacm.ConnParam{}); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to no listener: %v", err)
	}
	// An operator sees the client's connected ID, and the CM's connection.
	st, err := Query(ctx, tb.name)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.CMIDs) != 1 || st.CMIDs[0].State != "CONNECT" || st.CMIDs[0].QPN != x.qp.QPN() || st.CMIDs[0].PortSpace != 0x0106 ||
		netip.AddrFrom16(st.CMIDs[0].Dst.IP).Unmap() != ipB || st.CMIDs[0].Dst.Port != 7174 || st.CMConnections != 1 {
		t.Fatalf("LIST's CM: %+v, %d connections", st.CMIDs, st.CMConnections)
	}
	// The client hangs up without disconnecting.
	client.Close()
	if e, err := acc.c.Next(ctx); err != nil || e.Type != rdmacm.EventDisconnected {
		t.Fatalf("B's event after the client left: %v %v", e, err)
	}
	if err := acc.c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for tb.srv.cm.Connections() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tb.srv.cm.Connections(); n != 0 {
		t.Fatalf("the daemon's CM keeps %d connections", n)
	}
	if n := tb.srv.cm.IDs(); n != 0 {
		t.Fatalf("the daemon keeps %d IDs of the departed client", n)
	}
	if st, err := Query(ctx, tb.name); err != nil || len(st.CMIDs) != 0 || st.CMConnections != 0 {
		t.Fatalf("LIST after the client left: %+v %v", st, err)
	}
	_ = svcA.Close()
}
