package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// ackHold holds back the ACKs B sends while on, and counts A's data
// packets: an answer that is late, not lost.
type ackHold struct {
	mu   sync.Mutex
	on   bool
	held [][]byte
	sent int // A's data packets
}

func (h *ackHold) install(la, lb *memlink.Link) {
	la.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) == nil && p.BTH.Opcode != wire.RCAck {
			h.mu.Lock()
			h.sent++
			h.mu.Unlock()
		}
		return false
	})
	lb.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) != nil || p.BTH.Opcode != wire.RCAck {
			return false
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.on {
			h.held = append(h.held, append([]byte(nil), f...))
		}
		return h.on
	})
}

func (h *ackHold) hold(on bool) { h.mu.Lock(); h.on = on; h.mu.Unlock() }

func (h *ackHold) counts() (sent, held int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent, len(h.held)
}

// release delivers the first n held ACKs to A (all: n < 0); with all of
// them delivered it stops holding.
func (h *ackHold) release(la *memlink.Link, n int) {
	h.mu.Lock()
	if n < 0 || n > len(h.held) {
		n = len(h.held)
	}
	out := h.held[:n:n]
	h.held = h.held[n:]
	if len(h.held) == 0 {
		h.on = false
	}
	h.mu.Unlock()
	la.Inject(out)
}

// lateAskPair is lazyPair with ACK holding, and a round trip of rtt
// measured on A (the probe timeout and RTO then come from it).
func lateAskPair(t *testing.T, retry uint8, rtt time.Duration) (a, b *node, clk *faketime.Clock, la *memlink.Link, h *ackHold) {
	t.Helper()
	clk = faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	cfg := DeviceConfig{ActiveMTU: 4096, Clock: clk, AckCoalesce: true}
	a = newNode(t, newDeviceWith(t, la, macA, ipA, cfg), 1<<16)
	b = newNode(t, newDeviceWith(t, lb, macB, ipB, cfg), 1<<16)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU4096, timeout: 14, retry: retry, rnr: 7})
	h = &ackHold{}
	h.install(la, lb)
	h.hold(true)
	postSend(t, a, lazyWrite(a, b, 1, true))
	waitFor(t, func() bool { _, n := h.counts(); return n == 1 })
	clk.Advance(rtt)
	h.release(la, -1)
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("first WRITE: %+v", wc)
	}
	quiesce(t, a.dev, b.dev)
	return a, b, clk, la, h
}

// TestLazyAskAnsweredLate: an ask answered after a probe timeout, and
// after an adaptive RTO, but before the local ACK timeout, is late, not
// lost: the requester neither times out nor resends nor uses a retry. On
// the fast path the Go responder answers an ask (a duplicate), and under
// load it took milliseconds (docs/results/2026-11-28-fastpath-acks.md). So did
// its answer to the application's next WRITE, sent while the ask was out:
// that WRITE is a tail too, and its timer must not be the probe's
// (queue's RTO, AskOut).
func TestLazyAskAnsweredLate(t *testing.T) {
	a, b, clk, la, h := lateAskPair(t, 7, 20*time.Microsecond)
	sent0, _ := h.counts()
	idle := func(n int) {
		for range n {
			clk.Advance(100 * time.Microsecond)
			quiesce(t, a.dev, b.dev)
		}
	}
	check := func(what string, pkts int) {
		t.Helper()
		ca := counters(a.dev)
		if sent, _ := h.counts(); sent != sent0+pkts || ca.AckAsks != 1 || ca.TransportTimeouts != 0 || ca.RetransmittedPkts != 0 ||
			ca.StallPokes != 0 || ca.CompleterRetryErr != 0 {
			t.Fatalf("%s: %d packets, %d asks, %d timeouts, %d resent, %d pokes, %d retries; want %d, 1, 0, 0, 0, 0",
				what, sent-sent0, ca.AckAsks, ca.TransportTimeouts, ca.RetransmittedPkts, ca.StallPokes, ca.CompleterRetryErr, pkts)
		}
	}

	postSend(t, a, lazyWrite(a, b, 2, false)) // lazy: no AckReq
	quiesce(t, a.dev, b.dev)
	h.hold(true)
	clk.Advance(100 * time.Microsecond) // a probe timeout idle: the ask
	waitFor(t, func() bool { _, n := h.counts(); return n == 1 })
	quiesce(t, a.dev, b.dev)
	idle(3)                           // the answer is late: three more probe timeouts
	clk.Advance(5 * time.Millisecond) // and a descheduled responder's milliseconds, past the RTO (1 ms)
	quiesce(t, a.dev, b.dev)
	check("ask unanswered for 5.3 ms", 2)

	// The application's next WRITE goes while the ask is out, and asks;
	// the ask's answer comes, the WRITE's is late too.
	postSend(t, a, lazyWrite(a, b, 3, true))
	waitFor(t, func() bool { _, n := h.counts(); return n == 2 })
	h.release(la, 1)
	quiesce(t, a.dev, b.dev)
	idle(3)
	check("the WRITE behind the ask unanswered for 300 µs", 3)
	h.release(la, -1)
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 3 {
		t.Fatalf("signaled WRITE after the late ask: %+v", wc)
	}
	quiesce(t, a.dev, b.dev)
	check("answered", 3)
	equalBytes(t, "WRITEs", b.mr.Bytes()[64:4*64], a.mr.Bytes()[64:4*64])

	// Once everything is answered, a tail has the probe's timer again:
	// a signaled WRITE whose ACK is lost is resent a probe timeout later,
	// before the RTO.
	h.hold(true)
	postSend(t, a, lazyWrite(a, b, 4, true))
	waitFor(t, func() bool { _, n := h.counts(); return n == 1 })
	h.mu.Lock()
	h.held, h.on = nil, false // lost
	h.mu.Unlock()
	clk.Advance(500 * time.Microsecond) // a probe timeout (the late answers raised it), short of the RTO (1 ms)
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 4 {
		t.Fatalf("signaled WRITE after a lost ACK: %+v", wc)
	}
	if ca := counters(a.dev); ca.TransportTimeouts != 1 {
		t.Fatalf("a lost ACK of a tail: %d timeouts a probe timeout later, want 1", ca.TransportTimeouts)
	}
}

