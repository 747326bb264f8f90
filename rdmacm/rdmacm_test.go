package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/verbs"
)

var (
	ipA  = netip.MustParseAddr("198.18.7.1")
	ipB  = netip.MustParseAddr("198.18.7.2")
	macA = net.HardwareAddr{2, 0, 0, 0, 7, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 7, 2}
)

// node is a device on one end of an in-memory link, with its connection
// manager.
type node struct {
	dev  *verbs.Device
	svc  *Service
	pd   *verbs.PD
	cq   *verbs.CQ
	mr   *verbs.MR
	link *memlink.Link
}

// testOptions shorten the CM's timers: a REQ is sent again after 24 ms
// instead of 6 s.
var testOptions = Options{PacketLifetime: 10, ResponseTimeout: 12}

func pairOf(t *testing.T) (*node, *node) {
	t.Helper()
	return nodePair(t, pairSpec{ips: [2]netip.Addr{ipA, ipB}, macs: [2]net.HardwareAddr{macA, macB}, mtu: 1024, opts: testOptions})
}

// pairSpec shapes two nodes on an in-memory link: their addresses, the
// port MTU, the CM's options, and what watches each device's frames.
type pairSpec struct {
	ips     [2]netip.Addr
	macs    [2]net.HardwareAddr
	mtu     int
	opts    Options
	capture verbs.CaptureFunc
	// anyNeighbour: every address resolves (to the other node's MAC).
	anyNeighbour bool
	// asked, if set, hears every address the nodes' resolver is asked.
	asked func(netip.Addr)
}

// nodePair makes the two nodes; each resolves the other's address, and an
// unknown one never answers.
func nodePair(t *testing.T, spec pairSpec) (*node, *node) {
	t.Helper()
	la, lb := memlink.NewPair(4096 + 200)
	resolve := func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
		if spec.asked != nil {
			spec.asked(ip)
		}
		for i, a := range spec.ips {
			if a == ip {
				return spec.macs[i], nil
			}
		}
		if spec.anyNeighbour {
			return spec.macs[0], nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	mk := func(l *memlink.Link, i int) *node {
		dev, err := verbs.NewDevice(l, verbs.DeviceConfig{MAC: spec.macs[i], GIDs: []netip.Addr{spec.ips[i]}, ActiveMTU: spec.mtu, Resolve: resolve})
		if err != nil {
			t.Fatal(err)
		}
		if spec.capture != nil {
			dev.SetCapture(spec.capture)
		}
		svc, err := Start(dev, spec.opts)
		if err != nil {
			t.Fatal(err)
		}
		n := &node{dev: dev, svc: svc, link: l}
		t.Cleanup(func() {
			svc.Close()
			dev.Close()
		})
		if n.pd, err = dev.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if n.cq, err = dev.CreateCQ(256); err != nil {
			t.Fatal(err)
		}
		access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
		if n.mr, err = n.pd.AllocMR(1<<16, access); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return mk(la, 0), mk(lb, 1)
}

func (n *node) qp(t *testing.T, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := n.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy() })
	return qp
}

func (n *node) sge(off, length int) []verbs.SGE {
	return []verbs.SGE{{Addr: n.mr.Addr() + uint64(off), Length: uint32(length), LKey: n.mr.LKey()}}
}

// complete waits for one completion and checks its status.
func (n *node) complete(t *testing.T) verbs.WorkCompletion {
	t.Helper()
	wc := make([]verbs.WorkCompletion, 1)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		if n.cq.Poll(wc) == 1 {
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc[0])
			}
			return wc[0]
		}
		time.Sleep(20 * time.Microsecond)
	}
	st, _ := n.dev.QPStatus()
	t.Fatalf("no completion in 20 s: %+v", st)
	return verbs.WorkCompletion{}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exchange connects A to B's listener, moves data both ways over the RC
// connection (SEND, WRITE, READ) and disconnects from A.
func exchange(t *testing.T, a, b *node, l *Listener, round int) {
	t.Helper()
	exchangeTo(t, a, b, l, ipB, round)
}

