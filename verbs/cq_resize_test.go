package verbs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/uverbs"
)

// waitUnpolled waits until cq holds n completions, without taking any.
func waitUnpolled(t *testing.T, cq *CQ, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tcq(cq).Unpolled() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d completions in the CQ, want %d", tcq(cq).Unpolled(), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// writes posts signaled 64-byte WRITEs from a to b with IDs from, from+1, ...
func writes(t *testing.T, a, b *node, from, n int) {
	t.Helper()
	for i := range n {
		postSend(t, a, SendWR{ID: uint64(from + i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 64*i, 64),
			RemoteAddr: b.mr.Addr() + uint64(64*i), RKey: b.mr.RKey()})
	}
}

func wantIDs(t *testing.T, wcs []WorkCompletion, from int) {
	t.Helper()
	for i, wc := range wcs {
		if wc.Status != WCSuccess || wc.WRID != uint64(from+i) {
			t.Fatalf("completion %d: %+v, want WR %d", i, wc, from+i)
		}
	}
}

// Resize keeps the completions not yet polled, in order, as rxe's resize
// copies its queue: growing with completions pending, then more, then
// shrinking; a depth below what is pending, below 1 or past MaxCQE is
// EINVAL and changes nothing.
func TestResizeCQ(t *testing.T) {
	la, lb := memlink.NewPair(4096 + 200)
	a := newNode(t, newDevice(t, la, macA, ipA, 4096), 1<<16)
	b := newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
	cq, err := a.dev.CreateCQ(10)
	must(t, err)
	must(t, a.qp.Destroy())
	a.qp, err = a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: a.rcq, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})

	writes(t, a, b, 1, 10)
	waitUnpolled(t, cq, 10)
	wantIDs(t, poll(t, cq, 2, time.Second), 1)
	for _, depth := range []int{7, 0, -1, MaxCQE + 1} {
		if err := cq.Resize(depth); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Resize(%d) with 8 pending: %v, want EINVAL", depth, err)
		}
	}
	must(t, cq.Resize(12))
	writes(t, a, b, 11, 4) // 12 pending: more than the old ring held
	waitUnpolled(t, cq, 12)
	wantIDs(t, poll(t, cq, 12, time.Second), 3)

	must(t, cq.Resize(3))
	writes(t, a, b, 15, 3)
	waitUnpolled(t, cq, 3)
	wantIDs(t, poll(t, cq, 3, time.Second), 15)
	if cq.Overflowed() {
		t.Fatal("the CQ overflowed")
	}
}

// ResizeShared moves a shared CQ's unpolled completions to the client's new
// ring, in order, with its consumer index and notification request; the
// engines then write the new ring only. Shrinking below what is unpolled is
// EINVAL and leaves the old ring in use.
func TestResizeSharedCQ(t *testing.T) {
	a, b := sharedPair(t)
	post := func(from, n int) {
		for i := range n {
			postShared(t, a, b, uint64(from+i))
		}
	}
	produced := func(r *uverbs.Ring, n uint32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for r.Producer()-r.Consumer() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d completions in the ring, want %d", r.Producer()-r.Consumer(), n)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	post(1, 10)
	produced(a.cqr, 10)
	for range 3 {
		a.cqe(t) // 1, 2, 3
	}
	a.cqr.Aux().Store(uverbs.NotifySolicited)

	small := newRing(t, 4, uverbs.CQESize)
	if err := a.scq.ResizeShared(4, small); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shrinking to 4 with 7 unpolled: %v, want EINVAL", err)
	}
	big := newRing(t, 128, uverbs.CQESize)
	must(t, a.scq.ResizeShared(100, big))
	oldRing, old := a.cqr, ringBytes(a.cqr)
	if big.Consumer() != a.cqr.Consumer() || big.Producer() != a.cqr.Producer() || big.Aux().Load() != uverbs.NotifySolicited {
		t.Fatalf("new ring: consumer %d producer %d aux %d; old: %d %d", big.Consumer(), big.Producer(), big.Aux().Load(),
			a.cqr.Consumer(), a.cqr.Producer())
	}
	a.cqr = big
	post(11, 80) // 87 pending: more than the old ring's 64 slots
	produced(big, 87)
	for i := 4; i <= 90; i++ {
		if c := a.cqe(t); c.WRID != uint64(i) || WCStatus(c.Status) != WCSuccess {
			t.Fatalf("completion %+v, want WR %d", c, i)
		}
	}
	if s := a.node.scq; s.Overflowed() {
		t.Fatal("the CQ overflowed")
	}
	if !bytes.Equal(ringBytes(oldRing), old) {
		t.Fatal("the old ring changed after the resize")
	}
}

// postShared posts a signaled 64-byte WRITE to a's send ring once it has
// room.
func postShared(t *testing.T, a *sharedNode, b *node, id uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.sq.Producer()-a.sq.Consumer() >= a.sq.Slots() {
		if time.Now().After(deadline) {
			t.Fatal("the send ring stays full")
		}
		time.Sleep(50 * time.Microsecond)
	}
	a.post(uverbs.SendWQE{WRID: id, Opcode: uint8(WRRDMAWrite), SendFlags: uint8(SendSignaled),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}, []uverbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, nil)
}

