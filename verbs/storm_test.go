package verbs

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
)

// lockstep drives two devices' engines from the test goroutine on one fake
// clock, charging each step simulated CPU time for the frames it moved and
// the QPs it visited. It replays, deterministically, engines slower than
// their transport timers: what the race detector made of
// TestManyQPsUnderFaults on a loaded machine.
type lockstep struct {
	clk      *faketime.Clock
	devs     [2]*Device
	ready    [2]time.Time
	perFrame time.Duration // CPU time per frame received or sent
	perQP    time.Duration // CPU time per active QP visited
	steps    int
}

// lockstepNap is the longest simulated sleep of an idle engine: the
// engine's own limit while a timer is armed (internal/transport's idleWait).
const lockstepNap = 2 * time.Millisecond

// stepCost runs one engine step of d and returns the CPU time it took. An
// engine with nothing to do sleeps until its next timer, as it would for
// real; a frame from the other engine would wake it at once, which the
// model approximates by letting it sleep at most lockstepNap.
func (l *lockstep) stepCost(d *Device) time.Duration {
	before, active := d.nic.EngineCounters(0), d.nic.EngineActive(0)
	busy := d.nic.StepEngine(0)
	after := d.nic.EngineCounters(0)
	frames := (after.SentPkts - before.SentPkts) + (after.RcvdPkts - before.RcvdPkts) +
		(after.DroppedMalformed - before.DroppedMalformed)
	cost := 10*time.Microsecond + time.Duration(frames)*l.perFrame + time.Duration(active)*l.perQP
	if !busy {
		cost = max(cost, min(d.nic.EngineNextTimer(0), lockstepNap))
	}
	return cost
}

// hold stops the engines' own goroutines (they wait on mu) until run
// ends, so that nothing moves before the replay starts: post only then.
func (l *lockstep) hold() {
	for _, d := range l.devs {
		d.nic.LockEngine(0)
	}
}

// run steps whichever engine is free next until done reports true or limit
// (simulated) has passed, and reports the simulated time taken; then it
// lets the engines' goroutines go.
func (l *lockstep) run(done func() bool, limit time.Duration) time.Duration {
	defer func() {
		for _, d := range l.devs {
			d.nic.UnlockEngine(0)
		}
	}()
	start := l.clk.Now()
	l.ready = [2]time.Time{start, start}
	for !done() && l.clk.Now().Sub(start) < limit {
		now := l.clk.Now()
		for i, d := range l.devs {
			if !now.Before(l.ready[i]) {
				l.ready[i] = now.Add(l.stepCost(d))
				l.steps++
			}
		}
		next := l.ready[0]
		if l.ready[1].Before(next) {
			next = l.ready[1]
		}
		l.clk.Advance(next.Sub(now))
	}
	return l.clk.Now().Sub(start)
}

// storm is one seeded replay: qps QP pairs, each WRITEing size(i) bytes
// one way while its peer SENDs (with immediate) as many the other, over a
// link with fault of each kind, on engines spending perFrame per frame.
type storm struct {
	qps          int
	seedA, seedB uint64
	fault        float64
	perFrame     time.Duration
	limit        time.Duration // of simulated time
	size         func(i int) int
	// maxOverhead, if set, bounds the frames sent each way, as a multiple
	// of the fewest the storm can take: each message's packets at MTU
	// 1024 (manyQPs' path MTU) and one ACK for each of the other way's.
	maxOverhead float64
}

// stormResult is what a replay took: simulated time, frames sent each way.
type stormResult struct {
	took         time.Duration
	sentA, sentB uint64
}

// run replays s and checks every completion and every byte, and the
// overhead against a fault-free replay if s bounds it.
func (s storm) run(t *testing.T) {
	t.Helper()
	r := s.replay(t)
	if s.maxOverhead == 0 {
		return
	}
	least := uint64(s.qps) // the ACKs of the other way's messages
	for i := range s.qps {
		least += uint64(max(1, (s.size(i)+1023)/1024))
	}
	bound := uint64(s.maxOverhead * float64(least))
	if r.sentA > bound || r.sentB > bound {
		t.Fatalf("retransmissions cost too much: %d and %d frames sent in %v, at least %d needed, at most %d allowed",
			r.sentA, r.sentB, r.took, least, bound)
	}
}

