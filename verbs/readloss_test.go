package verbs

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// sentLog records the frames a MemLink sends: each one's PSN and AckReq
// bit, and how many of each opcode.
type sentLog struct {
	mu   sync.Mutex
	psns []uint32
	ack  []bool
	sent map[wire.Opcode]int
}

// watchSent records what l sends and drops the frames drop selects (it is
// given the packet and its number, from 1).
func watchSent(l *memlink.Link, drop func(p *wire.Packet, n int) bool) *sentLog {
	s := &sentLog{sent: map[wire.Opcode]int{}}
	l.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) != nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.psns = append(s.psns, p.BTH.PSN)
		s.ack = append(s.ack, p.BTH.AckReq)
		s.sent[p.BTH.Opcode]++
		return drop != nil && drop(&p, len(s.psns))
	})
	return s
}

// dropFirst watches l and drops the first frame each predicate matches.
func dropFirst(l *memlink.Link, preds ...func(*wire.Packet) bool) *sentLog {
	used := make([]bool, len(preds))
	return watchSent(l, func(p *wire.Packet, _ int) bool {
		for i, pred := range preds {
			if !used[i] && pred(p) {
				used[i] = true
				return true
			}
		}
		return false
	})
}

func (s *sentLog) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.psns)
}

func (s *sentLog) since(i int) ([]uint32, []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint32(nil), s.psns[i:]...), append([]bool(nil), s.ack[i:]...)
}

func (s *sentLog) count(op wire.Opcode) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[op]
}

func psnIs(psn uint32) func(*wire.Packet) bool {
	return func(p *wire.Packet) bool { return p.BTH.PSN == psn }
}

// readLossPair is a fake-time pair at PMTU 4096 whose clock the test never
// advances: whatever completes, completed without a transport timer.
func readLossPair(t *testing.T) (a, b *node, la, lb *memlink.Link) {
	t.Helper()
	a, b, _ = fakePair(t, connOpts{mtu: MTU4096, timeout: 14, retry: 7, rnr: 7})
	fill(b.mr.Bytes(), 11)
	return a, b, a.dev.nic.Link(0).(*memlink.Link), b.dev.nic.Link(0).(*memlink.Link)
}

// TestReadLostMiddleResponse: the sixth of a 64 KiB READ's 16 responses is
// lost. The ones behind it are placed at their offsets; once dupThresh of
// them show the gap, the READ is asked again for the missing PSN only
// (RETH adjusted); the responder replays it from its resources. One
// re-request, one response resent, no timer, every byte right.
func TestReadLostMiddleResponse(t *testing.T) {
	a, b, la, lb := readLossPair(t)
	drops := dropFirst(lb, psnIs(5))
	reqs := dropFirst(la)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 64<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	equalBytes(t, "READ", a.mr.Bytes()[:64<<10], b.mr.Bytes()[:64<<10])
	ca, cb := counters(a.dev), counters(b.dev)
	if reqs.count(wire.RCReadRequest) != 2 || ca.LostResponseRetry != 1 || cb.DuplicateRequest != 1 || ca.CompleterRetryErr != 0 {
		t.Fatalf("%d READ requests (want 2), counters A %+v B %+v", reqs.count(wire.RCReadRequest), ca, cb)
	}
	// The responses past the hole (PSNs 6-15) were placed, not dropped:
	// the responder resent PSN 5 alone, ended by a LAST.
	if ca.DuplicateResponse != 0 || drops.n() != 17 || drops.count(wire.RCReadResponseLast) != 2 || ca.OOOHeld != 10 || cb.RetransmittedPkts != 1 {
		t.Fatalf("responses sent %v (%d), counters A %+v B %+v", drops.sent, drops.n(), ca, cb)
	}
	if psns, _ := drops.since(16); psns[0] != 5 {
		t.Fatalf("resent response PSN %d, want 5", psns[0])
	}
}

// TestReadLostLastResponseBeforeAnother: READ A's last response is lost;
// READ B's responses, behind it, show that, and A is asked again for its
// last packet at once while B's responses are placed. Both complete, in
// order, without a timer.
func TestReadLostLastResponseBeforeAnother(t *testing.T) {
	a, b, _, lb := readLossPair(t)
	dropFirst(lb, psnIs(7))
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 32<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 32<<10, 32<<10), RemoteAddr: b.mr.Addr() + 32<<10, RKey: b.mr.RKey()})
	wcs := poll(t, a.scq, 2, 5*time.Second)
	if wcs[0].WRID != 1 || wcs[1].WRID != 2 || wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	equalBytes(t, "READs", a.mr.Bytes()[:64<<10], b.mr.Bytes()[:64<<10])
	if c := counters(a.dev); c.LostResponseRetry != 1 || c.CompleterRetryErr != 0 {
		t.Fatalf("counters %+v: want one re-request and no retry", c)
	}
}

