package verbs

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// slicedPair is two devices on one fake clock, stepped by the test
// (lockstep, held), with QP pair 0 and 1 at PMTU 256 and 8 MiB regions.
func slicedPair(t *testing.T) (a, b *node, qa, qb [2]*node, la, lb *memlink.Link, clk *faketime.Clock) {
	t.Helper()
	clk = faketime.New(time.Unix(1e9, 0))
	la, lb = memlink.NewPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr) *node {
		return newNode(t, newDeviceWith(t, l, mac, ip, DeviceConfig{ActiveMTU: 4096, Clock: clk, AckHold: -1}), 8<<20)
	}
	a, b = mk(la, macA, ipA), mk(lb, macB, ipB)
	for i := range qa {
		x, y := *a, *b
		for _, q := range []*node{&x, &y} {
			var err error
			q.qp, err = q.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: q.scq, RecvCQ: q.rcq, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
			must(t, err)
		}
		connect(t, &x, &y, ipA, ipB, macA, macB, connOpts{mtu: MTU256, timeout: 14, retry: 7, rnr: 7})
		qa[i], qb[i] = &x, &y
	}
	return a, b, qa, qb, la, lb, clk
}

// holdEngines stops the devices' engine goroutines for the rest of the
// test, which steps the engines itself.
func holdEngines(t *testing.T, devs ...*Device) {
	for _, d := range devs {
		nicOf(d).LockEngine(0)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			nicOf(d).UnlockEngine(0)
		}
	})
}

// perStepBound is what b may send in one step: two QPs' budgets of 64
// packets (replyBudget) and a few ACKs. Written out, so that a larger
// budget fails the tests too.
const perStepBound = 2*64 + 8

// stepBoth steps a's engine, then b's, advancing the fake clock, and
// returns how many packets b sent in its step.
func stepBoth(a, b *Device, clk *faketime.Clock) uint64 {
	nicOf(a).StepEngine(0)
	before := nicOf(b).EngineCounters(0).SentPkts
	nicOf(b).StepEngine(0)
	clk.Advance(20 * time.Microsecond)
	return nicOf(b).EngineCounters(0).SentPkts - before
}

// TestLongReadReplyIsSliced: a 4 MiB READ at PMTU 256 is 16 384 response
// packets. The responder sends at most replyBudget of them per engine step
// and resumes the reply on the next steps, so a WRITE on another QP of the
// same devices completes long before the READ does, instead of waiting
// behind the whole reply; the READ's bytes all arrive, in order.
func TestLongReadReplyIsSliced(t *testing.T) {
	a, b, qa, _, _, _, clk := slicedPair(t)
	const size = 4 << 20
	fill(b.mr.Bytes()[:size], 7)
	fill(a.mr.Bytes()[size:size+4096], 8)
	holdEngines(t, a.dev, b.dev)
	postSend(t, qa[0], SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	stepBoth(a.dev, b.dev, clk) // the READ request leaves a
	postSend(t, qa[1], SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, size, 4096), RemoteAddr: b.mr.Addr() + 6<<20, RKey: b.mr.RKey()})
	var most uint64
	writeAt, readAt := -1, -1
	buf := make([]WorkCompletion, 4)
	for step := 0; step < 20000 && readAt < 0; step++ {
		most = max(most, stepBoth(a.dev, b.dev, clk))
		for _, q := range qa {
			for _, wc := range buf[:q.scq.Poll(buf)] {
				if wc.Status != WCSuccess {
					t.Fatalf("completion %+v", wc)
				}
				if wc.WRID == 1 {
					readAt = step
				} else {
					writeAt = step
				}
			}
		}
	}
	if readAt < 0 {
		t.Fatalf("the READ did not complete in 20000 steps; b's counters %+v", nicOf(b.dev).EngineCounters(0))
	}
	if most > perStepBound {
		t.Fatalf("b sent %d packets in one step, want at most %d", most, perStepBound)
	}
	if writeAt < 0 || writeAt > readAt/10 {
		t.Fatalf("the WRITE completed at step %d, the READ at %d: the WRITE waited behind the reply", writeAt, readAt)
	}
	equalBytes(t, "READ", a.mr.Bytes()[:size], b.mr.Bytes()[:size])
	equalBytes(t, "WRITE", b.mr.Bytes()[6<<20:6<<20+4096], a.mr.Bytes()[size:size+4096])
	t.Logf("at most %d packets per step; WRITE done at step %d, READ at %d", most, writeAt, readAt)
}