// TestLazyAskLost: an ask that is lost (or its answer) is recovered by the
// retransmission timer, which runs the local ACK timeout from the ask
// (here 67 ms), as rxe's.
func TestLazyAskLost(t *testing.T) {
	a, b, clk, _, h := lateAskPair(t, 7, 20*time.Microsecond)
	postSend(t, a, lazyWrite(a, b, 2, false))
	quiesce(t, a.dev, b.dev)
	h.hold(true)
	clk.Advance(100 * time.Microsecond) // the ask; its answer is lost
	waitFor(t, func() bool { _, n := h.counts(); return n == 1 })
	h.mu.Lock()
	h.held, h.on = nil, false
	h.mu.Unlock()
	quiesce(t, a.dev, b.dev)
	clk.Advance(60 * time.Millisecond)
	quiesce(t, a.dev, b.dev)
	if ca := counters(a.dev); ca.TransportTimeouts != 0 || ca.AckAsks != 1 {
		t.Fatalf("60 ms after the ask: %d timeouts, %d asks; want 0, 1", ca.TransportTimeouts, ca.AckAsks)
	}
	clk.Advance(8 * time.Millisecond)
	waitFor(t, func() bool { return counters(a.dev).TransportTimeouts == 1 })
	quiesce(t, a.dev, b.dev)
	postSend(t, a, lazyWrite(a, b, 3, true))
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 3 {
		t.Fatalf("signaled WRITE after the lost ask: %+v", wc)
	}
	if ca := counters(a.dev); ca.TransportTimeouts != 1 || ca.RetryExceededErr != 0 {
		t.Fatalf("%d timeouts, %d retries exceeded; want 1, 0", ca.TransportTimeouts, ca.RetryExceededErr)
	}
	equalBytes(t, "WRITEs", b.mr.Bytes()[64:4*64], a.mr.Bytes()[64:4*64])
}

// TestLazyAskLateFiniteRetry: with a finite retry_cnt the timer is the
// local ACK timeout, fixed as rxe's, and no probe shortens it; so asks
// answered late, one after another, use no retry and a healthy QP never
// reaches the error state (RETRY_EXC_ERR) through them. retry_cnt 7
// shortens its timer but never runs out of retries.
func TestLazyAskLateFiniteRetry(t *testing.T) {
	a, b, clk, la, h := lateAskPair(t, 1, 20*time.Microsecond)
	for i := range 3 {
		postSend(t, a, lazyWrite(a, b, uint64(2+i), false))
		quiesce(t, a.dev, b.dev)
		h.hold(true)
		clk.Advance(100 * time.Microsecond)
		waitFor(t, func() bool { _, n := h.counts(); return n == 1 })
		clk.Advance(10 * time.Millisecond) // a hundred probe timeouts; the ACK timeout is 67 ms
		quiesce(t, a.dev, b.dev)
		h.release(la, -1)
		quiesce(t, a.dev, b.dev)
	}
	postSend(t, a, lazyWrite(a, b, 5, true))
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 5 {
		t.Fatalf("signaled WRITE after three late asks: %+v", wc)
	}
	ca := counters(a.dev)
	if st := a.qp.State(); st != StateRTS || ca.AckAsks != 3 || ca.TransportTimeouts != 0 || ca.CompleterRetryErr != 0 {
		t.Fatalf("state %v, %d asks, %d timeouts, %d retries; want RTS, 3, 0, 0", st, ca.AckAsks, ca.TransportTimeouts, ca.CompleterRetryErr)
	}
}