func ringBytes(r *uverbs.Ring) []byte {
	var b []byte
	for i := range r.Slots() {
		b = append(b, r.Slot(i)...)
	}
	return b
}

// A client that races resizes with polls and writes any consumer index into
// either ring cannot make the engines write outside a ring, nor into the old
// ring once a resize returned: each resize either fails with EINVAL or moves
// the CQ to a ring whose old predecessor then stays as it was.
func TestHostileResizeSharedCQ(t *testing.T) {
	a, b := sharedPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex // guards cur
	cur := a.cqr
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the hostile poller
		defer wg.Done()
		r := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			ring := cur
			mu.Unlock()
			switch r.IntN(3) {
			case 0:
				ring.SetConsumer(r.Uint32())
			case 1:
				ring.SetConsumer(ring.Producer())
			default:
				ring.SetConsumer(ring.Producer() - uint32(r.IntN(200)))
			}
		}
	}()
	var retired [][]byte
	var rings []*uverbs.Ring
	moved, refused := 0, 0
	for i := range 200 {
		for j := range 4 {
			postShared(t, a, b, uint64(i*4+j))
		}
		slots := uint32(4) << rng.IntN(6)
		next := newRing(t, slots, uverbs.CQESize)
		mu.Lock()
		old := cur
		mu.Unlock()
		err := a.scq.ResizeShared(int(slots), next)
		switch {
		case err == nil:
			moved++
			mu.Lock()
			cur = next
			mu.Unlock()
			rings = append(rings, old)
			retired = append(retired, ringBytes(old))
		case errors.Is(err, ErrInvalid):
			refused++
		default:
			t.Fatal(err)
		}
	}
	settle(t, a.dev)
	close(stop)
	wg.Wait()
	for i, r := range rings {
		if !bytes.Equal(ringBytes(r), retired[i]) {
			t.Fatalf("retired ring %d written after its resize", i)
		}
	}
	if moved == 0 || refused == 0 {
		t.Fatalf("%d resizes moved the CQ, %d refused: the hostile client should have caused both", moved, refused)
	}
}

// Resizes while the engines complete lose no completion and repeat none:
// the client, holding off its own polls as ibv_resize_cq holds the CQ's
// lock, resizes with many completions unread while more arrive, and finds
// every WRITE's completion once, in order, in whichever ring is current.
func TestResizeSharedCQWhileCompleting(t *testing.T) {
	a, b := sharedPair(t)
	const total, window = 3000, 200
	var polled atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// No more WRITEs outstanding than the CQ holds, as an application
		// sizes its CQ for its queues.
		for i := uint64(0); i < total; {
			select {
			case <-stop:
				return
			default:
			}
			if i-polled.Load() >= window || a.sq.Producer()-a.sq.Consumer() >= a.sq.Slots() {
				time.Sleep(5 * time.Microsecond)
				continue
			}
			a.post(uverbs.SendWQE{WRID: i, Opcode: uint8(WRRDMAWrite), SendFlags: uint8(SendSignaled),
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}, []uverbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, nil)
			i++
		}
	}()
	defer func() { close(stop); <-done }()
	// Start from a ring that holds the window.
	first := newRing(t, 256, uverbs.CQESize)
	must(t, a.scq.ResizeShared(256, first))
	a.cqr = first
	next, resizes := uint64(0), 0
	deadline := time.Now().Add(60 * time.Second)
	for next < total {
		if time.Now().After(deadline) {
			t.Fatalf("%d completions of %d after %d resizes", next, total, resizes)
		}
		r := a.cqr
		// Let completions gather, then resize with them unread while
		// more arrive.
		if unread := r.Producer() - r.Consumer(); unread >= window/2 && uint64(resizes) < next/100+1 {
			slots := uint32(256) << (resizes % 2)
			ring := newRing(t, slots, uverbs.CQESize)
			must(t, a.scq.ResizeShared(int(slots), ring))
			a.cqr = ring
			resizes++
			continue
		}
		if r.Producer() == r.Consumer() || (r.Producer()-r.Consumer() < window/2 && time.Now().UnixNano()%4 != 0) {
			time.Sleep(5 * time.Microsecond)
			if r.Producer() == r.Consumer() {
				continue
			}
		}
		var c uverbs.CQE
		uverbs.CQEOf(r.Slot(r.Consumer()), &c)
		if c.WRID != next || WCStatus(c.Status) != WCSuccess {
			t.Fatalf("completion %+v after %d resizes, want WR %d", c, resizes, next)
		}
		r.SetConsumer(r.Consumer() + 1)
		next++
		polled.Store(next)
	}
	if resizes < 10 {
		t.Fatalf("%d resizes with completions unread: too few to mean anything", resizes)
	}
}
