package ring

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// checkSocket verifies the accounting and that the kernel rejected nothing.
func checkSocket(t *testing.T, s *Socket) {
	t.Helper()
	if err := s.CheckFrames(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Statistics()
	if err != nil {
		t.Fatal(err)
	}
	if st.RXInvalidDescs != 0 || st.TXInvalidDescs != 0 {
		t.Fatalf("kernel rejected descriptors: %+v", st)
	}
	c := s.Counters()
	if c.RXInvalidDescs != 0 || c.RXDroppedChains != 0 || c.TXInvalidCompl != 0 {
		t.Fatalf("socket counters %+v", c)
	}
}

// TestTransferAB sends frames of many sizes from a socket on a to a socket
// on b and checks every byte and the order.
func TestTransferAB(t *testing.T) {
	n := newVethNet(t, 1, 1500)
	a := n.open(n.a, 0, Config{Mode: ModeCopy, RXFrames: 256, TXFrames: 256})
	b := n.open(n.b, 0, Config{RXFrames: 512, TXFrames: 64})
	if b.Mode() != ModeCopy {
		t.Fatalf("veth socket in %v mode", b.Mode())
	}
	deadline := time.Now().Add(20 * time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	next := uint32(0)
	for range 20 {
		lens := make([]int, 1+rng.IntN(200))
		for i := range lens {
			lens[i] = 60 + rng.IntN(1514-60+1)
		}
		sendFrames(t, a, n.bMAC, n.aMAC, 1, next, lens, deadline)
		got := receiveFrames(t, b, len(lens), deadline)
		for i, r := range got {
			if r.seq != next+uint32(i) || r.length != lens[i] || r.segments != 1 {
				t.Fatalf("frame %d: seq %d, %d bytes in %d segments; want seq %d, %d bytes", i, r.seq, r.length, r.segments, next+uint32(i), lens[i])
			}
		}
		next += uint32(len(lens))
	}
	checkSocket(t, a)
	checkSocket(t, b)
	if c := a.Counters(); c.TXKicks == 0 || c.TXPackets != uint64(next) {
		t.Fatalf("sender counters %+v", c)
	}
}

// TestMultiBuffer: at MTU 4200 with XDP_USE_SG a 4166-byte frame (RoCE path
// MTU 4096) is sent as a 4096+70 descriptor chain and arrives as 3840+326
// bytes, the first segment with XDP_PKT_CONTD; reassembled it is exact.
func TestMultiBuffer(t *testing.T) {
	n := newVethNet(t, 1, 4200)
	cfg := Config{MultiBuffer: true, RXFrames: 256, TXFrames: 128}
	a := n.open(n.a, 0, cfg)
	b := n.open(n.b, 0, cfg)
	if !a.MultiBuffer() || b.RXSegmentSize() != 3840 {
		t.Fatalf("multi-buffer %v, RX segment %d", a.MultiBuffer(), b.RXSegmentSize())
	}
	deadline := time.Now().Add(20 * time.Second)
	lens := []int{4166, 60, 3840, 3841, 4096, 4166, 4200 + 14, 1000, 4166}
	for range 20 {
		lens = append(lens, 4166)
	}
	sendFrames(t, a, n.bMAC, n.aMAC, 7, 0, lens, deadline)
	got := receiveFrames(t, b, len(lens), deadline)
	for i, r := range got {
		wantSegs := (lens[i] + 3839) / 3840
		if r.seq != uint32(i) || r.length != lens[i] || r.segments != wantSegs {
			t.Fatalf("frame %d: seq %d, %d bytes in %d segments; want %d bytes in %d", i, r.seq, r.length, r.segments, lens[i], wantSegs)
		}
		if lens[i] == 4166 && (r.lens[0] != 3840 || r.lens[1] != 326) {
			t.Fatalf("4166-byte frame split %d+%d", r.lens[0], r.lens[1])
		}
	}
	if c := a.Counters(); c.TXDescs <= c.TXPackets {
		t.Fatalf("no TX chains were sent: %+v", c)
	}
	checkSocket(t, a)
	checkSocket(t, b)
	if err := drainTX(a, deadline); err != nil {
		t.Fatal(err)
	}
	if st := a.FrameStats(); st.TXFree != st.TXFrames {
		t.Fatalf("TX buffers not all back: %+v", st)
	}
}

// TestMultiBufferPacketHasContd checks the option bit itself on a real
// received chain.
func TestMultiBufferPacketHasContd(t *testing.T) {
	n := newVethNet(t, 1, 4200)
	cfg := Config{MultiBuffer: true, RXFrames: 64, TXFrames: 16}
	a := n.open(n.a, 0, cfg)
	b := n.open(n.b, 0, cfg)
	deadline := time.Now().Add(10 * time.Second)
	sendFrames(t, a, n.bMAC, n.aMAC, 0, 0, []int{4166}, deadline)
	pkts := make([]Packet, 8)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no frame received")
		}
		k := b.Receive(pkts)
		found := false
		for i := range pkts[:k] {
			p := &pkts[i]
			if p.Len() != 4166 {
				continue
			}
			found = true
			if p.Segments() != 2 || p.Desc(0).Options&unix.XDP_PKT_CONTD == 0 || p.Desc(1).Options&unix.XDP_PKT_CONTD != 0 {
				t.Fatalf("chain %+v %+v", p.Desc(0), p.Desc(1))
			}
			// Segment addresses: chunk base + kernel headroom.
			if p.Desc(0).Addr%4096 != KernelHeadroom {
				t.Fatalf("RX address %#x", p.Desc(0).Addr)
			}
		}
		if err := b.Release(pkts[:k]); err != nil {
			t.Fatal(err)
		}
		if found {
			break
		}
		if _, err := b.Wait(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNoMultiBufferDrops: a socket bound without XDP_USE_SG cannot take a
// frame longer than one chunk; the kernel drops it and counts rx_dropped.
func TestNoMultiBufferDrops(t *testing.T) {
	n := newVethNet(t, 1, 4200)
	a := n.open(n.a, 0, Config{MultiBuffer: true, RXFrames: 64, TXFrames: 64})
	b := n.open(n.b, 0, Config{RXFrames: 64, TXFrames: 16})
	deadline := time.Now().Add(10 * time.Second)
	sendFrames(t, a, n.bMAC, n.aMAC, 0, 0, []int{4166, 4166, 4166, 100}, deadline)
	got := receiveFrames(t, b, 1, deadline) // the 100-byte frame, after the others
	if got[0].seq != 3 {
		t.Fatalf("received frame %d", got[0].seq)
	}
	st, err := b.Statistics()
	if err != nil {
		t.Fatal(err)
	}
	if st.RXDropped < 3 {
		t.Fatalf("rx_dropped %d, want >= 3 (%+v)", st.RXDropped, st)
	}
}

// TestNeedWakeup: in copy mode the TX ring always asks for a wakeup and the
// kernel sends nothing until kicked; one kick sends at most the TX budget;
// the fill ring never asks for one, so Refill makes no system call.
func TestNeedWakeup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int
		want   int
	}{{"kernel default budget", -1, 32}, {"budget 256", 256, 256}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newVethNet(t, 1, 1500)
			a := n.open(n.a, 0, Config{RXFrames: 64, TXFrames: 512, TXBudget: tc.budget})
			b := n.open(n.b, 0, Config{RXFrames: 1024, TXFrames: 16})
			if a.TXBudget() != max(tc.budget, 0) {
				t.Fatalf("TX budget %d", a.TXBudget())
			}
			if !a.dp.tx.needWakeup() {
				t.Fatal("copy-mode TX ring does not ask for a wakeup")
			}
			tx := make([]TXFrame, 300)
			m := a.AllocTX(tx)
			for i := range tx[:m] {
				tx[i].Len = 64
				writeTestFrame(tx[i].Buf()[:64], n.bMAC, n.aMAC, 0, uint32(i))
			}
			if k, err := a.Submit(tx[:m]); k != 300 || err != nil {
				t.Fatalf("submit: %d, %v", k, err)
			}
			if a.TXPending() != 300 {
				t.Fatalf("kernel took %d descriptors without a kick", 300-a.TXPending())
			}
			if err := a.Kick(); err != nil {
				t.Fatal(err)
			}
			sent := 300 - a.TXPending()
			if sent != tc.want {
				t.Fatalf("one kick sent %d frames, want %d (budget %d)", sent, tc.want, a.TXBudget())
			}
			if a.Counters().TXKickRetries != 1 {
				t.Fatalf("a kick leaving frames behind must count as a retry (EAGAIN): %+v", a.Counters())
			}
			if err := flushTX(a, time.Now().Add(10*time.Second)); err != nil {
				t.Fatal(err)
			}
			receiveFrames(t, b, 300, time.Now().Add(10*time.Second))
			if c := b.Counters(); c.FillKicks != 0 {
				t.Fatalf("copy-mode fill ring was kicked: %+v", c)
			}
			// Nothing queued: Kick makes no system call.
			kicks := a.Counters().TXKicks
			if err := a.Kick(); err != nil || a.Counters().TXKicks != kicks {
				t.Fatalf("empty kick: %v, kicks %d -> %d", err, kicks, a.Counters().TXKicks)
			}
		})
	}
}

