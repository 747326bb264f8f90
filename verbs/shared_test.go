package verbs

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/attached"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/wire"
)

// sharedNode is a node whose QP and CQ use shared rings, written here as a
// daemon's client would write them (or a hostile one).
type sharedNode struct {
	*node
	sq, rq, cqr *uverbs.Ring
}

func newRing(t *testing.T, slots uint32, size int) *uverbs.Ring {
	t.Helper()
	r, err := uverbs.NewRing(make([]byte, uverbs.RingBytes(slots, size)), slots, size)
	must(t, err)
	return r
}

func newSharedNode(t *testing.T, d *Device, bufSize int) *sharedNode {
	t.Helper()
	return newSharedNodeNotify(t, d, bufSize, nil)
}

// newSharedNodeNotify is newSharedNode whose CQ runs notify (on the engine)
// for a completion that meets the armed notification request.
func newSharedNodeNotify(t *testing.T, d *Device, bufSize int, notify func()) *sharedNode {
	t.Helper()
	s := &sharedNode{node: &node{dev: d}}
	var err error
	s.pd, err = d.AllocPD()
	must(t, err)
	s.cqr = newRing(t, 64, uverbs.CQESize)
	s.scq, err = d.CreateSharedCQ(64, s.cqr, notify)
	must(t, err)
	s.rcq = s.scq
	c := QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	s.sq = newRing(t, 16, uverbs.SendSlotSize(2, 64))
	s.rq = newRing(t, 16, uverbs.RecvSlotSize(2))
	s.qp, err = s.pd.CreateSharedQP(QPInitAttr{Type: QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq, Cap: c}, s.sq, s.rq, nil)
	must(t, err)
	s.mr, err = s.pd.AllocMR(bufSize, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	must(t, err)
	return s
}

// post writes one send WQE into the next slot and publishes it.
func (s *sharedNode) post(w uverbs.SendWQE, sgl []uverbs.SGE, inline []byte) {
	p := s.sq.Producer()
	uverbs.PutSendWQE(s.sq.Slot(p), &w, sgl, inline)
	s.sq.SetProducer(p + 1)
	s.dev.Wake()
}

// cqe waits for the next completion in the shared CQ ring.
func (s *sharedNode) cqe(t *testing.T) uverbs.CQE {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.cqr.Producer() == s.cqr.Consumer() {
		if time.Now().After(deadline) {
			t.Fatal("no completion in the shared CQ")
		}
		time.Sleep(50 * time.Microsecond)
	}
	var c uverbs.CQE
	uverbs.CQEOf(s.cqr.Slot(s.cqr.Consumer()), &c)
	s.cqr.SetConsumer(s.cqr.Consumer() + 1)
	return c
}

func sharedPair(t *testing.T) (*sharedNode, *node) {
	t.Helper()
	la, lb := memlink.NewPair(4096 + 200)
	a := newSharedNode(t, newDevice(t, la, macA, ipA, 4096), 1<<16)
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
	connect(t, a.node, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
	return a, b
}

// The engines take work requests from shared rings as from posts: a WRITE,
// an inline SEND and a receive, and the completions land in the shared CQ
// ring, which the client's consumer index frees.
func TestSharedRings(t *testing.T) {
	a, b := sharedPair(t)
	fill(a.mr.Bytes()[:20000], 1)
	a.post(uverbs.SendWQE{WRID: 1, Opcode: uint8(WRRDMAWrite), SendFlags: uint8(SendSignaled), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		[]uverbs.SGE{{Addr: a.mr.Addr(), Length: 20000, LKey: a.mr.LKey()}}, nil)
	if c := a.cqe(t); c.WRID != 1 || WCStatus(c.Status) != WCSuccess || WCOpcode(c.Opcode) != WCRDMAWrite {
		t.Fatalf("WRITE completion %+v", c)
	}
	settle(t, b.dev)
	equalBytes(t, "WRITE", b.mr.Bytes()[:20000], a.mr.Bytes()[:20000])

	postRecv(t, b, RecvWR{ID: 9, SGList: sge(b.mr, 30000, 64)})
	a.post(uverbs.SendWQE{WRID: 2, Opcode: uint8(WRSend), SendFlags: uint8(SendSignaled | SendInline)}, nil, []byte("in the slot"))
	if c := a.cqe(t); c.WRID != 2 || WCStatus(c.Status) != WCSuccess {
		t.Fatalf("inline SEND completion %+v", c)
	}
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.ByteLen != 11 || !bytes.Equal(b.mr.Bytes()[30000:30011], []byte("in the slot")) {
		t.Fatalf("inline SEND arrived as %+v %q", wc, b.mr.Bytes()[30000:30011])
	}

	p := a.rq.Producer()
	uverbs.PutRecvWQE(a.rq.Slot(p), 7, []uverbs.SGE{{Addr: a.mr.Addr() + 40000, Length: 100, LKey: a.mr.LKey()}})
	a.rq.SetProducer(p + 1)
	a.dev.Wake()
	postSend(t, b, SendWR{ID: 3, Opcode: WRSendWithImm, ImmData: 5, Flags: SendSignaled, SGList: sge(b.mr, 0, 100)})
	if c := a.cqe(t); c.WRID != 7 || WCOpcode(c.Opcode) != WCRecv || c.ByteLen != 100 || c.Imm != 5 {
		t.Fatalf("receive completion %+v", c)
	}
	settle(t, a.dev)
	if a.rq.Consumer() != a.rq.Producer() || a.sq.Consumer() != a.sq.Producer() {
		t.Fatalf("rings not released: sq %d/%d rq %d/%d", a.sq.Consumer(), a.sq.Producer(), a.rq.Consumer(), a.rq.Producer())
	}
}

// A client that writes what its API would refuse moves only its own QP to
// the error state; the engine counts it and goes on serving others.
func TestHostileSharedRings(t *testing.T) {
	cases := []struct {
		name  string
		write func(s *sharedNode)
	}{
		{"producer far ahead", func(s *sharedNode) { s.sq.SetProducer(s.sq.Producer() + 1000) }},
		{"receive producer far ahead", func(s *sharedNode) { s.rq.SetProducer(s.rq.Producer() - 1) }},
		{"SGE count past the slot", func(s *sharedNode) {
			slot := s.sq.Slot(s.sq.Producer())
			uverbs.PutSendWQE(slot, &uverbs.SendWQE{Opcode: uint8(WRRDMAWrite)}, nil, nil)
			slot[10], slot[11] = 0xff, 0xff
			s.sq.SetProducer(s.sq.Producer() + 1)
		}},
		{"inline past the slot", func(s *sharedNode) {
			slot := s.sq.Slot(s.sq.Producer())
			uverbs.PutSendWQE(slot, &uverbs.SendWQE{Opcode: uint8(WRSend), SendFlags: uint8(SendInline)}, nil, []byte("x"))
			slot[48], slot[49] = 0xff, 0xff
			s.sq.SetProducer(s.sq.Producer() + 1)
		}},
		{"inline with an SG list", func(s *sharedNode) {
			s.post(uverbs.SendWQE{Opcode: uint8(WRSend), SendFlags: uint8(SendInline)}, []uverbs.SGE{{Addr: s.mr.Addr(), Length: 8, LKey: s.mr.LKey()}}, nil)
		}},
		{"unknown opcode", func(s *sharedNode) { s.post(uverbs.SendWQE{Opcode: 200}, nil, nil) }},
		{"too many receive SGEs", func(s *sharedNode) {
			slot := s.rq.Slot(s.rq.Producer())
			uverbs.PutRecvWQE(slot, 1, []uverbs.SGE{{}, {}})
			slot[8] = 3 // the slot holds 2 SGEs, the QP allows 2
			s.rq.SetProducer(s.rq.Producer() + 1)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := sharedPair(t)
			before, _ := a.dev.Counters()
			c.write(a)
			a.dev.Wake()
			deadline := time.Now().Add(5 * time.Second)
			for a.qp.State() != StateErr && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			settle(t, a.dev) // the step that moved it has published the state
			if a.qp.State() != StateErr || StateErr != QPState(a.sq.Aux().Load()) {
				t.Fatalf("QP in %v (ring says %d) after a malformed WQE", a.qp.State(), a.sq.Aux().Load())
			}
			if c.name != "producer far ahead" && c.name != "receive producer far ahead" {
				if wc := a.cqe(t); WCStatus(wc.Status) != WCLocQPOpErr {
					t.Fatalf("the malformed WQE completed with %+v", wc)
				}
			}
			// What is posted after it is flushed (unless the send ring's
			// producer index itself is beyond repair).
			if c.name != "producer far ahead" {
				a.post(uverbs.SendWQE{WRID: 77, Opcode: uint8(WRSend), SendFlags: uint8(SendSignaled)}, nil, nil)
				if wc := a.cqe(t); wc.WRID != 77 || WCStatus(wc.Status) != WCWRFlushErr {
					t.Fatalf("a WQE posted in ERR completed with %+v", wc)
				}
			}
			after, _ := a.dev.Counters()
			if after.BadSharedWQE != before.BadSharedWQE+1 {
				t.Fatalf("bad_shared_wqe %d → %d", before.BadSharedWQE, after.BadSharedWQE)
			}
			// The device serves another QP as before.
			x := newNode(t, a.dev, 4096)
			y := newNode(t, b.dev, 4096)
			connect(t, x, y, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
			postSend(t, x, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(x.mr, 0, 4096), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()})
			if wc := poll(t, x.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
				t.Fatalf("another QP's WRITE: %+v", wc)
			}
		})
	}
}

// A client's CQ consumer index is its own business: garbage there
// overflows or overwrites only its own completions.
func TestHostileSharedCQConsumer(t *testing.T) {
	a, b := sharedPair(t)
	a.cqr.SetConsumer(0xdeadbeef)
	a.post(uverbs.SendWQE{WRID: 1, Opcode: uint8(WRRDMAWrite), SendFlags: uint8(SendSignaled), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		[]uverbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for a.cqr.Aux2().Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	if a.cqr.Aux2().Load() == 0 {
		t.Fatal("no overflow reported in the ring")
	}
	if a.qp.State() != StateErr {
		t.Fatalf("QP in %v after its CQ overflowed", a.qp.State())
	}
}

// A malformed WQE in a shared SRQ's ring stops that SRQ (SRQ_ERR), nothing else.
func TestHostileSharedSRQ(t *testing.T) {
	la, _ := memlink.NewPair(4096 + 200)
	d := newDevice(t, la, macA, ipA, 4096)
	pd, err := d.AllocPD()
	must(t, err)
	ring := newRing(t, 8, uverbs.RecvSlotSize(1))
	s, err := pd.CreateSharedSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1}, ring)
	must(t, err)
	slot := ring.Slot(0)
	uverbs.PutRecvWQE(slot, 1, []uverbs.SGE{{}})
	slot[8] = 200 // SGEs past the slot
	ring.SetProducer(1)
	d.Wake()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	ev, err := d.GetAsyncEvent(ctx)
	if err != nil || ev.Type != EventSRQErr || ev.SRQ != s {
		t.Fatalf("event %+v %v", ev, err)
	}
	if c, _ := d.Counters(); c.BadSharedWQE != 1 {
		t.Fatalf("bad_shared_wqe %d", c.BadSharedWQE)
	}
	if _, err := pd.CreateSharedSRQ(SRQInitAttr{MaxWR: 16}, ring); !isErr(err, ErrInvalid) {
		t.Fatalf("an SRQ bigger than its ring: %v", err)
	}
	if err := s.Modify(SRQAttr{MaxWR: 9}, SRQAttrMaxWR); !isErr(err, ErrInvalid) {
		t.Fatalf("growing a shared SRQ past its ring: %v", err)
	}
	must(t, s.Destroy())
}

// SetCapture shows every frame, both ways, once each, and stops when asked.
func TestCapture(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	var mu sync.Mutex
	var in, out int
	var bad error
	a.dev.SetCapture(func(frame []byte, outbound bool) {
		var p wire.Packet
		mu.Lock()
		defer mu.Unlock()
		if err := wire.Decode(frame, &p); err != nil {
			bad = err
		}
		if outbound {
			out++
		} else {
			in++
		}
	})
	// 10 packets at path MTU 1024, and their ACK(s).
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 10000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	poll(t, a.scq, 1, 5*time.Second)
	a.dev.SetCapture(nil)
	settle(t, a.dev)
	mu.Lock()
	gotIn, gotOut := in, out
	mu.Unlock()
	c, _ := a.dev.Counters()
	if bad != nil || uint64(gotOut) != c.SentPkts || uint64(gotIn) != c.RcvdPkts || gotOut != 10 || gotIn < 1 {
		t.Fatalf("captured %d out, %d in (sent %d, received %d), decode error %v", gotOut, gotIn, c.SentPkts, c.RcvdPkts, bad)
	}
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 100), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	poll(t, a.scq, 1, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if in != gotIn || out != gotOut {
		t.Fatal("frames captured after the capture stopped")
	}
}

// fakeProcMem is another process's memory as the engines see it: a slice
// they may only copy to and from, counting the calls.
type fakeProcMem struct {
	mu                  sync.Mutex
	b                   []byte
	reads, writes, vecs int
	vecPieces           int
	readVecs, readPcs   int
}

func (f *fakeProcMem) ReadVec(p [][]byte, off []uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readVecs++
	f.readPcs += len(p)
	for i := range p {
		copy(p[i], f.b[off[i]:])
	}
	return nil
}

func (f *fakeProcMem) ReadAt(p []byte, off uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	copy(p, f.b[off:])
	return nil
}

func (f *fakeProcMem) WriteAt(p []byte, off uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	copy(f.b[off:], p)
	return nil
}

func (f *fakeProcMem) WriteVec(p [][]byte, off []uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vecs++
	f.vecPieces += len(p)
	for i := range p {
		copy(f.b[off[i]:], p[i])
	}
	return nil
}

// Payloads bound for another process's memory are written once per
// receive batch, all of them, before the completion that reports them;
// what is sent from it is read once per transmit batch, before the frames
// are sealed.
func TestRemoteMemoryBatchedWrites(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	mem := &fakeProcMem{b: make([]byte, 1<<16)}
	rmr, err := a.pd.RegProcMR(mem, 0x7f0000000000, 1<<16, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	must(t, err)
	// The peer's 40 KiB WRITE with immediate: 40 packets at MTU 1024.
	fill(b.mr.Bytes()[:40<<10], 3)
	postRecv(t, a, RecvWR{ID: 1})
	postSend(t, b, SendWR{ID: 2, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGList: sge(b.mr, 0, 40<<10), RemoteAddr: rmr.Addr() + 100, RKey: rmr.RKey()})
	wc := poll(t, a.rcq, 1, 5*time.Second)[0]
	mem.mu.Lock()
	got := append([]byte(nil), mem.b[100:100+40<<10]...)
	vecs, pieces, writes := mem.vecs, mem.vecPieces, mem.writes
	mem.mu.Unlock()
	if wc.Status != WCSuccess || !bytes.Equal(got, b.mr.Bytes()[:40<<10]) {
		t.Fatalf("WRITE into another process's memory: %+v, data equal %v", wc, bytes.Equal(got, b.mr.Bytes()[:40<<10]))
	}
	if writes != 0 || pieces != 40 || vecs >= 40 {
		t.Fatalf("%d single writes, %d vector writes of %d pieces for 40 packets", writes, vecs, pieces)
	}
	// A READ into it, and a WRITE from it.
	fill(b.mr.Bytes()[:8000], 5)
	settle(t, b.dev)
	postSend(t, a, SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGList: []SGE{{Addr: rmr.Addr() + 50000, Length: 8000, LKey: rmr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("READ into remote memory: %+v", wc)
	}
	mem.mu.Lock()
	equal := bytes.Equal(mem.b[50000:58000], b.mr.Bytes()[:8000])
	mem.mu.Unlock()
	if !equal {
		t.Fatal("READ into remote memory: data differs")
	}
	// The capture sees those frames sealed: they decode, ICRC included.
	var capMu sync.Mutex
	var captured int // frames, resends included (a loaded machine's timer may resend)
	psns := map[uint32]bool{}
	var capErr error
	a.dev.SetCapture(func(frame []byte, outbound bool) {
		var p wire.Packet
		capMu.Lock()
		defer capMu.Unlock()
		if err := wire.Decode(frame, &p); err != nil && capErr == nil {
			capErr = err
		}
		if outbound && p.BTH.Opcode != wire.RCAck {
			captured++
			psns[p.BTH.PSN] = true
		}
	})
	postSend(t, a, SendWR{ID: 4, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: []SGE{{Addr: rmr.Addr() + 50000, Length: 8000, LKey: rmr.LKey()}},
		RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("WRITE from remote memory: %+v", wc)
	}
	settle(t, b.dev)
	if !bytes.Equal(b.mr.Bytes()[20000:28000], b.mr.Bytes()[:8000]) {
		t.Fatal("WRITE from remote memory: data differs")
	}
	a.dev.SetCapture(nil)
	settle(t, a.dev)
	capMu.Lock()
	if len(psns) != 8 || capErr != nil {
		t.Fatalf("captured %d WRITE frames of %d PSNs (want 8), decode error %v", captured, len(psns), capErr)
	}
	sent := captured
	capMu.Unlock()
	mem.mu.Lock()
	reads, readVecs, readPcs := mem.reads, mem.readVecs, mem.readPcs
	mem.mu.Unlock()
	// Every frame sent, a resend too, read its payload once, in batches.
	if reads != 0 || readPcs != sent || readVecs >= sent {
		t.Fatalf("%d single reads, %d vector reads of %d pieces for %d packets sent", reads, readVecs, readPcs, sent)
	}
}

// A send WQE's slot is free before its completion is visible: a client that
// sees the completion and posts at once finds room, as ibverbs promises
// (ibv_rc_pingpong keeps one send in flight on a queue of one). The CQ's
// notification runs on the engine right after each completion is
// published: the send ring must count it freed by then.
func TestSharedSlotFreedBeforeCompletion(t *testing.T) {
	la, lb := memlink.NewPair(4096 + 200)
	var a *sharedNode
	var mu sync.Mutex
	var late []string
	a = newSharedNodeNotify(t, newDevice(t, la, macA, ipA, 4096), 1<<16, func() {
		if done, free := a.cqr.Producer(), a.sq.Consumer(); free < done {
			mu.Lock()
			late = append(late, fmt.Sprintf("%d completions visible, %d send slots freed", done, free))
			mu.Unlock()
		}
		a.cqr.Aux().Store(uverbs.NotifyAny) // for the next one
	})
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
	connect(t, a.node, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
	a.cqr.Aux().Store(uverbs.NotifyAny)
	const n = 16
	for i := range n {
		a.post(uverbs.SendWQE{WRID: uint64(i), Opcode: uint8(WRRDMAWrite), SendFlags: uint8(SendSignaled), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			[]uverbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, nil)
	}
	for i := range n {
		if c := a.cqe(t); c.WRID != uint64(i) || c.Status != uint8(WCSuccess) {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(late) > 0 {
		t.Fatalf("completions published before their slots were freed: %v", late)
	}
}

// A shared SRQ's slot is free before the completion of the receive that
// took it is visible, as a QP's own rings' are
// (TestSharedSlotFreedBeforeCompletion): a client that polls a receive
// completion and re-posts into its full SRQ at once must find room. The
// CQ's notification runs on the engine right after each completion is
// published: the SRQ's ring must count the receive freed by then. With two
// engines, QPs on both retire receives of the one SRQ.
func TestSharedSRQSlotFreedBeforeCompletion(t *testing.T) {
	for _, engines := range []int{1, 2} {
		t.Run(fmt.Sprintf("engines=%d", engines), func(t *testing.T) {
			var da, db *Device
			if engines == 1 {
				la, lb := memlink.NewPair(4096 + 200)
				da, db = newDevice(t, la, macA, ipA, 4096), newDevice(t, lb, macB, ipB, 4096)
			} else {
				da, db = twoQueueDevices(t, false)
			}
			const slots, size, perQP, maxQPs = 8, 64, 24, 64
			ring := newRing(t, slots, uverbs.RecvSlotSize(1))
			cqr := newRing(t, 64, uverbs.CQESize)
			var mu sync.Mutex
			var late []string
			pd, err := da.AllocPD()
			must(t, err)
			cq, err := da.CreateSharedCQ(64, cqr, func() {
				if done, free := cqr.Producer(), ring.Consumer(); int32(free-done) < 0 {
					mu.Lock()
					late = append(late, fmt.Sprintf("%d receive completions visible, %d SRQ slots freed", done, free))
					mu.Unlock()
				}
				cqr.Aux().Store(uverbs.NotifyAny) // for the next one
			})
			must(t, err)
			srq, err := pd.CreateSharedSRQ(SRQInitAttr{MaxWR: slots, MaxSGE: 1}, ring)
			must(t, err)
			// Each receive has its own buffer: the engines complete them
			// out of order.
			mr, err := pd.AllocMR((slots+maxQPs*perQP)*size, AccessLocalWrite)
			must(t, err)
			post := func() {
				p := ring.Producer()
				uverbs.PutRecvWQE(ring.Slot(p), uint64(p), []uverbs.SGE{{Addr: mr.Addr() + uint64(p*size), Length: size, LKey: mr.LKey()}})
				ring.SetProducer(p + 1)
				da.Wake()
			}
			for range slots {
				post()
			}

			// QPs of a on the SRQ, each facing a sender of b; with two
			// engines, pairs are added until both of a's engines serve some.
			b := newNode(t, db, 4096)
			var senders []*node
			served := map[int]bool{}
			for len(senders) < 2 || engines == 2 && len(served) < 2 && len(senders) < maxQPs {
				a := &node{dev: da, pd: pd, scq: cq, rcq: cq, mr: mr}
				a.qp, err = pd.CreateSharedQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq,
					Cap: QPCap{MaxSendWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}},
					newRing(t, 16, uverbs.SendSlotSize(1, 0)), newRing(t, 1, uverbs.RecvSlotSize(1)), nil)
				must(t, err)
				s := *b
				s.qp, err = b.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: b.rcq,
					Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
				must(t, err)
				connect(t, a, &s, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
				served[tqp(a.qp).Queue()] = true
				senders = append(senders, &s)
			}
			if len(served) != engines {
				t.Fatalf("the SRQ's QPs are served by %d engines, want %d", len(served), engines)
			}

			cqr.Aux().Store(uverbs.NotifyAny)
			for _, s := range senders {
				for range perQP {
					postSend(t, s, SendWR{Opcode: WRSend, SGList: sge(s.mr, 0, size)})
				}
			}
			total := len(senders) * perQP
			for i := range total {
				deadline := time.Now().Add(10 * time.Second)
				for cqr.Producer() == cqr.Consumer() {
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d receive completions", i, total)
					}
					time.Sleep(20 * time.Microsecond)
				}
				var c uverbs.CQE
				uverbs.CQEOf(cqr.Slot(cqr.Consumer()), &c)
				cqr.SetConsumer(cqr.Consumer() + 1)
				if WCStatus(c.Status) != WCSuccess || WCOpcode(c.Opcode) != WCRecv || c.ByteLen != size {
					t.Fatalf("receive completion %d: %+v", i, c)
				}
				// The client re-posts at once, as ibverbs lets it.
				if used := ring.Producer() - ring.Consumer(); used >= slots {
					t.Fatalf("receive completion %d polled, yet the SRQ ring holds %d of %d", i, used, slots)
				}
				post()
			}
			settle(t, da)
			if got := ring.Consumer(); got != uint32(total) {
				t.Fatalf("SRQ consumer index %d after %d receives", got, total)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(late) > 0 {
				t.Fatalf("%d receive completions published before their SRQ slots were freed, the first: %s", len(late), late[0])
			}
		})
	}
}

// TestDaemonSideOnAttachedDevice: what only a daemon's own device does
// (rings shared with clients, another process's memory) is ENOTSUP on a
// device attached to a daemon, whose engines are the daemon's.
func TestDaemonSideOnAttachedDevice(t *testing.T) {
	d := &Device{ops: &attached.Device{}} // attached: the provider refuses before any request reaches the daemon
	pd := &PD{dev: d, ops: &attached.PD{}}
	ring := func() *uverbs.Ring { return newRing(t, 16, uverbs.SendSlotSize(1, 0)) }
	attr := QPInitAttr{Type: QPTypeRC, SendCQ: &CQ{dev: d}, RecvCQ: &CQ{dev: d}, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}
	for _, tc := range []struct {
		what string
		err  func() error
	}{
		{"CreateSharedCQ", func() error { _, err := d.CreateSharedCQ(4, newRing(t, 16, uverbs.CQESize), nil); return err }},
		{"CreateSharedQP", func() error { _, err := pd.CreateSharedQP(attr, ring(), ring(), nil); return err }},
		{"CreateSharedSRQ", func() error { _, err := pd.CreateSharedSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1}, ring()); return err }},
		{"RegProcMR", func() error {
			_, err := pd.RegProcMR(&fakeProcMem{b: make([]byte, 64)}, 0x1000, 64, AccessLocalWrite)
			return err
		}},
	} {
		if err := tc.err(); !errors.Is(err, ErrNotSup) {
			t.Errorf("%s on an attached device: %v, want ENOTSUP", tc.what, err)
		}
	}
}
