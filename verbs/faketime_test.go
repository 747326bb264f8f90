package verbs

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
)

// fakePair is pair with both devices on one fake clock.
func fakePair(t *testing.T, o connOpts) (*node, *node, *faketime.Clock) {
	t.Helper()
	clk := faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr) *node {
		d, err := NewDevice(l, DeviceConfig{MAC: mac, GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), ip}, ActiveMTU: 4096, Clock: clk})
		must(t, err)
		t.Cleanup(func() { _ = d.Close() })
		registerDevice(t, d)
		return newNode(t, d, 1<<16)
	}
	a, b := mk(la, macA, ipA), mk(lb, macB, ipB)
	connect(t, a, b, ipA, ipB, macA, macB, o)
	return a, b, clk
}

// waitCounter waits (in real time, bounded) until f(counters of d) holds.
func waitCounter(t *testing.T, d *Device, what string, f func(Counters) bool) Counters {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := d.Counters()
		must(t, err)
		if f(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: counters %+v", what, c)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestRetryCountWithFakeTime: with the peer gone, a WR is sent once, resent
// once per expired transport timer (4.096 µs × 2^14 ≈ 67 ms of fake time)
// for each of retry_cnt 3 retries, and the next expiry ends it with
// RETRY_EXC_ERR; nothing is resent while fake time stands still.
func TestRetryCountWithFakeTime(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{timeout: 14, retry: 3, rnr: 7})
	must(t, b.dev.Close())
	base := waitCounter(t, a.dev, "setup", func(Counters) bool { return true }).SentPkts
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, a.dev, "first transmission", func(c Counters) bool { return c.SentPkts == base+1 })
	timeout := transport.AckTimeout(14)
	for i := 1; i <= 3; i++ {
		if n := pending(a.scq); a.qp.State() != StateRTS || n != 0 {
			t.Fatalf("retry %d: QP %v with %d completions before the timer expired", i, a.qp.State(), n)
		}
		clk.Advance(timeout + time.Microsecond)
		want := base + 1 + uint64(i)
		waitCounter(t, a.dev, "a retransmission", func(c Counters) bool { return c.SentPkts == want })
	}
	clk.Advance(timeout + time.Microsecond)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRetryExcErr || wc.WRID != 1 {
		t.Fatalf("completion %+v, want RETRY_EXC_ERR", wc)
	}
	c := waitCounter(t, a.dev, "the end", func(Counters) bool { return true })
	if c.SentPkts != base+4 || c.RetryExceededErr != 1 {
		t.Fatalf("counters %+v: want 4 transmissions and one retry_exceeded_err", c)
	}
}

// TestRNRTimerWithFakeTime: an RNR NAK with min_rnr_timer 31 (491.52 ms)
// holds the SEND until that much fake time has passed; then it lands.
func TestRNRTimerWithFakeTime(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{minRNR: 31, retry: 7, rnr: 7})
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 100)})
	waitCounter(t, a.dev, "the RNR NAK", func(c Counters) bool { return c.RcvdRNRErr == 1 })
	postRecv(t, b, RecvWR{ID: 2, SGList: sge(b.mr, 0, 100)})
	clk.Advance(491520 * time.Microsecond)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("send after the RNR wait: %+v", wc)
	}
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 2 || wc.ByteLen != 100 {
		t.Fatalf("receive: %+v", wc)
	}
	if c := waitCounter(t, b.dev, "", func(Counters) bool { return true }); c.SendRNRErr != 1 {
		t.Fatalf("responder sent %d RNR NAKs, want 1", c.SendRNRErr)
	}
}

// pending is how many completions cq holds, without taking them.
func pending(cq *CQ) int { return tcq(cq).Pending() }