// exchangeTo is exchange with A dialing dst (B's address).
func exchangeTo(t *testing.T, a, b *node, l *Listener, dst netip.Addr, round int) {
	t.Helper()
	ctx := ctxFor(t, 20*time.Second)
	qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	type accepted struct {
		c   *Conn
		req *Request
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		req, err := l.Next(ctx)
		if err != nil {
			done <- accepted{err: err}
			return
		}
		// Receives before the REP leaves: the requester may send at once.
		if err := qb.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			done <- accepted{err: err}
			return
		}
		if _, err := qb.PostRecv([]verbs.RecvWR{{ID: 1, SGList: b.sge(0, 4096)}}); err != nil {
			done <- accepted{err: err}
			return
		}
		c, err := req.Accept(ctx, qb, &ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1,
			RetryCount: 7, RNRRetryCount: 7})
		done <- accepted{c, req, err}
	}()
	ca, err := a.svc.Dial(ctx, qa, netip.AddrPortFrom(dst, l.Addr().Port()), ConnParam{PrivateData: []byte("hello"),
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		t.Fatalf("round %d: dial: %v", round, err)
	}
	acc := <-done
	if acc.err != nil {
		t.Fatalf("round %d: accept: %v", round, acc.err)
	}
	cb := acc.c
	if !bytes.HasPrefix(acc.req.Param.PrivateData, []byte("hello")) || acc.req.Peer().Addr() != ipA ||
		acc.req.Param.QPNum != qa.QPN() || !bytes.HasPrefix(ca.Param.PrivateData, []byte("welcome")) {
		t.Fatalf("request %+v from %v, answer %q", acc.req.Param, acc.req.Peer(), ca.Param.PrivateData[:8])
	}
	if qa.State() != verbs.StateRTS || qb.State() != verbs.StateRTS {
		t.Fatalf("QPs in %v and %v", qa.State(), qb.State())
	}
	msg := []byte("round of data")
	msg = append(msg, byte(round))
	copy(a.mr.Bytes()[8192:], msg)
	if _, err := qa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(8192, len(msg))}}); err != nil {
		t.Fatal(err)
	}
	a.complete(t)
	if wc := b.complete(t); wc.ByteLen != uint32(len(msg)) || !bytes.Equal(b.mr.Bytes()[:len(msg)], msg) {
		t.Fatalf("SEND received %d bytes %q", wc.ByteLen, b.mr.Bytes()[:len(msg)])
	}
	// B READs what A has: the REQ's resources made it allowed.
	copy(a.mr.Bytes()[16384:], "readable")
	if _, err := qb.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: b.sge(20000, 8),
		RemoteAddr: a.mr.Addr() + 16384, RKey: a.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	b.complete(t)
	if got := string(b.mr.Bytes()[20000:20008]); got != "readable" {
		t.Fatalf("READ got %q", got)
	}
	// B answers the DREQ when its owner learns of it, as rping's server.
	answered := make(chan error, 1)
	go func() {
		if e, err := cb.Next(ctx); err != nil || e.Type != EventDisconnected {
			answered <- fmt.Errorf("B's event %v %v", e, err)
			return
		}
		answered <- cb.Disconnect(ctx)
	}()
	if err := ca.Disconnect(ctx); err != nil {
		t.Fatalf("round %d: disconnect: %v", round, err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	if qa.State() != verbs.StateErr || qb.State() != verbs.StateErr {
		t.Fatalf("QPs in %v and %v after disconnecting", qa.State(), qb.State())
	}
	ca.Close()
	cb.Close()
	// The flushed receive and anything else left.
	drain(a.cq)
	drain(b.cq)
}

func drain(cq *verbs.CQ) {
	wc := make([]verbs.WorkCompletion, 16)
	time.Sleep(time.Millisecond)
	for cq.Poll(wc) > 0 {
	}
}

// settled waits until both CMs forgot every connection (timewait over) and
// only the listener's ID is left.
func settled(t *testing.T, a, b *node, ids int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if a.svc.Connections()+b.svc.Connections() == 0 && a.svc.IDs()+b.svc.IDs() == ids {
			return
		}
	}
	t.Fatalf("connections %d+%d, IDs %d+%d, want 0 and %d", a.svc.Connections(), b.svc.Connections(), a.svc.IDs(), b.svc.IDs(), ids)
}