// TestConservation: thousands of frames of random sizes and batches, both
// directions; after draining, every frame is back where it started.
func TestConservation(t *testing.T) {
	n := newVethNet(t, 1, 4200)
	cfg := Config{MultiBuffer: true, RXFrames: 512, TXFrames: 256}
	a := n.open(n.a, 0, cfg)
	b := n.open(n.b, 0, cfg)
	startA, startB := a.FrameStats(), b.FrameStats()
	if startA.RXFill != startA.RXFrames || startA.TXFree != startA.TXFrames {
		t.Fatalf("start: %+v", startA)
	}
	deadline := time.Now().Add(60 * time.Second)
	rng := rand.New(rand.NewPCG(3, 4))
	seq := [2]uint32{}
	total := 0
	for total < 12000 {
		for dir, pair := range [][2]*Socket{{a, b}, {b, a}} {
			src, dst := pair[0], pair[1]
			srcMAC, dstMAC := n.aMAC, n.bMAC
			if dir == 1 {
				srcMAC, dstMAC = n.bMAC, n.aMAC
			}
			lens := make([]int, 1+rng.IntN(300))
			for i := range lens {
				lens[i] = 60 + rng.IntN(4214-60+1) // up to MTU 4200 + Ethernet header
			}
			sendFrames(t, src, dstMAC, srcMAC, byte(dir), seq[dir], lens, deadline)
			got := receiveFrames(t, dst, len(lens), deadline)
			for i, r := range got {
				if r.tag != byte(dir) || r.seq != seq[dir]+uint32(i) || r.length != lens[i] {
					t.Fatalf("dir %d frame %d: tag %d seq %d len %d, want seq %d len %d", dir, i, r.tag, r.seq, r.length, seq[dir]+uint32(i), lens[i])
				}
			}
			seq[dir] += uint32(len(lens))
			total += len(lens)
		}
	}
	for _, s := range []*Socket{a, b} {
		if err := drainTX(s, deadline); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Refill(); err != nil {
			t.Fatal(err)
		}
		checkSocket(t, s)
	}
	if a.FrameStats() != startA || b.FrameStats() != startB {
		t.Fatalf("after %d frames: a %+v (start %+v), b %+v (start %+v)", total, a.FrameStats(), startA, b.FrameStats(), startB)
	}
}

