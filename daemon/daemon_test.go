package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/verbs"
)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
	ipA  = netip.MustParseAddr("198.18.0.1")
	ipB  = netip.MustParseAddr("198.18.0.2")
	ipA6 = netip.MustParseAddr("2001:2::a")
	// ipMute answers no neighbour solicitation.
	ipMute = netip.MustParseAddr("198.18.0.99")
)

// resolveB is device A's neighbour table: B, and a host that never answers.
func resolveB(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	if ip == ipB {
		return macB, nil
	}
	return nil, context.DeadlineExceeded
}

// resolveA is device B's neighbour table: A.
func resolveA(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	if ip == ipA {
		return macA, nil
	}
	return nil, context.DeadlineExceeded
}

// testbed is a daemon serving device A of an in-memory link pair, and
// device B in-process at the other end.
type testbed struct {
	name           string
	srv            *Server
	a, b           *verbs.Device
	linkAB, linkBA *memlink.Link // A's end (the daemon's device) and B's
	stop           context.CancelFunc
	done           chan error // Run's result, once
}

func newTestbed(t *testing.T) *testbed { return newTestbedGroup(t, -1) }

// newTestbedGroup is newTestbed with a daemon that admits group too.
func newTestbedGroup(t *testing.T, group int) *testbed { return newTestbedWith(t, group, Limits{}) }

