package verbs

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// bottleneck is the receiving end of a slow path: the frames its MemLink
// receives wait in a queue of at most depth frames and come out one every
// gap, in real time; a frame that finds the queue full is dropped, as the
// tap into a slow guest drops it.
type bottleneck struct {
	link  *memlink.Link
	depth int
	gap   time.Duration
	queue []timedFrame
	last  time.Time // when the newest queued frame comes out
	drops atomic.Int64
}

type timedFrame struct {
	at    time.Time
	frame []byte
}

// admit moves what arrived into the queue, or drops it.
func (b *bottleneck) admit() {
	now := time.Now()
	for {
		n, _ := b.link.Receive(transport.RxBatch, func(f []byte) {
			if len(b.queue) >= b.depth {
				b.drops.Add(1)
				return
			}
			if b.last.Before(now) {
				b.last = now
			}
			b.last = b.last.Add(b.gap)
			b.queue = append(b.queue, timedFrame{b.last, bytes.Clone(f)})
		})
		if n == 0 {
			return
		}
	}
}

func (b *bottleneck) Receive(max int, fn func([]byte)) (int, error) {
	b.admit()
	now := time.Now()
	n := 0
	for n < max && n < len(b.queue) && !b.queue[n].at.After(now) {
		fn(b.queue[n].frame)
		n++
	}
	b.queue = b.queue[n:]
	return n, nil
}

func (b *bottleneck) Wait(d time.Duration) {
	b.admit()
	if len(b.queue) > 0 {
		d = min(d, time.Until(b.queue[0].at))
	}
	if d > 0 {
		b.link.Wait(d)
	}
}

func (b *bottleneck) Send(frames [][]byte) error { return b.link.Send(frames) }
func (b *bottleneck) Wake()                      { b.link.Wake() }
func (b *bottleneck) MaxFrame() int              { return b.link.MaxFrame() }

// TestReadResponsesPacedAfterTailLoss: READs of 128 packets, one at a time
// (as rxe's requester keeps one large READ in flight), to a requester
// behind a path that holds 48 frames and takes one every 100 µs, as rxe in
// a small guest behind its tap. The first response overflows the path; the
// requester asks again for what it lacks, run by run when the overflow
// left scattered runs (engines the race detector slows send in bursts the
// path partly drains between). The responder counts one READ's runs
// together, and from then on paces that QP's READ responses at the rate
// it saw them taken in: of the later READs at most one loses anything,
// where an unpaced responder overflows the path with every READ.
func TestReadResponsesPacedAfterTailLoss(t *testing.T) {
	la, lb := memlink.NewPair(4096 + 200)
	slow := &bottleneck{link: la, depth: 48, gap: 100 * time.Microsecond}
	a := newNode(t, newDevice(t, slow, macA, ipA, 4096), 1<<20)
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<20)
	// retry_cnt 6: rxe's fixed timer, not the adaptive one; 67 ms, room
	// for a host so loaded (load average 10 and more on two cores) that
	// the engines, slowed by the race detector, stall for tens of ms: at
	// 16.8 ms a stalled requester's expiries asked for READs still on
	// their way until the path held only duplicates, and retry_cnt ran
	// out.
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU4096, timeout: 14, retry: 6, rnr: 7})
	fill(b.mr.Bytes(), 5)
	const reads, size = 12, 512 << 10
	var lossy []int // the READs that lost frames on the path
	for i := range reads {
		clear(a.mr.Bytes()[:size])
		before := slow.drops.Load()
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, size),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 10*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("READ %d: completion %+v; requester's counters %+v, responder's %+v, %d frames dropped on the path", i, wc, counters(a.dev), counters(b.dev), slow.drops.Load())
		}
		equalBytes(t, "READ", a.mr.Bytes()[:size], b.mr.Bytes()[:size])
		if i == 0 && slow.drops.Load() == 0 {
			t.Fatal("the first response did not overflow the path: the test shows nothing")
		}
		if slow.drops.Load() != before {
			lossy = append(lossy, i)
		}
	}
	cb := counters(b.dev)
	if cb.ReadRetryPaced == 0 || len(lossy) > 2 {
		t.Fatalf("responder's counters %+v, %d frames dropped on the path, READs %v lost frames: want pacing on after the first, at most one more lossy READ in %d",
			cb, slow.drops.Load(), lossy, reads)
	}
}

