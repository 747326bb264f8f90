package cmagent

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
)

var (
	addrA = netip.MustParseAddr("198.18.0.1")
	addrB = netip.MustParseAddr("198.18.0.2")
)

const service = 0x01061c06 // RDMA_PS_TCP, port 7174

// mad is one MAD in flight.
type mad struct {
	from, to netip.Addr
	data     []byte
}

func (m mad) attr() cm.Attr { h, _ := cm.DecodeHeader(m.data); return h.Attr }

// fabric connects agents by address. MADs wait in flight until the test
// delivers them, so it decides what is lost, duplicated or reordered; time
// is a fake clock.
type fabric struct {
	t      *testing.T
	now    time.Time
	agents map[netip.Addr]*Agent
	flight []mad
	sent   []mad // everything ever sent
	events map[netip.Addr][]Event
	// onEvent, if set, reacts to events (accept, establish, ...), after
	// the agent's lock is released.
	onEvent func(at netip.Addr, e Event)
}

type port struct {
	f    *fabric
	addr netip.Addr
}

func (p port) SendMAD(to netip.Addr, data []byte) {
	m := mad{from: p.addr, to: to, data: bytes.Clone(data)}
	p.f.flight = append(p.f.flight, m)
	p.f.sent = append(p.f.sent, m)
}

func newFabric(t *testing.T, addrs ...netip.Addr) *fabric {
	f := &fabric{t: t, now: time.Unix(1e9, 0), agents: map[netip.Addr]*Agent{}, events: map[netip.Addr][]Event{}}
	for i, a := range addrs {
		at := a
		f.agents[a] = New(Config{Send: port{f, a}, GUID: 0x505400fffe180000 | uint64(i+1), Seed: uint64(i + 1),
			Now:     func() time.Time { return f.now },
			Deliver: func(e Event) { f.deliver(at, e) }})
	}
	return f
}

func (f *fabric) deliver(at netip.Addr, e Event) {
	f.events[at] = append(f.events[at], e)
	if f.onEvent != nil {
		f.onEvent(at, e)
	}
}

// step delivers what is in flight now (what it causes waits for the next
// step); keep decides for each MAD how many copies arrive (0 loses it).
func (f *fabric) step(keep func(m mad) int) int {
	batch := f.flight
	f.flight = nil
	n := 0
	for _, m := range batch {
		copies := 1
		if keep != nil {
			copies = keep(m)
		}
		for range copies {
			if a := f.agents[m.to]; a != nil {
				a.Receive(m.from, m.data)
				n++
			}
		}
	}
	return n
}

// settle delivers until nothing is in flight.
func (f *fabric) settle() {
	for i := 0; len(f.flight) > 0; i++ {
		if i > 100 {
			f.t.Fatal("MADs still in flight after 100 steps")
		}
		f.step(nil)
	}
}

// advance moves the clock by d and runs every agent's timers.
func (f *fabric) advance(d time.Duration) {
	f.now = f.now.Add(d)
	for _, a := range f.agents {
		a.Tick()
	}
}

func (f *fabric) types(at netip.Addr) []EventType {
	var ts []EventType
	for _, e := range f.events[at] {
		ts = append(ts, e.Type)
	}
	return ts
}

func (f *fabric) count(attr cm.Attr, from netip.Addr) int {
	n := 0
	for _, m := range f.sent {
		if m.from == from && m.attr() == attr {
			n++
		}
	}
	return n
}

func request(qpn, psn uint32) cm.REQ {
	r := cm.REQ{ServiceID: service, LocalQPN: qpn, StartingPSN: psn, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: DefaultResponseTimeout, LocalCMResponseTimeout: DefaultResponseTimeout,
		RetryCount: 7, RNRRetryCount: 7, PKey: 0xffff, PathMTU: 5, MaxCMRetries: DefaultMaxRetries,
		Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, HopLimit: 64, LocalACKTimeout: 19}}
	r.Primary.LocalGID = addrA.As16()
	r.Primary.RemoteGID = addrB.As16()
	copy(r.PrivateData[cm.IPHeaderLen:], "hello")
	return r
}

func reply(qpn, psn uint32) cm.REP {
	r := cm.REP{LocalQPN: qpn, StartingPSN: psn, ResponderResources: 1, InitiatorDepth: 1,
		TargetACKDelay: DefaultTargetACKDelay, RNRRetryCount: 7}
	copy(r.PrivateData[:], "welcome")
	return r
}