// TestCloseReopen: a queue can be rebound right after its socket closed
// (bind retries while the kernel still releases the old one), Close is
// idempotent and a closed socket refuses work.
func TestCloseReopen(t *testing.T) {
	n := newVethNet(t, 1, 1500)
	a := n.open(n.a, 0, Config{RXFrames: 64, TXFrames: 64})
	deadline := time.Now().Add(30 * time.Second)
	for i := range 5 {
		b, err := n.tryOpen(n.b, 0, Config{RXFrames: 64, TXFrames: 16})
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		t.Logf("open %d: %d bind retries", i, b.Counters().BindRetries)
		sendFrames(t, a, n.bMAC, n.aMAC, 0, uint32(i), []int{100}, deadline)
		if got := receiveFrames(t, b, 1, deadline); got[0].seq != uint32(i) {
			t.Fatalf("round %d received frame %d", i, got[0].seq)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		if b.Receive(make([]Packet, 1)) != 0 || b.AllocTX(make([]TXFrame, 1)) != 0 {
			t.Fatal("closed socket did work")
		}
		if _, err := b.Submit(nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("submit on closed socket: %v", err)
		}
		if _, err := b.Statistics(); !errors.Is(err, ErrClosed) {
			t.Fatalf("statistics on closed socket: %v", err)
		}
	}
}

// TestBindErrors: a second socket on a bound queue is refused (EBUSY, after
// a bounded retry), so is a queue the link does not have.
func TestBindErrors(t *testing.T) {
	n := newVethNet(t, 1, 1500)
	n.open(n.b, 0, Config{RXFrames: 16, TXFrames: 16})
	if s, err := n.tryOpen(n.b, 0, Config{RXFrames: 16, TXFrames: 16, BindRetry: 20 * time.Millisecond}); !errors.Is(err, unix.EBUSY) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("second socket on a bound queue: %v", err)
	}
	if s, err := n.tryOpen(n.b, 5, Config{RXFrames: 16, TXFrames: 16, Mode: ModeCopy}); !errors.Is(err, unix.EINVAL) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("socket on a missing queue: %v", err)
	}
}