// TestDuplicateReadBurstIsBounded: a requester that goes back again and
// again (or a forger who has seen one READ request) sends hundreds of
// copies of a large READ. Each is a duplicate the responder answers by
// replaying the reply, in order behind the one in progress; the queue is
// bounded, the copies beyond it are dropped and counted, no step sends more
// than the budget, and the QP keeps working.
func TestDuplicateReadBurstIsBounded(t *testing.T) {
	a, b, qa, _, la, lb, clk := slicedPair(t)
	const size = 1 << 20
	fill(b.mr.Bytes()[:size], 9)
	var mu sync.Mutex
	var request []byte
	la.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) == nil && p.BTH.Opcode == wire.RCReadRequest {
			mu.Lock()
			request = append([]byte(nil), f...)
			mu.Unlock()
		}
		return false
	})
	holdEngines(t, a.dev, b.dev)
	postSend(t, qa[0], SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	stepBoth(a.dev, b.dev, clk)
	mu.Lock()
	dup := request
	mu.Unlock()
	if dup == nil {
		t.Fatal("no READ request seen")
	}
	const copies = 600
	most := uint64(0)
	for i := range copies {
		lb.Inject([][]byte{dup})
		if i%50 == 0 {
			most = max(most, stepBoth(a.dev, b.dev, clk))
		}
	}
	for range 2000 {
		most = max(most, stepBoth(a.dev, b.dev, clk))
	}
	c := nicOf(b.dev).EngineCounters(0)
	if c.DuplicateRequest < copies/2 || c.DroppedReplies == 0 {
		t.Fatalf("counters %+v: want the copies counted as duplicates and those beyond the queue dropped", c)
	}
	if most > perStepBound {
		t.Fatalf("b sent %d packets in one step, want at most %d", most, perStepBound)
	}
	if wc := poll(t, qa[0].scq, 1, time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("READ: %+v", wc)
	}
	equalBytes(t, "READ", a.mr.Bytes()[:size], b.mr.Bytes()[:size])
	// And the QP still works: a WRITE behind all that.
	postSend(t, qa[0], SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), RemoteAddr: b.mr.Addr() + 7<<20, RKey: b.mr.RKey()})
	one := make([]WorkCompletion, 1)
	for i := 0; i < 200000 && qa[0].scq.Poll(one) == 0; i++ {
		stepBoth(a.dev, b.dev, clk)
	}
	if one[0].WRID != 2 || one[0].Status != WCSuccess {
		t.Fatalf("WRITE after the burst: %+v", one[0])
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[7<<20:7<<20+64], a.mr.Bytes()[:64])
	t.Logf("at most %d packets per step; b's counters: duplicate_request %d dropped_replies %d", most, c.DuplicateRequest, c.DroppedReplies)
}

// A request the responder refuses (here a WRITE with a bad rkey) behind a
// READ whose response is still queued: as rxe, which sends a READ's whole
// response before it takes the next request, the READ's response leaves
// whole, then the NAK, and only then does the responder's QP enter the
// error state. Entering it at once dropped both, and the requester retried
// into a QP that no longer answered: RETRY_EXC_ERR for both instead.
func TestNAKBehindQueuedReadResponse(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{timeout: 10, retry: 3}, 1<<20)
	// 100 packets at PMTU 1024: more than a step's budget of replies, and
	// few enough PSNs that the WRITE leaves with the READ request.
	const size = 100 << 10
	fill(b.mr.Bytes()[:size], 7)
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, size, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x100})
	wcs := poll(t, a.scq, 2, 10*time.Second)
	if wcs[0].WRID != 1 || wcs[0].Status != WCSuccess || wcs[1].WRID != 2 || wcs[1].Status != WCRemAccessErr {
		t.Fatalf("completions %+v and %+v, want the READ's SUCCESS and the WRITE's REM_ACCESS_ERR", wcs[0], wcs[1])
	}
	equalBytes(t, "READ", a.mr.Bytes()[:size], b.mr.Bytes()[:size])
	if st := b.qp.State(); st != StateErr {
		t.Fatalf("the responder's QP in %v after its NAK, want ERR", st)
	}
}
