package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// lazyTap records the data packets A sends (PSN, AckReq) and counts the
// ACKs B sends.
type lazyTap struct {
	mu    sync.Mutex
	data  []lazyPkt
	acks  int
	ackTo uint32 // the last ACK's PSN
}

type lazyPkt struct {
	psn uint32
	ask bool
}

func (o *lazyTap) install(la, lb *memlink.Link) {
	la.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) == nil && p.BTH.Opcode != wire.RCAck {
			o.mu.Lock()
			o.data = append(o.data, lazyPkt{p.BTH.PSN, p.BTH.AckReq})
			o.mu.Unlock()
		}
		return false
	})
	lb.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) == nil && p.BTH.Opcode == wire.RCAck {
			o.mu.Lock()
			o.acks++
			o.ackTo = p.BTH.PSN
			o.mu.Unlock()
		}
		return false
	})
}

// since returns the data packets sent from the n-th on, and the ACKs so far.
func (o *lazyTap) since(n int) ([]lazyPkt, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]lazyPkt(nil), o.data[n:]...), o.acks
}

// lazyPair connects two nodes with AckCoalesce (as with the fast path) on
// a fake clock; A's QP has maxSendWR send slots.
func lazyPair(t *testing.T, maxSendWR int) (a, b *node, clk *faketime.Clock, tap *lazyTap) {
	t.Helper()
	clk = faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	cfg := DeviceConfig{ActiveMTU: 4096, Clock: clk, AckCoalesce: true}
	a = newNode(t, newDeviceWith(t, la, macA, ipA, cfg), 1<<16)
	b = newNode(t, newDeviceWith(t, lb, macB, ipB, cfg), 1<<16)
	if maxSendWR != 0 {
		qp, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq,
			Cap: QPCap{MaxSendWR: maxSendWR, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		a.qp = qp
	}
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU4096, timeout: 14, retry: 7, rnr: 7})
	tap = &lazyTap{}
	tap.install(la, lb)
	return a, b, clk, tap
}

func lazyWrite(a, b *node, id uint64, signaled bool) SendWR {
	wr := SendWR{ID: id, Opcode: WRRDMAWrite, SGList: sge(a.mr, 64*int(id%64), 64),
		RemoteAddr: b.mr.Addr() + uint64(64*(id%64)), RKey: b.mr.RKey()}
	if signaled {
		wr.Flags = SendSignaled
	}
	return wr
}

// asks lists which of pkts asked for an ACK.
func asks(pkts []lazyPkt) []bool {
	out := make([]bool, len(pkts))
	for i, p := range pkts {
		out[i] = p.ask
	}
	return out
}

func sameBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAckReqLazy: with AckCoalesce an unsignaled WRITE with nothing
// behind it does not ask for an ACK (queue/ackpolicy.go, Lazy): nobody
// waits for its completion. The requester asks once the queue has stayed
// idle for a probe timeout on the fake clock (100 µs: no RTT sample on a
// clock that stands still), by sending its last packet again
// with AckReq, which the responder answers as a duplicate; a signaled WRITE
// behind it asks at once and completes with the clock standing still, so
// no application waiting for a completion waits for that timer.
func TestAckReqLazy(t *testing.T) {
	a, b, clk, tap := lazyPair(t, 0)
	fill(a.mr.Bytes()[:4096], 5)

	postSend(t, a, lazyWrite(a, b, 1, false))
	quiesce(t, a.dev, b.dev)
	pkts, acks := tap.since(0)
	if !sameBools(asks(pkts), []bool{false}) || acks != 0 {
		t.Fatalf("a lone unsignaled WRITE: AckReq %v, %d ACKs; want [false] and none", asks(pkts), acks)
	}
	equalBytes(t, "lazy WRITE", b.mr.Bytes()[64:128], a.mr.Bytes()[64:128])

	// The backstop: a probe timeout of idle time later the last packet goes again, asking.
	clk.Advance(90 * time.Microsecond)
	quiesce(t, a.dev, b.dev)
	if pkts, _ := tap.since(0); len(pkts) != 1 {
		t.Fatalf("90 µs idle: %d packets, want no ask yet", len(pkts))
	}
	clk.Advance(10 * time.Microsecond)
	waitFor(t, func() bool { _, n := tap.since(0); return n == 1 })
	quiesce(t, a.dev, b.dev)
	pkts, acks = tap.since(0)
	if !sameBools(asks(pkts), []bool{false, true}) || pkts[1].psn != pkts[0].psn || acks != 1 || tap.ackTo != pkts[0].psn {
		t.Fatalf("after a probe timeout: packets %+v, %d ACKs (last PSN %d); want the WRITE again with AckReq, one ACK of it", pkts, acks, tap.ackTo)
	}
	ca, cb := counters(a.dev), counters(b.dev)
	if ca.AckAsks != 1 || ca.RetransmittedPkts != 0 || ca.TransportTimeouts != 0 || cb.DuplicateRequest != 1 {
		t.Fatalf("requester: %d asks, %d resent, %d timeouts; responder: %d duplicates; want 1, 0, 0, 1",
			ca.AckAsks, ca.RetransmittedPkts, ca.TransportTimeouts, cb.DuplicateRequest)
	}

	// A signaled WRITE behind a lazy one asks at once and completes with
	// the clock standing still; its ACK covers the lazy one too.
	postSend(t, a, lazyWrite(a, b, 2, false))
	quiesce(t, a.dev, b.dev)
	postSend(t, a, lazyWrite(a, b, 3, true))
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 3 {
		t.Fatalf("signaled WRITE: %+v", wc)
	}
	pkts, _ = tap.since(2)
	if !sameBools(asks(pkts), []bool{false, true}) {
		t.Fatalf("lazy then signaled: AckReq %v, want [false true]", asks(pkts))
	}

	// A signaled WRITE that does not ask (an unsignaled one goes right
	// behind it, in the same post) makes that one ask.
	postSend(t, a, lazyWrite(a, b, 4, true), lazyWrite(a, b, 5, false))
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 4 {
		t.Fatalf("signaled WRITE before an unsignaled one: %+v", wc)
	}
	pkts, _ = tap.since(4)
	if !sameBools(asks(pkts), []bool{false, true}) {
		t.Fatalf("signaled then unsignaled: AckReq %v, want [false true]", asks(pkts))
	}

	// A WQE that waits for the lazy WRITE's ACK (a bind runs once
	// everything before it completed) has it asked for at once.
	mr, err := a.pd.AllocMR(1<<12, AccessLocalWrite|AccessMWBind)
	must(t, err)
	mw, err := a.pd.AllocMW(MWType2)
	must(t, err)
	postSend(t, a, lazyWrite(a, b, 6, false))
	quiesce(t, a.dev, b.dev)
	postSend(t, a, SendWR{ID: 7, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{MW: mw, RKey: IncRKey(mw.RKey()), MR: mr,
		Addr: mr.Addr(), Length: 64, Access: AccessRemoteWrite}})
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 7 {
		t.Fatalf("bind behind a lazy WRITE: %+v", wc)
	}
	pkts, _ = tap.since(6)
	if !sameBools(asks(pkts), []bool{false, true}) || pkts[0].psn != pkts[1].psn {
		t.Fatalf("lazy WRITE, then a bind: packets %+v; want it sent again with AckReq", pkts)
	}
	equalBytes(t, "WRITEs", b.mr.Bytes()[64:6*64], a.mr.Bytes()[64:6*64])
	if ca := counters(a.dev); ca.AckAsks != 2 || ca.RetransmittedPkts != 0 || ca.TransportTimeouts != 0 {
		t.Fatalf("requester: %d asks, %d resent, %d timeouts; want 2, 0, 0", ca.AckAsks, ca.RetransmittedPkts, ca.TransportTimeouts)
	}
}

// TestAckReqLazyHalfQueue: unsignaled WRITEs posted one at a time go
// without AckReq until half the send queue's slots are taken; the WRITE
// that takes more asks, and its ACK frees every slot with the clock
// standing still.
func TestAckReqLazyHalfQueue(t *testing.T) {
	const slots = 8
	a, b, _, tap := lazyPair(t, slots)
	for i := range slots / 2 {
		postSend(t, a, lazyWrite(a, b, uint64(i), false))
		quiesce(t, a.dev, b.dev)
	}
	postSend(t, a, lazyWrite(a, b, slots/2, false))
	quiesce(t, a.dev, b.dev)
	pkts, acks := tap.since(0)
	if want := []bool{false, false, false, false, true}; !sameBools(asks(pkts), want) || acks != 1 {
		t.Fatalf("unsignaled WRITEs one by one into %d slots: AckReq %v, %d ACKs; want %v, 1", slots, asks(pkts), acks, want)
	}
	// Every slot is free again: a full queue's worth posts.
	wrs := make([]SendWR, slots)
	for i := range wrs {
		wrs[i] = lazyWrite(a, b, uint64(10+i), i == slots-1)
	}
	postSend(t, a, wrs...)
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 10+slots-1 {
		t.Fatalf("a full queue's worth: %+v", wc)
	}
}

// waitFor polls cond for up to 5 s of real time.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