// TestDuplicatedReadRequestsDoNotPace: every READ request arrives twice (a
// fabric that duplicates). Each copy finds its response sent and asks for
// it from the start again, which is no sign of a lost tail: the responder
// answers it (the requester drops the duplicates) but never paces.
func TestDuplicatedReadRequestsDoNotPace(t *testing.T) {
	a, b, la, _ := readLossPair(t)
	la.SetImpairment(memlink.Impairment{Duplicate: 1, Seed: 5})
	for i := range 8 {
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 32<<10),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("READ %d: completion %+v", i, wc)
		}
	}
	equalBytes(t, "READ", a.mr.Bytes()[:32<<10], b.mr.Bytes()[:32<<10])
	cb := waitCounter(t, b.dev, "the duplicated requests", func(c Counters) bool { return c.DuplicateRequest >= 8 })
	if cb.ReadRetryPaced != 0 {
		t.Fatalf("responder's counters %+v: duplicated requests turned pacing on", cb)
	}
}

// forgeReadRequest builds a READ request from a to b's QP, as a third party
// who knows the addresses, the QPN and an rkey would.
func forgeReadRequest(t *testing.T, dstQPN, psn uint32, reth wire.RETH) []byte {
	t.Helper()
	var p wire.Packet
	p.Eth = wire.Ethernet{Dst: [6]byte(macB), Src: [6]byte(macA)}
	p.IP = wire.IP{Src: ipA, Dst: ipB, TTL: 64, DF: true}
	p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: wire.RCReadRequest, PKey: 0xffff, DestQP: dstQPN, PSN: psn & 0xffffff, AckReq: true}
	p.RETH = reth
	buf := make([]byte, 4096+200)
	n, err := wire.Encode(buf, &p)
	must(t, err)
	return buf[:max(n, wire.MinFrameLen)]
}

// TestForgedDuplicateReadDoesNotPace: a duplicate READ naming a held READ's
// rkey and a PSN past its start, but not the rest of its range (the
// original address and length, what a third party who learnt the rkey
// would send), is answered as a duplicate and leaves the pace alone:
// before, each such copy turned pacing on and cut the rate by a quarter.
// A request that resumes the READ exactly, as a requester that lost the
// response's tail sends, still paces.
func TestForgedDuplicateReadDoesNotPace(t *testing.T) {
	const size, first = 32 << 10, 0x100
	a, b, _, lb := pair(t, connOpts{mtu: MTU1024, psnA: first}, 1<<16)
	fill(b.mr.Bytes()[:size], 7)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("READ: %+v", wc)
	}
	for i := range 8 {
		psn := uint32(first + 1 + i*3)
		lb.Inject([][]byte{forgeReadRequest(t, b.qp.QPN(), psn, wire.RETH{VA: b.mr.Addr(), RKey: b.mr.RKey(), Len: size})})
		waitCounter(t, b.dev, "the forged duplicate", func(c Counters) bool { return c.DuplicateRequest == uint64(i+1) })
		time.Sleep(2 * time.Millisecond) // its response sent: the next finds the QP idle
	}
	if c := counters(b.dev); c.ReadRetryPaced != 0 {
		t.Fatalf("forged duplicate READs turned pacing on %d times", c.ReadRetryPaced)
	}
	const k = 5
	lb.Inject([][]byte{forgeReadRequest(t, b.qp.QPN(), first+k, wire.RETH{VA: b.mr.Addr() + k*1024, RKey: b.mr.RKey(), Len: size - k*1024})})
	waitCounter(t, b.dev, "the resume", func(c Counters) bool { return c.ReadRetryPaced == 1 })
	if a.qp.State() != StateRTS || b.qp.State() != StateRTS {
		t.Fatalf("QPs %v and %v", a.qp.State(), b.qp.State())
	}
}