// TestConnectTransferDisconnect: Dial and Listen/Accept bring two RC QPs to
// RTS with each other's QPN and PSNs; SEND and READ work; disconnecting
// moves both to ERR; timewait ends with nothing left.
func TestConnectTransferDisconnect(t *testing.T) {
	a, b := pairOf(t)
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	exchange(t, a, b, l, 0)
	settled(t, a, b, 1)
	if c := a.svc.Counters(); c.Retransmitted != 0 || c.Dropped != 0 {
		t.Fatalf("A's CM counters %+v on a clean link", c)
	}
}

// TestLossyLink: with a tenth of all frames lost, a tenth duplicated and
// some reordered — MADs and data alike — connections still come up, carry
// their data and close, round after round, and nothing leaks.
func TestLossyLink(t *testing.T) {
	a, b := pairOf(t)
	a.link.SetImpairment(memlink.Impairment{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1, Seed: 1})
	b.link.SetImpairment(memlink.Impairment{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1, Seed: 2})
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(ipB, 0), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for round := range 10 {
		exchange(t, a, b, l, round)
	}
	settled(t, a, b, 1)
	ca, cb := a.svc.Counters(), b.svc.Counters()
	if ca.Retransmitted+cb.Retransmitted == 0 || ca.Duplicates+cb.Duplicates == 0 {
		t.Fatalf("no retransmissions or duplicates on a lossy link: %+v %+v", ca, cb)
	}
}

// TestManyConnections: 300 connections in a row (rdma_cm users report
// failures after about 1000 on rxe); every ID and connection is freed.
func TestManyConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("300 connections")
	}
	a, b := pairOf(t)
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(netip.IPv4Unspecified(), 0), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for round := range 300 {
		exchange(t, a, b, l, round)
	}
	settled(t, a, b, 1)
}

// TestRefused: no listener is REJ reason 8; a listener's rejection is
// reason 28 with its private data; both are ECONNREFUSED to Dial.
func TestRefused(t *testing.T) {
	a, b := pairOf(t)
	ctx := ctxFor(t, 10*time.Second)
	_, err := a.svc.Dial(ctx, a.qp(t, verbs.QPTypeRC), netip.AddrPortFrom(ipB, 9999), ConnParam{})
	if !errors.Is(err, ErrConnRefused) {
		t.Fatalf("dial to nothing: %v", err)
	}
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(ipB, 7175), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if req, err := l.Next(ctx); err == nil {
			req.Reject([]byte("not today"))
		}
	}()
	ch := NewEventChannel()
	id, _ := a.svc.CreateID(ch, PortSpaceTCP, nil)
	defer id.Destroy()
	startConnect(t, ctx, id, ch, netip.AddrPortFrom(ipB, 7175), a.qp(t, verbs.QPTypeRC))
	e, err := ch.Get(ctx)
	if err != nil || e.Type != EventRejected || e.Status != int(cm.RejConsumerDefined) || !bytes.HasPrefix(e.Param.PrivateData, []byte("not today")) {
		t.Fatalf("event %v, private data %q, %v", e, e.Param.PrivateData, err)
	}
	settled(t, a, b, 2)
}

// TestUnreachable: a peer whose CM is gone (its MAC still answers) makes
// Dial fail with ETIMEDOUT after the REQ's retries; an address without a
// neighbour fails address resolution with ETIMEDOUT.
func TestUnreachable(t *testing.T) {
	a, b := pairOf(t)
	b.svc.Close()
	ctx := ctxFor(t, 10*time.Second)
	start := time.Now()
	_, err := a.svc.Dial(ctx, a.qp(t, verbs.QPTypeRC), netip.AddrPortFrom(ipB, 7174), ConnParam{})
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("dial to a dead CM: %v", err)
	}
	// 16 REQs, 24 ms apart.
	if d := time.Since(start); d < 16*24*time.Millisecond {
		t.Fatalf("gave up after %v", d)
	}
	if c := a.svc.Counters(); c.Retransmitted != 15 {
		t.Fatalf("%d retransmissions, want 15", c.Retransmitted)
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = a.svc.Dial(short, a.qp(t, verbs.QPTypeRC), netip.AddrPortFrom(netip.MustParseAddr("198.18.7.99"), 7174), ConnParam{})
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("dial to no neighbour: %v", err)
	}
}