// TestReadLostRequestBeforeAnother: READ A's request is lost; B's arrives
// out of sequence and the responder NAKs A's PSN, which starts a retry at
// once. Only the READ with nothing behind it needs the timer.
func TestReadLostRequestBeforeAnother(t *testing.T) {
	a, b, la, _ := readLossPair(t)
	dropFirst(la, func(p *wire.Packet) bool { return p.BTH.Opcode == wire.RCReadRequest })
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 8<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 8<<10, 8<<10), RemoteAddr: b.mr.Addr() + 8<<10, RKey: b.mr.RKey()})
	if wcs := poll(t, a.scq, 2, 5*time.Second); wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	equalBytes(t, "READs", a.mr.Bytes()[:16<<10], b.mr.Bytes()[:16<<10])
	if c := counters(a.dev); c.RcvdSeqErr+c.CompleterRetryErr == 0 {
		t.Fatalf("counters %+v: the NAK did not start the retry", c)
	}
}

// TestReadDuplicateResponsesDropped: every READ response is delivered
// twice; the copies are dropped and counted, never placed again.
func TestReadDuplicateResponsesDropped(t *testing.T) {
	a, b, _, lb := readLossPair(t)
	lb.SetImpairment(memlink.Impairment{Duplicate: 1, Seed: 3})
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 32<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	equalBytes(t, "READ", a.mr.Bytes()[:32<<10], b.mr.Bytes()[:32<<10])
	if c := counters(a.dev); c.DuplicateResponse < 7 || c.LostResponseRetry != 0 {
		t.Fatalf("counters %+v: want the 8 copies dropped as duplicates", c)
	}
}

// TestReadStreamUnderHeavyLoss keeps 32 64 KiB READs in flight over a link
// that drops 5% of the frames both ways, for several seeds. It found a
// stall: a READ whose last responses arrived after a go-back-N had marked
// it for resending was asked for again with nothing left, a zero-length
// READ at the next READ's first PSN; a responder whose request for that
// next READ was lost executed it, and every later answer for the real
// READ then mismatched. A READ with its responses in is never asked again.
func TestReadStreamUnderHeavyLoss(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		a, b, la, lb := pair(t, connOpts{mtu: MTU4096, timeout: 14, retry: 7, rnr: 7}, 1<<20)
		la.SetImpairment(memlink.Impairment{Drop: 0.05, Seed: seed})
		lb.SetImpairment(memlink.Impairment{Drop: 0.05, Seed: seed + 100})
		fill(b.mr.Bytes(), int(seed))
		const reads, size = 600, 64 << 10
		posted, done := 0, 0
		buf := make([]WorkCompletion, 64)
		last := time.Now()
		for done < reads {
			for posted < reads && posted-done < 32 {
				off := posted % 8 * size
				postSend(t, a, SendWR{ID: uint64(posted), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, off, size),
					RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
				posted++
			}
			k := a.scq.Poll(buf)
			for _, wc := range buf[:k] {
				if wc.Status != WCSuccess || wc.WRID != uint64(done) {
					t.Fatalf("seed %d: completion %+v, want WR %d", seed, wc, done)
				}
				done++
			}
			if k > 0 {
				last = time.Now()
			} else if time.Since(last) > 5*time.Second {
				t.Fatalf("seed %d: no completion for 5 s at %d of %d:%s", seed, done, reads, stallReport(t))
			}
		}
		equalBytes(t, "READs", a.mr.Bytes()[:8*size], b.mr.Bytes()[:8*size])
	}
}

// TestAtomicLostBeforeSend: a FETCH_ADD followed by a SEND, with the
// atomic's ACK lost (the SEND's ACK shows that, and the atomic is sent again
// at once: the responder answers it from the saved result) or its request
// lost (the SEND arrives out of sequence and the responder's NAK starts a
// retry at once). Either way the add happens once, the original value comes
// back, and no timer was needed.
func TestAtomicLostBeforeSend(t *testing.T) {
	for _, tc := range []struct {
		name  string
		resp  bool // drop from b's responses, not a's requests
		op    wire.Opcode
		check func(a, b Counters) bool
	}{
		{"ACK lost", true, wire.RCAtomicAck, func(a, b Counters) bool { return a.LostResponseRetry == 1 && b.DuplicateRequest == 1 }},
		{"request lost", false, wire.RCFetchAdd, func(_, b Counters) bool { return b.OutOfSeqRequest > 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, la, lb := readLossPair(t)
			l := la
			if tc.resp {
				l = lb
			}
			dropFirst(l, func(p *wire.Packet) bool { return p.BTH.Opcode == tc.op })
			binary.LittleEndian.PutUint64(b.mr.Bytes()[:8], 100)
			postRecv(t, b, RecvWR{ID: 9, SGList: sge(b.mr, 4096, 64)})
			postSend(t, a,
				SendWR{ID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 5},
				SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 64, 16)})
			if wcs := poll(t, a.scq, 2, 5*time.Second); wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess || wcs[0].WRID != 1 {
				t.Fatalf("completions %+v", wcs)
			}
			if got, orig := binary.LittleEndian.Uint64(b.mr.Bytes()[:8]), binary.LittleEndian.Uint64(a.mr.Bytes()[:8]); got != 105 || orig != 100 {
				t.Fatalf("target %d (want 105, added once), original %d (want 100)", got, orig)
			}
			if ca, cb := counters(a.dev), counters(b.dev); !tc.check(ca, cb) {
				t.Fatalf("counters A %+v B %+v", ca, cb)
			}
		})
	}
}
