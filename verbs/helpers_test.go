package verbs

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/internal/inproc"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
)

// node is one side of a test connection: a device with a PD, CQs, a QP and a buffer.
type node struct {
	dev      *Device
	pd       *PD
	scq, rcq *CQ
	qp       *QP
	mr       *MR
}

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	ipA  = netip.MustParseAddr("198.18.0.1")
	ipB  = netip.MustParseAddr("198.18.0.2")
)

func newDevice(t testing.TB, link Link, mac net.HardwareAddr, ip netip.Addr, mtu int) *Device {
	t.Helper()
	return newDeviceWith(t, link, mac, ip, DeviceConfig{ActiveMTU: mtu})
}

// newDeviceWith starts a device on link with cfg, its MAC address and GID
// table set for mac and ip; the test closes it.
func newDeviceWith(t testing.TB, link Link, mac net.HardwareAddr, ip netip.Addr, cfg DeviceConfig) *Device {
	t.Helper()
	cfg.MAC, cfg.GIDs = mac, []netip.Addr{netip.MustParseAddr("fe80::1"), ip}
	d, err := NewDevice(link, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	registerDevice(t, d)
	return d
}

func newNode(t testing.TB, d *Device, bufSize int) *node {
	t.Helper()
	n := &node{dev: d}
	var err error
	if n.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if n.scq, err = d.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	if n.rcq, err = d.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	if n.qp, err = n.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: n.scq, RecvCQ: n.rcq,
		Cap: QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	if n.mr, err = n.pd.AllocMR(bufSize, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	return n
}

type connOpts struct {
	mtu        MTU
	psnA, psnB uint32
	timeout    uint8
	retry, rnr uint8
	minRNR     uint8
	// destRd and initRd are max_dest_rd_atomic and max_rd_atomic (0: 16).
	destRd, initRd uint8
}

// connect takes both QPs to RTS facing each other.
func connect(t testing.TB, a, b *node, aIP, bIP netip.Addr, aMAC, bMAC net.HardwareAddr, o connOpts) {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = MTU1024
	}
	if o.timeout == 0 {
		o.timeout = 10
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.destRd == 0 {
		o.destRd = 16
	}
	if o.initRd == 0 {
		o.initRd = 16
	}
	access := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	for _, s := range []struct {
		n      *node
		peer   *node
		dgid   netip.Addr
		dmac   net.HardwareAddr
		sq, rq uint32
	}{{a, b, bIP, bMAC, o.psnA, o.psnB}, {b, a, aIP, aMAC, o.psnB, o.psnA}} {
		must(t, s.n.qp.Connect(Peer{Access: access, AH: AH{DGID: s.dgid, SGIDIndex: 1, HopLimit: 64, DMAC: s.dmac},
			PathMTU: o.mtu, DestQPN: s.peer.qp.QPN(), RQPSN: s.rq, SQPSN: s.sq, MaxDestRdAtomic: o.destRd, MinRNRTimer: o.minRNR,
			Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnr, MaxRdAtomic: o.initRd}))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pair builds two connected nodes over an in-memory link.
func pair(t *testing.T, o connOpts, bufSize int) (*node, *node, *memlink.Link, *memlink.Link) {
	t.Helper()
	la, lb := memlink.NewPair(4096 + 200)
	a := newNode(t, newDevice(t, la, macA, ipA, 4096), bufSize)
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), bufSize)
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnr == 0 {
		o.rnr = 7
	}
	connect(t, a, b, ipA, ipB, macA, macB, o)
	return a, b, la, lb
}

// poll waits for n completions on cq.
func poll(t *testing.T, cq *CQ, n int, timeout time.Duration) []WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make([]WorkCompletion, 0, n)
	buf := make([]WorkCompletion, 64)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if ctx.Err() != nil {
				t.Fatalf("got %d of %d completions before the timeout: %+v\nwaiting:%s", len(out), n, out, stallReport(t))
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

// pollAdvancing polls n completions from cq as poll does, advancing clk
// by step each time 20 ms of real time passed with none: recoveries that
// wait on a timer of fake time (a loaded machine's receive ring may drop
// frames) end within timeout.
func pollAdvancing(t *testing.T, cq *CQ, n int, clk *faketime.Clock, step, timeout time.Duration) []WorkCompletion {
	t.Helper()
	deadline := time.Now().Add(timeout)
	out := make([]WorkCompletion, 0, n)
	buf := make([]WorkCompletion, 64)
	for quiet := time.Now(); len(out) < n; {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		switch {
		case k > 0:
			quiet = time.Now()
		case time.Now().After(deadline):
			t.Fatalf("got %d of %d completions before the timeout: %+v\nwaiting:%s", len(out), n, out, stallReport(t))
		case time.Since(quiet) >= 20*time.Millisecond:
			clk.Advance(step)
			quiet = time.Now()
		default:
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed + i*13 + i>>8)
	}
}

func sge(mr *MR, off, n int) []SGE {
	return []SGE{{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}}
}

func postSend(t *testing.T, n *node, wrs ...SendWR) {
	t.Helper()
	if i, err := n.qp.PostSend(wrs); err != nil {
		t.Fatalf("PostSend: WR %d: %v", i, err)
	}
}

func postRecv(t *testing.T, n *node, wrs ...RecvWR) {
	t.Helper()
	if i, err := n.qp.PostRecv(wrs); err != nil {
		t.Fatalf("PostRecv: WR %d: %v", i, err)
	}
}

func equalBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from the %d expected, first at offset %d", what, len(got), len(want), i)
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// pollWait waits until cq has a completion without taking it; nil on timeout.
func pollWait(cq *CQ, timeout time.Duration) *CQ {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if tcq(cq).Pending() > 0 {
			return cq
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// do runs fn as a control operation of d's engines (transport.NIC.Do).
func (d *Device) do(fn func() error) error { return nicOf(d).Do(fn) }

// sendOutstanding and recvOutstanding count a QP's WQEs posted and not yet
// retired.
func sendOutstanding(qp *queue.QP) int32 { n, _ := qp.Outstanding(); return n }
func recvOutstanding(qp *queue.QP) int32 { _, n := qp.Outstanding(); return n }

// The in-process provider's objects, for tests that step or hold the
// engines, or place objects where a capture expects them.
func nicOf(d *Device) *transport.NIC { return d.ops.(*inproc.Device).NIC }
func tqp(qp *QP) *queue.QP           { return qp.ops.(*inproc.QP).QP }
func tcq(cq *CQ) *queue.CQ           { return cq.ops.(*inproc.CQ).CQ }
func tmr(mr *MR) *transport.MR       { return mr.ops.(*inproc.MR).MR }
func tmw(mw *MW) *transport.MW       { return mw.ops.(*inproc.MW).MW }
func tsrq(s *SRQ) *queue.SRQ         { return s.ops.(*inproc.SRQ).SRQ }