// replay runs s once and checks every completion and every byte.
func (s storm) replay(t *testing.T) stormResult {
	t.Helper()
	const slot = 8 << 10
	clk := faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr) *node {
		// AckHold uses the real clock: off, so the replay is exact.
		return newNode(t, newDeviceWith(t, l, mac, ip, DeviceConfig{ActiveMTU: 4096, Clock: clk, AckHold: -1}), 2*s.qps*slot)
	}
	a, b := mk(la, macA, ipA), mk(lb, macB, ipB)
	as, bs := manyQPs(t, a, b, s.qps)
	f := s.fault
	la.SetImpairment(memlink.Impairment{Drop: f, Duplicate: f, Corrupt: f, Reorder: f, Seed: s.seedA})
	lb.SetImpairment(memlink.Impairment{Drop: f, Duplicate: f, Corrupt: f, Reorder: f, Seed: s.seedB})
	fill(a.mr.Bytes(), int(s.seedA))
	fill(b.mr.Bytes(), int(s.seedB)+1)
	wantB, wantA := append([]byte(nil), a.mr.Bytes()...), append([]byte(nil), b.mr.Bytes()...)
	ls := &lockstep{clk: clk, devs: [2]*Device{a.dev, b.dev}, perFrame: s.perFrame, perQP: s.perFrame / 20}
	ls.hold()
	for i := range s.qps {
		// a's slot i goes to b's slot i by WRITE, b's slot qps+i to a's by SEND.
		postRecv(t, as[i], RecvWR{ID: uint64(i), SGList: sge(a.mr, (s.qps+i)*slot, slot)})
		postSend(t, as[i], SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGList: sge(a.mr, i*slot, s.size(i)), RemoteAddr: b.mr.Addr() + uint64(i*slot), RKey: b.mr.RKey()})
		postSend(t, bs[i], SendWR{ID: uint64(i), Opcode: WRSendWithImm, Flags: SendSignaled, ImmData: uint32(i),
			SGList: sge(b.mr, (s.qps+i)*slot, s.size(i))})
	}
	var wcs []WorkCompletion
	buf := make([]WorkCompletion, 64)
	done := func() bool {
		for _, cq := range []*CQ{a.scq, a.rcq, b.scq} {
			n := cq.Poll(buf)
			wcs = append(wcs, buf[:n]...)
		}
		return len(wcs) == 3*s.qps
	}
	took := ls.run(done, s.limit)
	if len(wcs) != 3*s.qps {
		t.Fatalf("seeds %d/%d, %v per frame: %d of %d completions after %v of simulated time (%d steps)%s",
			s.seedA, s.seedB, s.perFrame, len(wcs), 3*s.qps, took, ls.steps, stallReport(t))
	}
	for _, wc := range wcs {
		if wc.Status != WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	for i := range s.qps {
		w, r := i*slot, (s.qps+i)*slot
		equalBytes(t, "WRITE", b.mr.Bytes()[w:w+s.size(i)], wantB[w:w+s.size(i)])
		equalBytes(t, "SEND", a.mr.Bytes()[r:r+s.size(i)], wantA[r:r+s.size(i)])
	}
	t.Logf("%d completions in %v of simulated time, %d engine steps; link a→b %+v, b→a %+v", len(wcs), took, ls.steps, la.Stats(), lb.Stats())
	return stormResult{took: took, sentA: la.Stats().Sent, sentB: lb.Stats().Sent}
}

// TestRetransmissionStormReplay is the regression test of issue 18. 300 RC
// QP pairs with a 1 ms transport timer WRITE one way while SENDs go the
// other, over a link with 1% drop/duplicate/corrupt/reorder, on engines
// that spend 5 µs of CPU per frame. Before the fix every timer expiry
// resent each QP's whole window at the fixed timeout: the receiver, slower
// than the timer, queued a million frames, three in four of them
// duplicates, and after 20 s of simulated time one message was still
// missing. With retransmission probes, timer backoff and a bounded receive
// queue it all arrives within a fraction of a second, in about twice the
// fewest frames it can take (3430 and 3444 of 1636), where the engine's
// slowness alone brings spurious expiries. Without the probes each expiry
// resends the window: 6 times the fewest; without the backoff the timer
// keeps expiring under the slow receiver: 5.4 times; without both, 49.
func TestRetransmissionStormReplay(t *testing.T) {
	storm{qps: 300, seedA: 11, seedB: 12, fault: 0.01, perFrame: 5 * time.Microsecond, limit: 2 * time.Second,
		size: func(i int) int { return 1 + i*27%(8<<10) }, maxOverhead: 3}.run(t)
}

// TestRetransmissionSoak replays many seeds of a smaller storm with 2% of
// each fault, on engines from fast to slow, for a bounded time: every one
// must complete within 10 s of simulated time, every byte checked. A seed
// that fails is printed; rerun it alone by fixing seed to it.
func TestRetransmissionSoak(t *testing.T) {
	deadline := time.Now().Add(3 * time.Second)
	seeds := 0
	for seed := uint64(1); time.Now().Before(deadline); seed++ {
		perFrame := []time.Duration{500 * time.Nanosecond, 5 * time.Microsecond, 20 * time.Microsecond}[seed%3]
		rng := rand.New(rand.NewPCG(seed, 1))
		sizes := make([]int, 40)
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(8<<10)
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			storm{qps: 40, seedA: seed, seedB: seed << 32, fault: 0.02, perFrame: perFrame, limit: 10 * time.Second,
				size: func(i int) int { return sizes[i] }}.run(t)
		})
		if t.Failed() {
			return
		}
		seeds++
	}
	t.Logf("%d seeds", seeds)
}