// TestMisuse: the errno values librdmacm's callers see.
func TestMisuse(t *testing.T) {
	a, _ := pairOf(t)
	ch := NewEventChannel()
	id, _ := a.svc.CreateID(ch, PortSpaceTCP, nil)
	defer id.Destroy()
	if err := id.Bind(netip.AddrPortFrom(netip.MustParseAddr("198.18.9.9"), 1)); !errors.Is(err, ErrAddrNotAvail) {
		t.Fatalf("bind to another's address: %v", err)
	}
	if err := id.Connect(ConnParam{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("connect unresolved: %v", err)
	}
	if err := id.Bind(netip.AddrPortFrom(ipA, 5000)); err != nil {
		t.Fatal(err)
	}
	other, _ := a.svc.CreateID(ch, PortSpaceTCP, nil)
	defer other.Destroy()
	if err := other.Bind(netip.AddrPortFrom(ipA, 5000)); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("second bind: %v", err)
	}
	udp, _ := a.svc.CreateID(ch, PortSpaceUDP, nil)
	defer udp.Destroy()
	if err := udp.Bind(netip.AddrPortFrom(ipA, 5000)); err != nil {
		t.Fatalf("the same port in another port space: %v", err)
	}
	if err := id.Disconnect(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("disconnect unconnected: %v", err)
	}
	if err := id.Accept(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("accept on an active ID: %v", err)
	}
	if _, err := a.svc.CreateID(ch, PortSpace(2), nil); !errors.Is(err, ErrNotSup) {
		t.Fatalf("IPoIB port space: %v", err)
	}
	id.Destroy()
	if err := id.Destroy(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second destroy: %v", err)
	}
}