// autopilot makes B accept every request and A establish every reply, as
// rdma_cm's users (and librdmacm inside rdma_get_cm_event) do.
func autopilot(f *fabric) {
	f.onEvent = func(at netip.Addr, e Event) {
		switch e.Type {
		case EventConnectRequest:
			if e.SIDR.ServiceID != 0 {
				if err := e.Conn.ReplySIDR(cm.SIDRValid, 0x30, 0x01234567, nil); err != nil {
					f.t.Errorf("SIDR reply: %v", err)
				}
				return
			}
			if err := e.Conn.Accept(reply(0x30, 0x2060b3)); err != nil {
				f.t.Errorf("accept: %v", err)
			}
		case EventConnectResponse:
			if err := e.Conn.Establish(nil); err != nil {
				f.t.Errorf("establish: %v", err)
			}
		}
	}
}

func wantTypes(t *testing.T, f *fabric, at netip.Addr, want ...EventType) {
	t.Helper()
	if got := f.types(at); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%v's events %v, want %v", at, got, want)
	}
}

// connect runs a connection from A to B to ESTABLISHED on both sides.
func connect(t *testing.T, f *fabric) (*Conn, *Conn) {
	t.Helper()
	if _, err := f.agents[addrB].Listen(service, "listener"); err != nil {
		t.Fatal(err)
	}
	autopilot(f)
	ca, err := f.agents[addrA].Connect(addrB, request(0x11, 0xfd8ff6), "a")
	if err != nil {
		t.Fatal(err)
	}
	f.settle()
	wantTypes(t, f, addrA, EventConnectResponse, EventEstablished)
	wantTypes(t, f, addrB, EventConnectRequest, EventEstablished)
	return ca, f.events[addrB][0].Conn
}