// newTestbedWith is newTestbedGroup with a daemon of clients' limits lim.
func newTestbedWith(t *testing.T, group int, lim Limits) *testbed {
	t.Helper()
	la, lb := memlink.NewPair(9000)
	var err error
	tb := &testbed{linkAB: la, linkBA: lb}
	tb.a, err = verbs.NewDevice(la, verbs.DeviceConfig{MAC: macA, GIDs: []netip.Addr{ipA, ipA6}, ActiveMTU: 1024, Resolve: resolveB})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.a.Close() })
	tb.b, err = verbs.NewDevice(lb, verbs.DeviceConfig{MAC: macB, GIDs: []netip.Addr{ipB}, ActiveMTU: 1024, Resolve: resolveA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.b.Close() })
	var r [6]byte
	rand.Read(r[:])
	tb.name = "test-" + hex.EncodeToString(r[:])
	tb.srv, err = New(Config{Ifname: tb.name, Device: tb.a, Group: group, Logger: discardLogger(), Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.stop, tb.done = cancel, make(chan error, 1)
	go func() { tb.done <- tb.srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err, ok := <-tb.done; ok && err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return tb
}

// shutdown stops the daemon and reports whether Run returned within d.
func (tb *testbed) shutdown(t *testing.T, d time.Duration) bool {
	t.Helper()
	tb.stop()
	select {
	case err := <-tb.done:
		close(tb.done)
		if err != nil {
			t.Errorf("daemon: %v", err)
		}
		return true
	case <-time.After(d):
		return false
	}
}

func (tb *testbed) dial(t *testing.T) *verbs.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := verbs.Dial(ctx, tb.name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// end is one side of a connection: a QP, its CQ and a region.
type end struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func newEnd(t *testing.T, d *verbs.Device, size int) *end {
	t.Helper()
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	return newEndWith(t, d, endSpec{cqDepth: 64, size: size, access: access,
		attr: verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}})
}

// endSpec shapes an end: its CQ's depth, its QP's attributes (the CQs are
// filled in), its region's size and access.
type endSpec struct {
	cqDepth, size int
	attr          verbs.QPInitAttr
	access        verbs.Access
	srq           func(*verbs.PD) *verbs.SRQ // if set, the QP's SRQ
}

func newEndWith(t *testing.T, d *verbs.Device, s endSpec) *end {
	t.Helper()
	e := &end{dev: d}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(s.cqDepth); err != nil {
		t.Fatal(err)
	}
	attr := s.attr
	attr.Type, attr.SendCQ, attr.RecvCQ = verbs.QPTypeRC, e.cq, e.cq
	if s.srq != nil {
		attr.SRQ = s.srq(e.pd)
	}
	if e.qp, err = e.pd.CreateQP(attr); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.AllocMR(s.size, s.access); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect takes both QPs to RTS. Timeout 12 (16.8 ms) and 6 retries: a
// peer that goes away exhausts them within a second or two, a peer slowed by
// the race detector never does.
func connect(t *testing.T, x, y *end, xip, yip netip.Addr, xmac, ymac net.HardwareAddr) {
	t.Helper()
	peer := func(to *end, ip netip.Addr, mac net.HardwareAddr) verbs.Peer {
		return verbs.Peer{Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
			AH: verbs.AH{DGID: ip, DMAC: mac}, DestQPN: to.qp.QPN(), RQPSN: 100, SQPSN: 100, PathMTU: verbs.MTU1024,
			MinRNRTimer: 1, Timeout: 12, RetryCnt: 6, RNRRetry: 7, MaxRdAtomic: 4, MaxDestRdAtomic: 4}
	}
	if err := x.qp.Connect(peer(y, yip, ymac)); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.Connect(peer(x, xip, xmac)); err != nil {
		t.Fatal(err)
	}
}

func pollOne(t *testing.T, cq *verbs.CQ) verbs.WorkCompletion {
	t.Helper()
	var wc [1]verbs.WorkCompletion
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatal("no completion")
	return verbs.WorkCompletion{}
}

// settle orders the test after every step d's engines took so far, and
// their later steps after the test's writes so far (it takes their locks). A client's completion does not show the race
// detector that the peer's engine wrote the peer's memory first: the
// completion travels through memory the detector does not track (the
// daemon's and the client's mappings of one memfd are different addresses).
func settle(t *testing.T, d *verbs.Device) {
	t.Helper()
	if _, err := d.QPStatus(); err != nil {
		t.Fatal(err)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// TestClientThroughDaemon runs RC WRITE, SEND with immediate, inline SEND,
// READ and an atomic between a daemon's client and an in-process device,
// checking every byte, and the completion channel.
func TestClientThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	if !c.Attached() || c.QueryPort().ActiveMTU != verbs.MTU1024 {
		t.Fatalf("attached device: remote %v port %+v", c.Attached(), c.QueryPort())
	}
	if g, _ := c.QueryGID(0); g != ipA {
		t.Fatalf("GID 0 = %v, want %v", g, ipA)
	}
	x, y := newEnd(t, c, 1<<16), newEnd(t, tb.b, 1<<16)
	connect(t, x, y, ipA, ipB, macA, macB)
	if x.qp.State() != verbs.StateRTS {
		t.Fatalf("client QP in %v", x.qp.State())
	}
	a, err := x.qp.Query()
	if err != nil || a.DestQPN != y.qp.QPN() || a.State != verbs.StateRTS {
		t.Fatalf("query: %+v %v", a, err)
	}

	// WRITE 40 KiB (many packets) from the client into B.
	fill(x.mr.Bytes()[:40<<10], 3)
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 40 << 10, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.WRID != 1 || wc.Opcode != verbs.WCRDMAWrite {
		t.Fatalf("WRITE completion %+v", wc)
	}
	settle(t, tb.b)
	if !bytes.Equal(y.mr.Bytes()[:40<<10], x.mr.Bytes()[:40<<10]) {
		t.Fatal("WRITE data differs")
	}

	// SEND with immediate from B into a receive the client posted (two SGEs).
	if _, err := x.qp.PostRecv([]verbs.RecvWR{{ID: 7, SGList: []verbs.SGE{
		{Addr: x.mr.Addr() + 50000, Length: 100, LKey: x.mr.LKey()}, {Addr: x.mr.Addr() + 60000, Length: 3000, LKey: x.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	fill(y.mr.Bytes()[:2000], 9)
	if _, err := y.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: 0x01020304,
		SGList: []verbs.SGE{{Addr: y.mr.Addr(), Length: 2000, LKey: y.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	wc := pollOne(t, x.cq)
	if wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != 2000 || wc.ImmData != 0x01020304 || wc.Flags&verbs.WCWithImm == 0 ||
		wc.QPNum != x.qp.QPN() {
		t.Fatalf("receive completion %+v", wc)
	}
	if got := append(append([]byte{}, x.mr.Bytes()[50000:50100]...), x.mr.Bytes()[60000:61900]...); !bytes.Equal(got, y.mr.Bytes()[:2000]) {
		t.Fatal("SEND data differs")
	}
	if wc := pollOne(t, y.cq); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("B's send completion %+v", wc)
	}
	settle(t, tb.b)

	// An inline SEND from the client: the data travels in the ring's slot.
	if _, err := y.qp.PostRecv([]verbs.RecvWR{{ID: 8, SGList: []verbs.SGE{{Addr: y.mr.Addr() + 8192, Length: 64, LKey: y.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	copy(x.mr.Bytes()[100:], "inline through a shared ring")
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{{Addr: x.mr.Addr() + 100, Length: 28, LKey: x.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	clear(x.mr.Bytes()[100:128]) // inline: the buffer is free as PostSend returns
	if wc := pollOne(t, y.cq); wc.Status != verbs.WCSuccess || wc.ByteLen != 28 || string(y.mr.Bytes()[8192:8220]) != "inline through a shared ring" {
		t.Fatalf("inline receive %+v %q", wc, y.mr.Bytes()[8192:8220])
	}
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.WRID != 3 {
		t.Fatalf("inline send completion %+v", wc)
	}

	// READ from B and a FETCH_ADD on B, with the completion channel armed.
	fill(y.mr.Bytes()[20000:30000], 5)
	settle(t, tb.b) // and B's engine after the test's writes
	x.cq.ReqNotify(false)
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: x.mr.Addr() + 1000, Length: 10000, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr() + 20000, RKey: y.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.cq.Wait(ctx); err != nil {
		t.Fatalf("completion channel: %v", err)
	}
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.WRID != 4 || wc.ByteLen != 10000 {
		t.Fatalf("READ completion %+v", wc)
	}
	if !bytes.Equal(x.mr.Bytes()[1000:11000], y.mr.Bytes()[20000:30000]) {
		t.Fatal("READ data differs")
	}
	le := func(b []byte) uint64 {
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v
	}
	settle(t, tb.b)
	clear(y.mr.Bytes()[32768 : 32768+8])
	y.mr.Bytes()[32768] = 40
	settle(t, tb.b)
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: 5, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, CompareAdd: 2,
		SGList: []verbs.SGE{{Addr: x.mr.Addr() + 4096, Length: 8, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr() + 32768, RKey: y.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wc = pollOne(t, x.cq)
	settle(t, tb.b)
	if wc.Status != verbs.WCSuccess || le(x.mr.Bytes()[4096:]) != 40 || le(y.mr.Bytes()[32768:]) != 42 {
		t.Fatalf("FETCH_ADD %+v: fetched %d, now %d", wc, le(x.mr.Bytes()[4096:]), le(y.mr.Bytes()[32768:]))
	}

	// Counters come from the daemon's device.
	cs, err := c.Counters()
	if err != nil || cs.SentPkts == 0 {
		t.Fatalf("counters %+v %v", cs, err)
	}
}

// TestDaemonMisuseErrno: what the daemon refuses returns ibverbs' errno,
// and the client stays attached.
func TestDaemonMisuseErrno(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x := newEnd(t, c, 4096)
	// Posting a send in RESET is EINVAL, on the client's side.
	if _, err := x.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("post in RESET: %v", err)
	}
	// A QP to RTR without INIT first: the daemon's EINVAL.
	if err := x.qp.Modify(verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("RESET to RTR: %v", err)
	}
	if _, err := c.CreateCQ(0); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("CQ of depth 0: %v", err)
	}
	if err := x.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := x.mr.Dereg(); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("second dereg: %v", err)
	}
	if err := x.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.Destroy(); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("second destroy: %v", err)
	}
	if _, err := x.pd.RegMR(make([]byte, 64), verbs.AccessRemoteWrite); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("remote write without local write: %v", err)
	}
	if tb.srv.Clients() != 1 {
		t.Fatalf("%d clients", tb.srv.Clients())
	}
}

// TestDetachDestroysEverything: when a client hangs up, its QPs go (the
// peer's requests then exhaust their retries), and a second client on the
// same daemon is unaffected.
func TestDetachDestroysEverything(t *testing.T) {
	tb := newTestbed(t)
	c1, c2 := tb.dial(t), tb.dial(t)
	x1, y1 := newEnd(t, c1, 8192), newEnd(t, tb.b, 8192)
	x2, y2 := newEnd(t, c2, 8192), newEnd(t, tb.b, 8192)
	connect(t, x1, y1, ipA, ipB, macA, macB)
	connect(t, x2, y2, ipA, ipB, macA, macB)
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tb.srv.Clients() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := tb.srv.Clients(); n != 1 {
		t.Fatalf("%d clients after one detached", n)
	}
	if st, err := tb.a.QPStatus(); err != nil || len(st) != 2 || st[0].QPN != verbs.GSIQPN || st[1].QPN != x2.qp.QPN() {
		t.Fatalf("daemon's QPs after detach: %v %v", st, err)
	}
	// B's QP to the departed client: its WRITE is retried, then fails.
	if _, err := y1.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: y1.mr.Addr(), Length: 8, LKey: y1.mr.LKey()}}, RemoteAddr: x1.mr.Addr(), RKey: x1.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, y1.cq); wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("WRITE to a departed client: %+v", wc)
	}
	// The other client still works.
	fill(x2.mr.Bytes(), 1)
	if _, err := x2.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: x2.mr.Addr(), Length: 8192, LKey: x2.mr.LKey()}}, RemoteAddr: y2.mr.Addr(), RKey: y2.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wc := pollOne(t, x2.cq)
	settle(t, tb.b)
	if wc.Status != verbs.WCSuccess || !bytes.Equal(x2.mr.Bytes(), y2.mr.Bytes()) {
		t.Fatalf("other client's WRITE %+v", wc)
	}
}

type netipAddr = netip.Addr

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestQueryListsClientsAndQPs: an operator sees each client, its objects
// and its QPs with their state and peer, and the counters; a detached
// client's disappear.
func TestQueryListsClientsAndQPs(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x, y := newEnd(t, c, 8192), newEnd(t, tb.b, 8192)
	connect(t, x, y, ipA, ipB, macA, macB)
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	pollOne(t, x.cq)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := Query(ctx, tb.name)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Clients) != 1 || st.Clients[0].QPs != 1 || st.Clients[0].MRs != 1 || st.Clients[0].CQs != 1 || st.Clients[0].PDs != 1 {
		t.Fatalf("clients %+v", st.Clients)
	}
	// QP1 is the daemon's (its connection manager's), the client's QP next.
	if len(st.QPs) != 2 || st.QPs[0].QPN != verbs.GSIQPN || st.QPs[0].OwnerPID != 0 {
		t.Fatalf("QPs %+v", st.QPs)
	}
	st.QPs = st.QPs[1:]
	if st.QPs[0].QPN != x.qp.QPN() || st.QPs[0].DestQPN != y.qp.QPN() || verbs.QPState(st.QPs[0].State) != verbs.StateRTS ||
		netip.AddrFrom16(st.QPs[0].Peer).Unmap() != ipB || st.QPs[0].OwnerPID != st.Clients[0].PID {
		t.Fatalf("QPs %+v", st.QPs)
	}
	if len(st.Transport) == 0 || st.Transport[0].Name != "sent_pkts" || st.Transport[0].Value == 0 || st.Device.Name != "xdp_"+tb.name {
		t.Fatalf("device %q counters %+v", st.Device.Name, st.Transport)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for tb.srv.Clients() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st, err = Query(ctx, tb.name); err != nil || len(st.Clients) != 0 || len(st.QPs) != 1 {
		t.Fatalf("after the client left: %+v %v", st, err)
	}
}

// TestMetrics: Prometheus' text format, one counter per name, labelled.
func TestMetrics(t *testing.T) {
	tb := newTestbed(t)
	tb.dial(t)
	var b strings.Builder
	if err := tb.srv.writeMetrics(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"# TYPE xdproce_sent_pkts counter\n", `xdproce_sent_pkts{device="xdp_` + tb.name + `"} `,
		"# TYPE xdproce_clients gauge\n", `xdproce_clients{device="xdp_` + tb.name + `"} 1`, "xdproce_bad_shared_wqe{"} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}

// TestAsyncEventsReachTheirOwner: a CQ overflow's CQ_ERR and QP_FATAL go to
// the client whose objects they name, as its own objects, and to no other.
func TestAsyncEventsReachTheirOwner(t *testing.T) {
	tb := newTestbed(t)
	c1, c2 := tb.dial(t), tb.dial(t)
	x := newEndWith(t, c1, endSpec{cqDepth: 1, size: 4096, access: verbs.AccessLocalWrite,
		attr: verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1}}})
	y := newEnd(t, tb.b, 4096)
	connect(t, x, y, ipA, ipB, macA, macB)
	newEnd(t, c2, 4096) // the other client has objects too
	for i := range 3 {
		if _, err := x.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := map[verbs.AsyncEventType]verbs.AsyncEvent{}
	for len(got) < 2 {
		ev, err := c1.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("events so far %v: %v", got, err)
		}
		got[ev.Type] = ev
	}
	if got[verbs.EventCQErr].CQ != x.cq || got[verbs.EventQPFatal].QP != x.qp || !x.cq.Overflowed() {
		t.Fatalf("events %+v (overflowed %v)", got, x.cq.Overflowed())
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if ev, err := c2.GetAsyncEvent(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the other client got %+v %v", ev, err)
	}
}

// TestSRQThroughDaemon: a client's SRQ feeds its QP's receives from a
// shared ring, its limit event reaches it, and QUERY/MODIFY/DESTROY behave
// as in-process (EBUSY while a QP uses it).
func TestSRQThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	var srq *verbs.SRQ
	x := newEndWith(t, c, endSpec{cqDepth: 16, size: 4096, access: verbs.AccessLocalWrite,
		attr: verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4}},
		srq: func(pd *verbs.PD) *verbs.SRQ {
			var err error
			if srq, err = pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1, Limit: 3}); err != nil {
				t.Fatal(err)
			}
			return srq
		}})
	y := newEnd(t, tb.b, 4096)
	connect(t, x, y, ipA, ipB, macA, macB)
	if _, err := x.qp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("post to a QP of an SRQ: %v", err)
	}
	for i := range 3 {
		if _, err := srq.PostRecv([]verbs.RecvWR{{ID: uint64(10 + i), SGList: []verbs.SGE{{Addr: x.mr.Addr() + uint64(i*100), Length: 100, LKey: x.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	fill(y.mr.Bytes()[:300], 4)
	for i := range 3 {
		if _, err := y.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: y.mr.Addr() + uint64(i*100), Length: 100, LKey: y.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.WRID != uint64(10+i) || wc.ByteLen != 100 {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
	settle(t, tb.b)
	if !bytes.Equal(x.mr.Bytes()[:300], y.mr.Bytes()[:300]) {
		t.Fatal("SEND data differs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := c.GetAsyncEvent(ctx)
	if err != nil || ev.Type != verbs.EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("event %+v %v", ev, err)
	}
	if a := srq.Query(); a.Limit != 0 || a.MaxWR != 8 {
		t.Fatalf("query after the limit fired: %+v", a)
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 9}, verbs.SRQAttrLimit); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("a limit above the size: %v", err)
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 2}, verbs.SRQAttrLimit); err != nil || srq.Query().Limit != 2 {
		t.Fatalf("arm the limit: %v %+v", err, srq.Query())
	}
	if err := srq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("destroy an SRQ a QP uses: %v", err)
	}
	if err := x.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srq.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestMWThroughDaemon: a client binds a type-2 window over part of its
// region with a BIND_MW in its send ring; the peer writes through it and is
// refused outside it.
func TestMWThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x := newEndWith(t, c, endSpec{cqDepth: 16, size: 8192, access: verbs.AccessLocalWrite | verbs.AccessMWBind,
		attr: verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 4}}})
	y := newEnd(t, tb.b, 8192)
	connect(t, x, y, ipA, ipB, macA, macB)
	mw, err := x.pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	key := verbs.IncRKey(mw.RKey())
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBind{MW: mw, RKey: key,
		MR: x.mr, Addr: x.mr.Addr() + 4096, Length: 1024, Access: verbs.AccessRemoteWrite}}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW || mw.RKey() != key {
		t.Fatalf("bind %+v, rkey %#x want %#x", wc, mw.RKey(), key)
	}
	write := func(id uint64, addr uint64) verbs.WorkCompletion {
		t.Helper()
		if _, err := y.qp.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: y.mr.Addr(), Length: 100, LKey: y.mr.LKey()}}, RemoteAddr: addr, RKey: key}}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, y.cq)
	}
	fill(y.mr.Bytes()[:100], 6)
	if wc := write(2, x.mr.Addr()+4096+10); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE through the window: %+v", wc)
	}
	if !bytes.Equal(x.mr.Bytes()[4106:4206], y.mr.Bytes()[:100]) {
		t.Fatal("WRITE through the window: data differs")
	}
	if wc := write(3, x.mr.Addr()); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE outside the window: %+v", wc)
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mw.Dealloc(); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("second dealloc: %v", err)
	}
}