// TestUDLookup: a UD service found by SIDR: its QPN and rdma_cm's Q_Key,
// and an address handle that carries a datagram to it.
func TestUDLookup(t *testing.T) {
	a, b := pairOf(t)
	ctx := ctxFor(t, 10*time.Second)
	l, err := b.svc.Listen(PortSpaceUDP, netip.AddrPortFrom(ipB, 7174), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qb := b.qp(t, verbs.QPTypeUD)
	go func() {
		if req, err := l.Next(ctx); err == nil {
			if !bytes.HasPrefix(req.UD.PrivateData, []byte("ud please")) {
				t.Errorf("lookup private data %q", req.UD.PrivateData)
			}
			if _, err := req.Accept(ctx, qb, nil); err != nil {
				t.Error(err)
			}
		}
	}()
	qa := a.qp(t, verbs.QPTypeUD)
	ud, err := a.svc.LookupUD(ctx, qa, netip.AddrPortFrom(ipB, 7174), []byte("ud please"))
	if err != nil {
		t.Fatal(err)
	}
	if ud.QPNum != qb.QPN() || ud.QKey != UDPQKey || qa.State() != verbs.StateRTS {
		t.Fatalf("lookup %+v, QP %#x, A's QP in %v", ud, qb.QPN(), qa.State())
	}
	for qb.State() != verbs.StateRTS {
		time.Sleep(time.Millisecond)
	}
	if _, err := qb.PostRecv([]verbs.RecvWR{{ID: 1, SGList: b.sge(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAH(ud.AH)
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	copy(a.mr.Bytes(), "datagram")
	if _, err := qa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 8),
		AH: ah, RemoteQPN: ud.QPNum, RemoteQKey: ud.QKey}}); err != nil {
		t.Fatal(err)
	}
	a.complete(t)
	if wc := b.complete(t); wc.SrcQP != qa.QPN() || string(b.mr.Bytes()[40:48]) != "datagram" {
		t.Fatalf("datagram %+v %q", wc, b.mr.Bytes()[40:48])
	}
}

// startConnect resolves dst for id, gives it qp and sends the request.
func startConnect(t *testing.T, ctx context.Context, id *ID, ch *EventChannel, dst netip.AddrPort, qp *verbs.QP) {
	t.Helper()
	if err := id.resolve(ctx, ch, dst); err != nil {
		t.Fatal(err)
	}
	if err := id.AttachQP(qp); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
}

// TestBacklogFull: a request beyond the listener's backlog is not answered
// (Linux sends no REJ for it), so the requester's retransmission finds room
// once the first request is accepted, and both connect.
func TestBacklogFull(t *testing.T) {
	a, b := pairOf(t)
	ctx := ctxFor(t, 10*time.Second)
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(ipB, 7176), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dialed := make(chan error, 2)
	for range 2 {
		qp := a.qp(t, verbs.QPTypeRC)
		go func() {
			_, err := a.svc.Dial(ctx, qp, netip.AddrPortFrom(ipB, 7176), ConnParam{RetryCount: 7, RNRRetryCount: 7})
			dialed <- err
		}()
	}
	first, err := l.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Both REQs arrived and the second was retransmitted a few times: still
	// one request, and no refusal.
	time.Sleep(150 * time.Millisecond)
	if n := l.ch.Len(); n != 0 {
		t.Fatalf("%d more requests past a backlog of 1", n)
	}
	select {
	case err := <-dialed:
		t.Fatalf("a dial ended while its request waited for room: %v", err)
	default:
	}
	if _, err := first.Accept(ctx, b.qp(t, verbs.QPTypeRC), nil); err != nil {
		t.Fatal(err)
	}
	second, err := l.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Accept(ctx, b.qp(t, verbs.QPTypeRC), nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-dialed; err != nil {
			t.Fatal(err)
		}
	}
}

// TestEstablishByOwner: an ID without a QP gets CONNECT_RESPONSE; its
// owner moves the QP and establishes (the RTU goes, no ESTABLISHED follows
// on its side, as rdma_establish), and the passive side is established.
// Migrating an ID takes its queued events along.
func TestEstablishByOwner(t *testing.T) {
	a, b := pairOf(t)
	ctx := ctxFor(t, 10*time.Second)
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(ipB, 7177), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	accepted := make(chan *Conn, 1)
	go func() {
		req, err := l.Next(ctx)
		if err != nil {
			accepted <- nil
			return
		}
		c, _ := req.Accept(ctx, qb, nil)
		accepted <- c
	}()
	ch := NewEventChannel()
	id, _ := a.svc.CreateID(ch, PortSpaceTCP, nil)
	defer id.Destroy()
	if err := id.resolve(ctx, ch, netip.AddrPortFrom(ipB, 7177)); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(ConnParam{QPNum: qa.QPN(), RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	e, err := wait(ctx, ch, EventConnectResponse)
	if err != nil || e.Param.QPNum != qb.QPN() {
		t.Fatalf("%v %+v", err, e.Param)
	}
	// The owner's QP, moved with the attributes rdma_init_qp_attr gives.
	for _, st := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		attr, mask, err := id.InitQPAttr(st)
		if err == nil {
			err = qa.Modify(attr, mask)
		}
		if err != nil {
			t.Fatalf("to %v: %v", st, err)
		}
	}
	if err := id.Establish(); err != nil {
		t.Fatal(err)
	}
	if cb := <-accepted; cb == nil {
		t.Fatal("the passive side was not established")
	}
	other := NewEventChannel()
	if err := id.Migrate(other); err != nil {
		t.Fatal(err)
	}
	if e, ok := ch.TryGet(); ok {
		t.Fatalf("after rdma_establish: %v", e)
	}
	// The peer closes; its DISCONNECTED, queued on the old channel before
	// a second migration, moves with the ID.
	if n := b.svc.agent.Conns(); n < 1 {
		t.Fatal("no connection")
	}
	var peer *ID
	b.svc.mu.Lock()
	for i := range b.svc.ids {
		if i != l.id {
			peer = i
		}
	}
	b.svc.mu.Unlock()
	if err := peer.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for other.Len() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := id.Migrate(ch); err != nil {
		t.Fatal(err)
	}
	if e, err := wait(ctx, ch, EventDisconnected); err != nil || other.Len() != 0 {
		t.Fatalf("%v %v, %d left behind", e, err, other.Len())
	}
}

// TestForgedSourceDoesNotStall: a request forged from an address no
// neighbour answers for makes the CM answer it (a REJ), and the address
// handle for that answer waits on ARP for seconds; the MADs to everyone
// else do not wait with it: a connection made meanwhile completes at once.
func TestForgedSourceDoesNotStall(t *testing.T) {
	a, b := pairOf(t)
	ctx := ctxFor(t, 10*time.Second)
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(ipB, 7178), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	forged, _ := cm.Encode(cm.CMHeader(cm.AttrREQ, 1), &cm.REQ{LocalCommID: 7, ServiceID: cm.ServiceID(cm.PortSpaceTCP, 9),
		LocalQPN: 0x99, MaxCMRetries: 15})
	for i := range 40 { // forty spoofed sources, none of which answers ARP
		b.svc.agent.Receive(netip.AddrFrom4([4]byte{198, 18, 9, byte(i)}), forged)
	}
	go func() {
		if req, err := l.Next(ctx); err == nil {
			req.Accept(ctx, b.qp(t, verbs.QPTypeRC), nil)
		}
	}()
	start := time.Now()
	if _, err := a.svc.Dial(ctx, a.qp(t, verbs.QPTypeRC), netip.AddrPortFrom(ipB, 7178), ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	// Each forged source's handle takes the resolver's 3 s; the dial, one
	// REQ and its REP, must not wait behind them.
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the connection took %v behind the forged requests' address resolution", d)
	}
}

// TestListenerGoneRejectsQueued: connection requests queued for a
// listening ID that its owner destroys before fetching them are rejected
// (consumer defined, as the kernel's cma destroying their IDs) and freed,
// not left waiting in REQ_RCVD.
func TestListenerGoneRejectsQueued(t *testing.T) {
	a, b := pairOf(t)
	ctx := ctxFor(t, 10*time.Second)
	ch := NewEventChannel()
	l, err := b.svc.CreateID(ch, PortSpaceTCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Bind(netip.AddrPortFrom(ipB, 7177)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(8); err != nil {
		t.Fatal(err)
	}
	dialed := make(chan error, 1)
	qp := a.qp(t, verbs.QPTypeRC)
	go func() {
		_, err := a.svc.Dial(ctx, qp, netip.AddrPortFrom(ipB, 7177), ConnParam{RetryCount: 7})
		dialed <- err
	}()
	for end := time.Now().Add(5 * time.Second); ch.Len() == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
	}
	if ch.Len() != 1 {
		t.Fatalf("%d events queued, want the CONNECT_REQUEST", ch.Len())
	}
	if err := l.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := <-dialed; !errors.Is(err, ErrConnRefused) {
		t.Fatalf("dial to a listener destroyed with the request queued: %v, want ECONNREFUSED", err)
	}
	if n := ch.Len(); n != 0 {
		t.Fatalf("%d events left on the channel", n)
	}
	settled(t, a, b, 0)
}

// TestAddressHandlesBounded: forged requests from more source addresses
// than QP1 keeps address handles for (each answered with a REJ, each
// source a neighbour that answers) leave at most gsiCachedAHs handles,
// and a real connection still completes.
func TestAddressHandlesBounded(t *testing.T) {
	a, b := nodePair(t, pairSpec{ips: [2]netip.Addr{ipA, ipB}, macs: [2]net.HardwareAddr{macA, macB}, mtu: 1024, opts: testOptions, anyNeighbour: true})
	ctx := ctxFor(t, 30*time.Second)
	forged, _ := cm.Encode(cm.CMHeader(cm.AttrREQ, 1), &cm.REQ{LocalCommID: 7, ServiceID: cm.ServiceID(cm.PortSpaceTCP, 9),
		LocalQPN: 0x99, MaxCMRetries: 15})
	const sources = 3 * gsiCachedAHs
	most := 0
	for i := range sources {
		b.svc.agent.Receive(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), forged)
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // let QP1's sender keep up
		}
		most = max(most, b.svc.CachedAddressHandles(), b.dev.AddressHandles()-1)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		most = max(most, b.svc.CachedAddressHandles(), b.dev.AddressHandles()-1)
	}
	if most > gsiCachedAHs+gsiResolving {
		t.Fatalf("QP1 held %d address handles for %d forged sources, more than %d cached and %d being made", most, sources, gsiCachedAHs, gsiResolving)
	}
	if b.svc.CachedAddressHandles() == 0 {
		t.Fatal("no address handle cached: the forged requests were not answered")
	}
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(ipB, 7179), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if req, err := l.Next(ctx); err == nil {
			req.Accept(ctx, b.qp(t, verbs.QPTypeRC), nil)
		}
	}()
	if _, err := a.svc.Dial(ctx, a.qp(t, verbs.QPTypeRC), netip.AddrPortFrom(ipB, 7179), ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
}