// TestConnectDisconnect: REQ, REP, RTU, DREQ, DREP, as rping's capture
// has them: transaction IDs, communication IDs, the QP parameters each end
// derives, private data both ways, and timewait ending with nothing left.
func TestConnectDisconnect(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	ca, cb := connect(t, f)
	req := f.events[addrB][0]
	if req.Listener.Context() != "listener" || req.Peer != addrA || !bytes.HasPrefix(req.PrivateData[cm.IPHeaderLen:], []byte("hello")) ||
		req.REQ.LocalCAGUID != 0x505400fffe180001 {
		t.Fatalf("request event %+v", req)
	}
	if resp := f.events[addrA][0]; !bytes.HasPrefix(resp.PrivateData, []byte("welcome")) || ca.Context() != "a" {
		t.Fatalf("response private data %q", resp.PrivateData[:8])
	}
	// Every message of the connection carries the REQ's transaction ID,
	// Linux's form of A's communication ID.
	for _, m := range f.sent {
		h, _ := cm.DecodeHeader(m.data)
		if h.TID != tidFor(ca.LocalID()) || h.TID>>32 != hiTID {
			t.Fatalf("%v TID %#x, want %#x", h.Attr, h.TID, tidFor(ca.LocalID()))
		}
	}
	pa, pb := ca.QPParams(), cb.QPParams()
	if pa.RemoteQPN != 0x30 || pb.RemoteQPN != 0x11 || pa.SQPSN != pb.RQPSN || pa.RQPSN != pb.SQPSN || pa.RQPSN != 0xfd8ff6 ||
		pa.SQPSN != 0x2060b3 || pa.Timeout != 19 || pb.Timeout != 19 || pa.MaxRdAtomic != 1 || pb.MaxDestRdAtomic != 1 ||
		pb.Path.LocalGID != addrB.As16() || pa.Path.LocalGID != addrA.As16() || pa.PathMTU != 5 || pb.RNRRetryCount != 7 {
		t.Fatalf("QP parameters\nA %+v\nB %+v", pa, pb)
	}
	if err := ca.Disconnect([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	f.settle()
	wantTypes(t, f, addrB, EventConnectRequest, EventEstablished, EventDisconnected)
	if !bytes.HasPrefix(f.events[addrB][2].PrivateData, []byte("bye")) {
		t.Fatal("DREQ's private data lost")
	}
	// B answers when its owner disconnects too, as rping's server does.
	if err := cb.Disconnect(nil); err != nil {
		t.Fatal(err)
	}
	f.settle()
	wantTypes(t, f, addrA, EventConnectResponse, EventEstablished, EventDisconnected)
	if ca.State() != StateTimewait || cb.State() != StateTimewait {
		t.Fatalf("states %v %v, want timewait", ca.State(), cb.State())
	}
	f.advance(3 * time.Second)
	wantTypes(t, f, addrA, EventConnectResponse, EventEstablished, EventDisconnected, EventTimewaitExit)
	for _, a := range f.agents {
		if a.Conns() != 0 {
			t.Fatalf("%d connections left after timewait", a.Conns())
		}
	}
	if seq := fmt.Sprint(attrs(f.sent)); seq != "[REQ REP RTU DREQ DREP]" {
		t.Fatalf("messages %s", seq)
	}
}

func attrs(ms []mad) []cm.Attr {
	var as []cm.Attr
	for _, m := range ms {
		as = append(as, m.attr())
	}
	return as
}

// lose returns a keep function that loses the first n MADs of attr.
func lose(attr cm.Attr, n int) func(mad) int {
	return func(m mad) int {
		if m.attr() == attr && n > 0 {
			n--
			return 0
		}
		return 1
	}
}

// TestLostMessages: each message of the handshake lost once is recovered
// by the timers, with each event delivered once.
func TestLostMessages(t *testing.T) {
	for _, c := range []struct {
		lost cm.Attr
		wait time.Duration // when the retransmission that recovers it comes
	}{
		{cm.AttrREQ, 6144 * time.Millisecond}, // 2 × lifetime 18 + response timeout 20
		{cm.AttrREP, 4096 * time.Millisecond}, // B's REP timer (the REQ's local response timeout)
		{cm.AttrRTU, 4096 * time.Millisecond}, // B's REP again; A answers with its RTU
	} {
		t.Run(c.lost.String(), func(t *testing.T) {
			f := newFabric(t, addrA, addrB)
			f.agents[addrB].Listen(service, nil)
			autopilot(f)
			if _, err := f.agents[addrA].Connect(addrB, request(0x11, 1), nil); err != nil {
				t.Fatal(err)
			}
			keep := lose(c.lost, 1)
			for range 5 {
				f.step(keep)
			}
			f.advance(c.wait - time.Millisecond)
			if len(f.flight) != 0 {
				t.Fatalf("retransmitted before its timeout: %v", attrs(f.flight))
			}
			f.advance(time.Millisecond)
			f.settle()
			wantTypes(t, f, addrA, EventConnectResponse, EventEstablished)
			wantTypes(t, f, addrB, EventConnectRequest, EventEstablished)
			if r := f.agents[addrA].Counters().Retransmitted + f.agents[addrB].Counters().Retransmitted; r != 1 {
				t.Fatalf("%d retransmissions, want 1", r)
			}
		})
	}
}

// TestDuplicatedMessages: every MAD arriving twice changes nothing but the
// duplicate counters: one event of each kind, an RTU answered once more.
func TestDuplicatedMessages(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	f.agents[addrB].Listen(service, nil)
	autopilot(f)
	ca, err := f.agents[addrA].Connect(addrB, request(0x11, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	twice := func(mad) int { return 2 }
	for len(f.flight) > 0 {
		f.step(twice)
	}
	ca.Disconnect(nil)
	for len(f.flight) > 0 {
		f.step(twice)
	}
	f.events[addrB][0].Conn.Disconnect(nil)
	for len(f.flight) > 0 {
		f.step(twice)
	}
	wantTypes(t, f, addrA, EventConnectResponse, EventEstablished, EventDisconnected)
	wantTypes(t, f, addrB, EventConnectRequest, EventEstablished, EventDisconnected)
	if d := f.agents[addrA].Counters().Duplicates + f.agents[addrB].Counters().Duplicates; d == 0 {
		t.Fatal("no duplicates counted")
	}
}

// TestDisconnectOvertakesRTU: A's DREQ arrives before its RTU; B closes
// without ever being established, and the late RTU is dropped.
func TestDisconnectOvertakesRTU(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	f.agents[addrB].Listen(service, nil)
	autopilot(f)
	ca, _ := f.agents[addrA].Connect(addrB, request(0x11, 1), nil)
	f.step(nil) // REQ
	f.step(nil) // REP; A sends RTU
	if err := ca.Disconnect(nil); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(attrs(f.flight)); got != "[RTU DREQ]" {
		t.Fatalf("in flight %s", got)
	}
	f.flight[0], f.flight[1] = f.flight[1], f.flight[0]
	f.step(nil)
	wantTypes(t, f, addrB, EventConnectRequest, EventDisconnected)
	if f.agents[addrB].Counters().Dropped != 1 {
		t.Fatal("the late RTU was not dropped")
	}
	f.events[addrB][0].Conn.Disconnect(nil)
	f.settle()
	wantTypes(t, f, addrA, EventConnectResponse, EventEstablished, EventDisconnected)
}

// TestUnreachable: a REQ nobody answers is sent 1 + 15 times, 6.144 s
// apart, then the peer is unreachable and the agent forgets it.
func TestUnreachable(t *testing.T) {
	f := newFabric(t, addrA)
	if _, err := f.agents[addrA].Connect(addrB, request(0x11, 1), nil); err != nil {
		t.Fatal(err)
	}
	for range 16 {
		f.advance(6144 * time.Millisecond)
	}
	wantTypes(t, f, addrA, EventUnreachable)
	if n := f.count(cm.AttrREQ, addrA); n != 16 {
		t.Fatalf("%d REQs, want 16", n)
	}
	if f.agents[addrA].Conns() != 0 {
		t.Fatal("connection kept")
	}
	if _, ok := f.agents[addrA].NextDeadline(); ok {
		t.Fatal("a timer still runs")
	}
}

// TestNoListener: a REQ to a service nobody listens on is rejected with
// reason 8, as Linux does.
func TestNoListener(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	f.agents[addrA].Connect(addrB, request(0x11, 1), nil)
	f.settle()
	wantTypes(t, f, addrA, EventRejected)
	if r := f.events[addrA][0].Reason; r != cm.RejInvalidServiceID {
		t.Fatalf("reason %d", r)
	}
	if f.agents[addrA].Conns()+f.agents[addrB].Conns() != 0 {
		t.Fatal("connections left")
	}
}

// TestSlowAccept: while B's owner has not answered, a retransmitted REQ
// gets an MRA, which makes A wait the MRA's service timeout (24: ~68 s)
// before it sends the REQ again; the late accept then connects.
func TestSlowAccept(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	f.agents[addrB].Listen(service, nil)
	f.agents[addrA].Connect(addrB, request(0x11, 1), nil)
	f.settle()
	f.advance(6144 * time.Millisecond)
	f.settle()
	if n := f.count(cm.AttrMRA, addrB); n != 1 {
		t.Fatalf("%d MRAs", n)
	}
	if s := f.events[addrB][0].Conn.State(); s != StateMRAReqSent {
		t.Fatalf("B in %v", s)
	}
	f.advance(60 * time.Second)
	if n := f.count(cm.AttrREQ, addrA); n != 2 {
		t.Fatalf("%d REQs during the MRA's wait", n)
	}
	if err := f.events[addrB][0].Conn.Accept(reply(0x30, 2)); err != nil {
		t.Fatal(err)
	}
	autopilot(f)
	f.settle()
	wantTypes(t, f, addrA, EventConnectResponse, EventEstablished)
	wantTypes(t, f, addrB, EventConnectRequest, EventEstablished)
}

// TestReject: the owner's rejection reaches the other side with reason 28
// and its private data; destroying an unanswered request rejects it too.
func TestReject(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	f.agents[addrB].Listen(service, nil)
	f.agents[addrA].Connect(addrB, request(0x11, 1), nil)
	f.settle()
	if err := f.events[addrB][0].Conn.Reject(cm.RejConsumerDefined, []byte("go away")); err != nil {
		t.Fatal(err)
	}
	f.settle()
	e := f.events[addrA][0]
	if e.Type != EventRejected || e.Reason != cm.RejConsumerDefined || !bytes.HasPrefix(e.PrivateData, []byte("go away")) {
		t.Fatalf("event %v reason %d %q", e.Type, e.Reason, e.PrivateData[:7])
	}
	f.agents[addrA].Connect(addrB, request(0x12, 1), nil)
	f.settle()
	f.events[addrB][1].Conn.Destroy()
	f.settle()
	wantTypes(t, f, addrA, EventRejected, EventRejected)
	if f.agents[addrA].Conns()+f.agents[addrB].Conns() != 0 {
		t.Fatal("connections left")
	}
}

// TestForgedMessages: MADs naming a connection from another address, a
// DREQ for another QP, and garbage are dropped and counted; the connection
// is untouched.
func TestForgedMessages(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	ca, cb := connect(t, f)
	mallory := netip.MustParseAddr("198.18.0.66")
	a := f.agents[addrA]
	before := a.Counters().Dropped
	dreq, _ := cm.Encode(cm.CMHeader(cm.AttrDREQ, 1), &cm.DREQ{Comm: cm.Comm{Local: cb.LocalID(), Remote: ca.LocalID()}, RemoteQPN: 0x11})
	a.Receive(mallory, dreq) // right IDs, wrong peer
	wrongQP, _ := cm.Encode(cm.CMHeader(cm.AttrDREQ, 1), &cm.DREQ{Comm: cm.Comm{Local: cb.LocalID(), Remote: ca.LocalID()}, RemoteQPN: 0x99})
	a.Receive(addrB, wrongQP)
	a.Receive(addrB, []byte("not a MAD"))
	junk := bytes.Clone(dreq)
	junk[1] = 0x81 // another management class
	a.Receive(addrB, junk)
	if d := a.Counters().Dropped - before; d != 4 {
		t.Fatalf("%d dropped, want 4", d)
	}
	if ca.State() != StateEstablished || len(f.events[addrA]) != 2 {
		t.Fatalf("A in %v after forgeries, events %v", ca.State(), f.types(addrA))
	}
	// Mallory's reply went to Mallory: the DREP for an unknown connection.
	if len(f.flight) != 1 || f.flight[0].to != mallory {
		t.Fatalf("in flight %v", attrs(f.flight))
	}
}

// TestStaleREQ: a REQ retransmitted after the connection closed finds it in
// timewait and is rejected as stale.
func TestStaleREQ(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	ca, cb := connect(t, f)
	ca.Disconnect(nil)
	f.settle()
	cb.Disconnect(nil)
	f.settle()
	var req mad
	for _, m := range f.sent {
		if m.attr() == cm.AttrREQ {
			req = m
		}
	}
	f.agents[addrB].Receive(req.from, req.data)
	if len(f.flight) != 1 {
		t.Fatalf("in flight %v", attrs(f.flight))
	}
	_, m, _ := cm.Decode(f.flight[0].data)
	if rej, ok := m.(*cm.REJ); !ok || rej.Reason != cm.RejStaleConn {
		t.Fatalf("answer %+v", m)
	}
}

// TestDREQLost: a DREQ nobody answers is retried, then the connection
// closes anyway.
func TestDREQLost(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	ca, _ := connect(t, f)
	delete(f.agents, addrB)
	ca.Disconnect(nil)
	for range 16 {
		f.advance(4096 * time.Millisecond)
		f.step(nil)
	}
	wantTypes(t, f, addrA, EventConnectResponse, EventEstablished, EventDisconnected)
	if n := f.count(cm.AttrDREQ, addrA); n != 16 {
		t.Fatalf("%d DREQs", n)
	}
	f.advance(3 * time.Second)
	if f.agents[addrA].Conns() != 0 {
		t.Fatal("connection kept")
	}
}

// TestChaos: over a fabric that loses, duplicates and reorders MADs at
// random, connections still come up and go down with each event at most
// once per side, and nothing is left once the timers ran out.
func TestChaos(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		f := newFabric(t, addrA, addrB)
		f.agents[addrB].Listen(service, nil)
		autopilot(f)
		base := f.onEvent
		var ca *Conn
		f.onEvent = func(at netip.Addr, e Event) {
			base(at, e)
			// Both owners disconnect as soon as they learn of the
			// connection's end or beginning.
			if e.Type == EventEstablished || e.Type == EventDisconnected {
				e.Conn.Disconnect(nil)
			}
		}
		ca, _ = f.agents[addrA].Connect(addrB, request(0x11, 1), nil)
		keep := func(mad) int {
			switch r := rng.IntN(10); {
			case r < 3:
				return 0
			case r < 5:
				return 2
			}
			return 1
		}
		for i := 0; i < 4000 && f.agents[addrA].Conns()+f.agents[addrB].Conns() > 0; i++ {
			rng.Shuffle(len(f.flight), func(i, j int) { f.flight[i], f.flight[j] = f.flight[j], f.flight[i] })
			f.step(keep)
			f.advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		for at := range f.agents {
			seen := map[EventType]int{}
			for _, ty := range f.types(at) {
				if seen[ty]++; seen[ty] > 1 {
					t.Fatalf("seed %d: %v got %v twice: %v", seed, at, ty, f.types(at))
				}
			}
		}
		if n := f.agents[addrA].Conns() + f.agents[addrB].Conns(); n != 0 {
			t.Fatalf("seed %d: %d connections left (A %v)", seed, n, ca.State())
		}
		if ty := f.types(addrA); len(ty) == 0 || (ty[0] != EventConnectResponse && ty[0] != EventUnreachable) {
			t.Fatalf("seed %d: A's events %v", seed, ty)
		}
	}
}

// TestSIDR: a UD service lookup answers with the QPN and Q_Key; a lost
// reply is sent again for the retransmitted request without a second
// request event; a service nobody listens on answers "unsupported".
func TestSIDR(t *testing.T) {
	f := newFabric(t, addrA, addrB)
	const udService = 0x01110000 | 7174
	f.agents[addrB].Listen(udService, nil)
	f.onEvent = func(at netip.Addr, e Event) {
		if e.Type == EventConnectRequest {
			if e.SIDR.ServiceID != udService {
				t.Errorf("SIDR request for %#x", e.SIDR.ServiceID)
			}
			if err := e.Conn.ReplySIDR(cm.SIDRValid, 0x44, 0x01234567, []byte("ud")); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := f.agents[addrA].Resolve(addrB, udService, []byte("who"), nil); err != nil {
		t.Fatal(err)
	}
	f.step(nil)
	f.step(func(mad) int { return 0 }) // the reply is lost
	f.advance(Duration(DefaultResponseTimeout))
	f.settle()
	wantTypes(t, f, addrB, EventConnectRequest)
	wantTypes(t, f, addrA, EventEstablished)
	if s := f.events[addrA][0].SIDR; s.QPN != 0x44 || s.QKey != 0x01234567 || s.Status != cm.SIDRValid {
		t.Fatalf("SIDR answer %+v", s)
	}
	f.agents[addrA].Resolve(addrB, 0x01110000|9999, nil, nil)
	f.settle()
	if e := f.events[addrA][1]; e.Type != EventUnreachable || e.SIDR.Status != cm.SIDRUnsupported {
		t.Fatalf("lookup of nothing: %v %+v", e.Type, e.SIDR)
	}
	f.advance(f.agents[addrB].sidrTimewait())
	if f.agents[addrA].Conns()+f.agents[addrB].Conns() != 0 {
		t.Fatal("lookups left")
	}
}

// FuzzReceive: whatever arrives on QP1 — forged, truncated, out of order —
// the agent never panics, announces a request at most once while it is
// alive, and once its owners closed what they were told of, keeps nothing
// after its timers ran out.
func FuzzReceive(f *testing.F) {
	seed := newFabric(&testing.T{}, addrA, addrB)
	seed.agents[addrB].Listen(service, nil)
	autopilot(seed)
	c, _ := seed.agents[addrA].Connect(addrB, request(0x11, 1), nil)
	seed.settle()
	c.Disconnect(nil)
	seed.settle()
	for _, m := range seed.sent {
		f.Add(m.data, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, fromA bool) {
		fz := newFabric(t, addrA, addrB)
		fz.agents[addrB].Listen(service, nil)
		fz.agents[addrB].Listen(0x01110000|7174, nil)
		autopilot(fz)
		accept := fz.onEvent
		fz.onEvent = func(at netip.Addr, e Event) {
			accept(at, e)
			if e.Type == EventDisconnected {
				e.Conn.Disconnect(nil) // the owner answers, as rdma_cm's users do
			}
		}
		ca, _ := fz.agents[addrA].Connect(addrB, request(0x11, 1), nil)
		from, to := addrA, addrB
		if fromA {
			from, to = addrB, addrA
		}
		// The forgery arrives before, during and after the handshake.
		for range 3 {
			fz.agents[to].Receive(from, data)
			fz.step(nil)
		}
		ca.Disconnect(nil)
		fz.settle()
		// Then every owner closes what it was told of: an established
		// connection whose peer vanished has no CM timer (its QP finds out).
		for _, evs := range fz.events {
			for _, e := range evs {
				e.Conn.Destroy()
			}
		}
		for range 40 {
			fz.advance(70 * time.Second)
			fz.settle()
		}
		for at, a := range fz.agents {
			if a.Conns() != 0 {
				t.Fatalf("%v keeps %d connections: %v", at, a.Conns(), fz.types(at))
			}
			requests := 0
			for _, ty := range fz.types(at) {
				if ty == EventConnectRequest {
					requests++
				}
			}
			// The real request, and each forged copy at most once: a copy
			// comes again only after the first was rejected and forgotten.
			if requests > 4 {
				t.Fatalf("%v: %d requests announced", at, requests)
			}
		}
	})
}