// TestModes: veth has no zero-copy; ModeAuto falls back to copy mode and
// says why, ModeZeroCopy fails.
func TestModes(t *testing.T) {
	n := newVethNet(t, 1, 1500)
	s := n.open(n.b, 0, Config{RXFrames: 16, TXFrames: 16})
	if s.Mode() != ModeCopy || !errors.Is(s.ZeroCopyFallback(), unix.EOPNOTSUPP) {
		t.Fatalf("auto mode: %v, fallback reason %v", s.Mode(), s.ZeroCopyFallback())
	}
	if zc, err := s.ZeroCopy(); zc || err != nil {
		t.Fatalf("XDP_OPTIONS zero-copy=%v, %v", zc, err)
	}
	if _, err := n.tryOpen(n.a, 0, Config{RXFrames: 16, TXFrames: 16, Mode: ModeZeroCopy}); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("zero-copy on veth: %v", err)
	}
	c := n.open(n.a, 0, Config{RXFrames: 16, TXFrames: 16, Mode: ModeCopy})
	if c.Mode() != ModeCopy || c.ZeroCopyFallback() != nil {
		t.Fatalf("copy mode: %v, %v", c.Mode(), c.ZeroCopyFallback())
	}
}

// TestQueuePerSocket: on a two-queue veth one socket per queue; a frame
// sent on TX queue q of a arrives on RX queue q of b, so each socket of b
// sees exactly the frames of its queue.
func TestQueuePerSocket(t *testing.T) {
	n := newVethNet(t, 2, 1500)
	cfg := Config{RXFrames: 128, TXFrames: 128}
	var as, bs []*Socket
	for q := range 2 {
		as = append(as, n.open(n.a, q, cfg))
		bs = append(bs, n.open(n.b, q, cfg))
	}
	deadline := time.Now().Add(20 * time.Second)
	for round := range 3 {
		for q := range 2 {
			lens := make([]int, 50)
			for i := range lens {
				lens[i] = 100 + i
			}
			sendFrames(t, as[q], n.bMAC, n.aMAC, byte(q), uint32(round*50), lens, deadline)
		}
		for q := range 2 {
			for i, r := range receiveFrames(t, bs[q], 50, deadline) {
				if r.tag != byte(q) || r.seq != uint32(round*50+i) {
					t.Fatalf("queue %d got frame tag %d seq %d", q, r.tag, r.seq)
				}
			}
		}
	}
	for _, s := range append(as, bs...) {
		checkSocket(t, s)
	}
}