// TestOwnMemoryThroughDaemon: memory the client already has (RegMR of a Go
// slice, as ibv_reg_mr of malloc'd memory) is reached by the daemon with
// process_vm_readv/writev: WRITE and SEND from it, READ, a peer's WRITE and
// SEND and an atomic into it, byte for byte.
func TestOwnMemoryThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x, y := newEnd(t, c, 4096), newEnd(t, tb.b, 1<<16)
	own := make([]byte, 1<<16+3)[3:] // unaligned, as ibv_reg_mr allows
	mr, err := x.pd.RegMR(own, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Len() != len(own) || mr.Addr() == 0 {
		t.Fatalf("region of %d bytes at %#x", mr.Len(), mr.Addr())
	}
	connect(t, x, y, ipA, ipB, macA, macB)
	post := func(wr verbs.SendWR) verbs.WorkCompletion {
		t.Helper()
		wr.Flags |= verbs.SendSignaled
		if _, err := x.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, x.cq)
	}
	sge := func(off, n int) []verbs.SGE {
		return []verbs.SGE{{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}}
	}

	fill(own[:30000], 7)
	if wc := post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGList: sge(0, 30000), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE from own memory: %+v", wc)
	}
	settle(t, tb.b)
	if !bytes.Equal(y.mr.Bytes()[:30000], own[:30000]) {
		t.Fatal("WRITE from own memory: data differs")
	}
	fill(y.mr.Bytes()[40000:50000], 8)
	settle(t, tb.b)
	if wc := post(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, SGList: sge(100, 10000), RemoteAddr: y.mr.Addr() + 40000, RKey: y.mr.RKey()}); wc.Status != verbs.WCSuccess {
		t.Fatalf("READ into own memory: %+v", wc)
	}
	if !bytes.Equal(own[100:10100], y.mr.Bytes()[40000:50000]) {
		t.Fatal("READ into own memory: data differs")
	}
	// The peer's WRITE and SEND into it.
	fill(y.mr.Bytes()[:20000], 9)
	if _, err := y.qp.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: y.mr.Addr(), Length: 20000, LKey: y.mr.LKey()}},
		RemoteAddr: mr.Addr() + 30000, RKey: mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, y.cq); wc.Status != verbs.WCSuccess || !bytes.Equal(own[30000:50000], y.mr.Bytes()[:20000]) {
		t.Fatalf("peer's WRITE into own memory: %+v", wc)
	}
	if _, err := x.qp.PostRecv([]verbs.RecvWR{{ID: 4, SGList: sge(60000, 5000)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := y.qp.PostSend([]verbs.SendWR{{ID: 5, Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: y.mr.Addr() + 100, Length: 5000, LKey: y.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, x.cq); wc.Status != verbs.WCSuccess || wc.ByteLen != 5000 || !bytes.Equal(own[60000:65000], y.mr.Bytes()[100:5100]) {
		t.Fatalf("SEND into own memory: %+v", wc)
	}
	// An atomic on it, from the peer.
	off := uint64(64000)
	off += (8 - (mr.Addr()+off)%8) % 8 // 8-byte aligned in the region's addresses
	clear(own[off : off+8])
	own[off] = 5
	if _, err := y.qp.PostSend([]verbs.SendWR{{ID: 6, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, CompareAdd: 10,
		SGList: []verbs.SGE{{Addr: y.mr.Addr() + 60000, Length: 8, LKey: y.mr.LKey()}}, RemoteAddr: mr.Addr() + off, RKey: mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, y.cq); wc.Status != verbs.WCSuccess || own[off] != 15 || y.mr.Bytes()[60000] != 5 {
		t.Fatalf("FETCH_ADD on own memory: %+v, now %d, fetched %d", wc, own[off], y.mr.Bytes()[60000])
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// TestDaemonUnderLinkFaults: a client's WRITEs, READs and SENDs through
// the daemon, from shared and from its own memory, arrive byte for byte
// while the link drops, duplicates, corrupts and reorders frames both ways;
// then, on a clean link, a WRITE with a bad rkey fails with REM_ACCESS_ERR.
func TestDaemonUnderLinkFaults(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x, y := newEnd(t, c, 1<<16), newEnd(t, tb.b, 1<<16)
	own := make([]byte, 1<<16)
	omr, err := x.pd.RegMR(own, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	connect(t, x, y, ipA, ipB, macA, macB)
	tb.linkAB.SetImpairment(memlink.Impairment{Drop: 0.03, Duplicate: 0.02, Corrupt: 0.01, Reorder: 0.03, Seed: 7})
	tb.linkBA.SetImpairment(memlink.Impairment{Drop: 0.03, Duplicate: 0.02, Corrupt: 0.01, Reorder: 0.03, Seed: 8})
	post := func(wr verbs.SendWR) verbs.WorkCompletion {
		t.Helper()
		wr.Flags |= verbs.SendSignaled
		if _, err := x.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, x.cq)
	}
	for round := range 20 {
		src, lkey, addr := x.mr.Bytes(), x.mr.LKey(), x.mr.Addr()
		if round%2 == 1 {
			src, lkey, addr = own, omr.LKey(), omr.Addr()
		}
		fill(src[:20000], byte(round))
		if wc := post(verbs.SendWR{ID: uint64(round), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: addr, Length: 20000, LKey: lkey}},
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); wc.Status != verbs.WCSuccess {
			t.Fatalf("round %d WRITE: %+v", round, wc)
		}
		settle(t, tb.b)
		if !bytes.Equal(y.mr.Bytes()[:20000], src[:20000]) {
			t.Fatalf("round %d WRITE: data differs", round)
		}
		fill(y.mr.Bytes()[30000:45000], byte(round+100))
		settle(t, tb.b)
		if wc := post(verbs.SendWR{ID: uint64(round), Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{{Addr: addr + 20000, Length: 15000, LKey: lkey}},
			RemoteAddr: y.mr.Addr() + 30000, RKey: y.mr.RKey()}); wc.Status != verbs.WCSuccess {
			t.Fatalf("round %d READ: %+v", round, wc)
		}
		if !bytes.Equal(src[20000:35000], y.mr.Bytes()[30000:45000]) {
			t.Fatalf("round %d READ: data differs", round)
		}
	}
	if cs, _ := tb.a.Counters(); cs.CompleterRetryErr+cs.RcvdSeqErr+cs.DuplicateRequest == 0 {
		t.Fatalf("no recovery counted: the faults did not bite (%+v)", cs)
	}
	// The responder's QP goes to error with its NAK (as rxe's does), so a
	// lost NAK rightly ends in RETRY_EXC_ERR: the access error is checked
	// on a clean link.
	tb.linkAB.SetImpairment(memlink.Impairment{})
	tb.linkBA.SetImpairment(memlink.Impairment{})
	if wc := post(verbs.SendWR{ID: 99, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey() ^ 0xff}); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE with a bad rkey: %+v", wc)
	}
}

// TestAHThroughDaemon: address handles are validated as the kernel does for
// RoCE (GRH, GID index and family), resolve the next hop's MAC once, keep
// their PD busy, and go with their client.
func TestAHThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	ah, err := pd.CreateAH(verbs.AH{DGID: netip.AddrFrom16(ipB.As16()), SGIDIndex: 0, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if got := ah.Attr(); !bytes.Equal(got.DMAC, macB) || got.DGID.Unmap() != ipB {
		t.Fatalf("address handle %+v, want MAC %v", got, macB)
	}
	for _, bad := range []struct {
		name string
		ah   verbs.AH
		want error
	}{
		{"no destination GID", verbs.AH{SGIDIndex: 0}, verbs.ErrInvalid},
		{"source GID index past the table", verbs.AH{DGID: ipB, SGIDIndex: 2}, verbs.ErrInvalid},
		{"IPv4 destination from an IPv6 GID", verbs.AH{DGID: ipB, SGIDIndex: 1}, verbs.ErrInvalid},
		{"flow label past 20 bits", verbs.AH{DGID: ipB, FlowLabel: 1 << 20}, verbs.ErrInvalid},
		{"a neighbour that never answers", verbs.AH{DGID: ipMute}, syscall.ETIMEDOUT},
	} {
		if _, err := pd.CreateAH(bad.ah); !errors.Is(err, bad.want) {
			t.Errorf("%s: %v, want %v", bad.name, err, bad.want)
		}
	}
	if n := tb.a.AddressHandles(); n != 1 {
		t.Fatalf("the daemon's device holds %d address handles, want 1", n)
	}
	if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("DEALLOC_PD with an address handle: %v, want EBUSY", err)
	}
	if err := ah.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := ah.Destroy(); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("second destroy: %v", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	// A client's handles go when it does.
	pd, err = c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := pd.CreateAH(verbs.AH{DGID: ipB}); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for tb.a.AddressHandles() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := tb.a.AddressHandles(); n != 0 {
		t.Fatalf("%d address handles left after the client detached", n)
	}
}

// udEnd is a UD QP in RTS with Q_Key 0x11111111, its CQ and a region.
func udEnd(t *testing.T, d *verbs.Device) *end {
	t.Helper()
	e := &end{dev: d}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.AllocMR(1<<16, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, Port: 1, QKey: 0x11111111}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 5}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := e.qp.Modify(m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestUDThroughDaemon: a client's UD QP sends datagrams through an address
// handle the send slot names by its handle, and receives them with the GRH
// area, the sender's QPN and the datagram's IP version.
func TestUDThroughDaemon(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x, y := udEnd(t, c), udEnd(t, tb.b)
	toY, err := x.pd.CreateAH(verbs.AH{DGID: ipB})
	if err != nil {
		t.Fatal(err)
	}
	toX, err := y.pd.CreateAH(verbs.AH{DGID: ipA, DMAC: macA})
	if err != nil {
		t.Fatal(err)
	}
	recv := func(e *end) {
		t.Helper()
		if _, err := e.qp.PostRecv([]verbs.RecvWR{{ID: 5, SGList: []verbs.SGE{{Addr: e.mr.Addr(), Length: 2048, LKey: e.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(from, to *end, ah *verbs.AddressHandle, n int) {
		t.Helper()
		fill(from.mr.Bytes()[4096:4096+n], byte(n))
		if _, err := from.qp.PostSend([]verbs.SendWR{{ID: 6, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: 77,
			SGList: []verbs.SGE{{Addr: from.mr.Addr() + 4096, Length: uint32(n), LKey: from.mr.LKey()}}, AH: ah,
			RemoteQPN: to.qp.QPN(), RemoteQKey: 0x11111111}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []struct {
		from, to *end
		ah       *verbs.AddressHandle
		src      netip.Addr
	}{{x, y, toY, ipA}, {y, x, toX, ipB}} {
		recv(dir.to)
		send(dir.from, dir.to, dir.ah, 300)
		if wc := pollOne(t, dir.from.cq); wc.Status != verbs.WCSuccess || wc.WRID != 6 {
			t.Fatalf("send from %v: %+v", dir.src, wc)
		}
		wc := pollOne(t, dir.to.cq)
		got := dir.to.mr.Bytes()
		if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+300 || wc.SrcQP != dir.from.qp.QPN() || wc.ImmData != 77 ||
			wc.Flags&verbs.WCWithGRH == 0 || wc.IPVersion != 4 || !bytes.Equal(got[32:36], dir.src.AsSlice()) ||
			!bytes.Equal(got[40:340], dir.from.mr.Bytes()[4096:4396]) {
			t.Fatalf("datagram from %v: %+v, GRH %x", dir.src, wc, got[:40])
		}
	}
}

// TestAHDestroyedRightAfterPosting: a client that posts unsignaled UD
// sends and destroys their address handle at once (as mckey does) still
// sends every datagram, as on rxe, whose provider copies the address
// vector into the WQE at post: the daemon takes what was posted before it
// lets a handle go. Before, the engine often took the slots after the
// handle was gone: LOC_QP_OP_ERR, nothing sent.
func TestAHDestroyedRightAfterPosting(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	x, y := udEnd(t, c), udEnd(t, tb.b)
	const rounds, per = 20, 8
	for r := range rounds {
		for i := range per {
			if _, err := y.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGList: []verbs.SGE{{Addr: y.mr.Addr() + uint64(i)*2048, Length: 2048, LKey: y.mr.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
		}
		ah, err := x.pd.CreateAH(verbs.AH{DGID: ipB})
		if err != nil {
			t.Fatal(err)
		}
		for i := range per {
			if _, err := x.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRSend,
				SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}}, AH: ah,
				RemoteQPN: y.qp.QPN(), RemoteQKey: 0x11111111}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := ah.Destroy(); err != nil {
			t.Fatal(err)
		}
		for i := range per {
			if wc := pollOne(t, y.cq); wc.Status != verbs.WCSuccess {
				t.Fatalf("round %d, datagram %d: %+v", r, i, wc)
			}
		}
	}
	if cs, _ := tb.a.Counters(); cs.BadSharedWQE != 0 {
		t.Fatalf("%d of the client's work requests refused", cs.BadSharedWQE)
	}
}