// TestOpenQueues opens sockets for every queue at once.
func TestOpenQueues(t *testing.T) {
	n := newVethNet(t, 2, 1500)
	var socks []*Socket
	err := n.do(func() error {
		var err error
		socks, err = OpenQueues(t.Context(), n.b, []int{0, 1}, Config{RXFrames: 16, TXFrames: 16})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for q, s := range socks {
		if s.Queue() != q || s.Ifindex() != n.b {
			t.Fatalf("socket %d bound to %d/%d", q, s.Ifindex(), s.Queue())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Queue 2 does not exist: the sockets already opened are closed again,
	// so queue 0 is free for the next socket. (The kernel lets go of a
	// closed socket's queue asynchronously: on a loaded machine that takes
	// more than the default 3 s of retries.)
	err = n.do(func() error {
		_, err := OpenQueues(t.Context(), n.b, []int{0, 2}, Config{RXFrames: 16, TXFrames: 16, Mode: ModeCopy, BindRetry: 15 * time.Second})
		return err
	})
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("OpenQueues with a missing queue: %v", err)
	}
	n.open(n.b, 0, Config{RXFrames: 16, TXFrames: 16, BindRetry: 15 * time.Second})
}

// TestHeadroom: UMEM headroom moves received data to chunk base + 256 +
// headroom and shrinks each RX segment by as much.
func TestHeadroom(t *testing.T) {
	n := newVethNet(t, 1, 4200)
	a := n.open(n.a, 0, Config{MultiBuffer: true, RXFrames: 32, TXFrames: 16})
	b := n.open(n.b, 0, Config{MultiBuffer: true, RXFrames: 32, TXFrames: 16, Headroom: 128})
	if b.RXSegmentSize() != 4096-256-128 {
		t.Fatalf("RX segment size %d", b.RXSegmentSize())
	}
	deadline := time.Now().Add(10 * time.Second)
	sendFrames(t, a, n.bMAC, n.aMAC, 0, 0, []int{4166}, deadline)
	pkts := make([]Packet, 8)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no frame received")
		}
		k := b.Receive(pkts)
		for i := range pkts[:k] {
			p := &pkts[i]
			if p.Len() != 4166 {
				continue
			}
			if p.Segments() != 2 || p.Desc(0).Len != 3712 || p.Desc(1).Len != 454 {
				t.Fatalf("4166 bytes as %+v %+v", p.Desc(0), p.Desc(1))
			}
			for j := range 2 {
				if off := p.Desc(j).Addr % 4096; off != 256+128 {
					t.Fatalf("segment %d at chunk offset %d", j, off)
				}
				seg, err := b.Bytes(p.Desc(j))
				if err != nil || len(seg) != int(p.Desc(j).Len) {
					t.Fatalf("Bytes(%+v): %d bytes, %v", p.Desc(j), len(seg), err)
				}
			}
			frame, err := p.Bytes(make([]byte, 4166))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, ok, err := parseTestFrame(frame); !ok || err != nil {
				t.Fatalf("frame content: ok=%v %v", ok, err)
			}
			return
		}
		if err := b.Release(pkts[:k]); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Wait(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}
