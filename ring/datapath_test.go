package ring

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestDescLayoutMatchesKernel(t *testing.T) {
	if unsafe.Sizeof(Desc{}) != unsafe.Sizeof(unix.XDPDesc{}) || unsafe.Offsetof(Desc{}.Len) != unsafe.Offsetof(unix.XDPDesc{}.Len) ||
		unsafe.Offsetof(Desc{}.Options) != unsafe.Offsetof(unix.XDPDesc{}.Options) {
		t.Fatalf("Desc layout differs from struct xdp_desc: size %d", unsafe.Sizeof(Desc{}))
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"chunk 2048", Config{ChunkSize: 2048}, true},
		{"chunk 8192", Config{ChunkSize: 8192}, false},
		{"chunk 3000", Config{ChunkSize: 3000}, false},
		{"chunk 1024", Config{ChunkSize: 1024}, false},
		{"headroom", Config{Headroom: 512}, true},
		{"headroom too big", Config{Headroom: 4096 - 256 - 100}, false},
		{"negative headroom", Config{Headroom: -1}, false},
		{"negative frames", Config{RXFrames: -1}, false},
		{"big TX frame without SG", Config{TXFrameSize: 4166}, false},
		{"big TX frame with SG", Config{TXFrameSize: 4166, MultiBuffer: true}, true},
		{"TX frame beyond kernel chain limit", Config{TXFrameSize: 18 * 4096, MultiBuffer: true}, false},
		{"bad mode", Config{Mode: 7}, false},
	} {
		_, err := tc.cfg.withDefaults().geometry()
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v does not wrap ErrConfig", tc.name, err)
		}
	}
}

func TestGeometry(t *testing.T) {
	g, err := Config{RXFrames: 1000, TXFrames: 300, MultiBuffer: true}.withDefaults().geometry()
	if err != nil {
		t.Fatal(err)
	}
	// 2-chunk TX buffers for 8 KiB frames; rings rounded up to powers of two.
	if g.slotChunks != 2 || g.txChunks != 600 || g.fillSize != 1024 || g.rxSize != 1024 || g.txSize != 1024 || g.compSize != 1024 {
		t.Fatalf("geometry %+v", g)
	}
	if g.umemSize != 1600*4096 {
		t.Fatalf("UMEM size %d", g.umemSize)
	}
	for n, want := range map[uint32]uint32{1: 1, 2: 2, 3: 4, 1024: 1024, 1025: 2048} {
		if got := pow2(n); got != want {
			t.Errorf("pow2(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestRXDescriptorBoundsCheck feeds the bounds check every kind of
// descriptor a broken kernel could write.
func TestRXDescriptorBoundsCheck(t *testing.T) {
	k := newSim(t, Config{RXFrames: 8, TXFrames: 4})
	size, chunk := k.g.umemSize, k.g.chunkSize
	for _, tc := range []struct {
		name string
		d    Desc
		ok   bool
	}{
		{"first frame", Desc{Addr: 256, Len: 100}, true},
		{"whole chunk", Desc{Addr: 0, Len: uint32(chunk)}, true},
		{"last RX frame end", Desc{Addr: 7*chunk + 256, Len: uint32(chunk - 256)}, true},
		{"crosses chunk end", Desc{Addr: 256, Len: uint32(chunk - 255)}, false},
		{"at UMEM end", Desc{Addr: size, Len: 1}, false},
		{"beyond UMEM", Desc{Addr: size + 4096, Len: 10}, false},
		{"huge address", Desc{Addr: 1 << 63, Len: 10}, false},
		{"address wraps with length", Desc{Addr: ^uint64(0) - 5, Len: 10}, false},
		{"huge length", Desc{Addr: 256, Len: ^uint32(0)}, false},
		{"TX region", Desc{Addr: 8*chunk + 256, Len: 10}, false},
	} {
		_, ok := k.dp.frames.rxFrameOf(tc.d)
		if ok != tc.ok {
			t.Errorf("%s: rxFrameOf(%+v) ok=%v, want %v", tc.name, tc.d, ok, tc.ok)
		}
		_, err := k.dp.bytes(tc.d)
		if tc.name != "TX region" && (err == nil) != tc.ok {
			t.Errorf("%s: bytes(%+v) err=%v", tc.name, tc.d, err)
		}
		if err != nil && !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("%s: %v does not wrap ErrOutOfBounds", tc.name, err)
		}
	}
}

// TestHostileRXDescriptors: descriptors the kernel should never produce are
// counted and dropped with their packet, never dereferenced, and the frames
// of a dropped chain return to the free list.
func TestHostileRXDescriptors(t *testing.T) {
	chunk := uint64(4096)
	for _, tc := range []struct {
		name        string
		descs       func(k *simKernel) []Desc
		invalid     uint64
		freed       int // valid frames of dropped chains returned to the free list
		packetsLeft int // good packets delivered
	}{
		{"outside UMEM", func(k *simKernel) []Desc {
			return []Desc{{Addr: k.g.umemSize + 256, Len: 64}}
		}, 1, 0, 0},
		{"crossing a chunk", func(k *simKernel) []Desc {
			return []Desc{{Addr: k.avail[0] + 4000, Len: 200}}
		}, 1, 0, 0},
		{"into TX buffers", func(k *simKernel) []Desc {
			return []Desc{{Addr: uint64(k.g.rxFrames)*chunk + 256, Len: 64}}
		}, 1, 0, 0},
		{"frame delivered twice", func(k *simKernel) []Desc {
			a := k.avail[0] + 256
			return []Desc{{Addr: a, Len: 64}, {Addr: a, Len: 64}}
		}, 1, 0, 1},
		{"invalid segment inside a chain", func(k *simKernel) []Desc {
			return []Desc{
				{Addr: k.avail[0] + 256, Len: 3840, Options: unix.XDP_PKT_CONTD},
				{Addr: 1 << 40, Len: 10, Options: unix.XDP_PKT_CONTD},
				{Addr: k.avail[1] + 256, Len: 100},
				{Addr: k.avail[2] + 256, Len: 100}, // a good packet after it
			}
		}, 1, 2, 1},
		{"chain longer than MaxSegments", func(k *simKernel) []Desc {
			var ds []Desc
			for i := range MaxSegments + 1 {
				opt := uint32(unix.XDP_PKT_CONTD)
				if i == MaxSegments {
					opt = 0
				}
				ds = append(ds, Desc{Addr: k.avail[i] + 256, Len: 100, Options: opt})
			}
			return ds
		}, 0, MaxSegments + 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newSim(t, Config{RXFrames: 32, TXFrames: 4, MultiBuffer: true})
			k.dp.refill()
			k.consumeFill()
			descs := tc.descs(k)
			// Frames named by valid descriptors leave the kernel's hands.
			used := map[uint64]bool{}
			for _, d := range descs {
				used[d.Addr&^(chunk-1)] = true
			}
			k.writeRX(descs...)
			before := k.dp.frames.stats()
			pkts := make([]Packet, 8)
			n := k.dp.receive(pkts)
			if n != tc.packetsLeft {
				t.Fatalf("received %d packets, want %d", n, tc.packetsLeft)
			}
			if k.dp.cnt.RXInvalidDescs != tc.invalid {
				t.Fatalf("RXInvalidDescs = %d, want %d", k.dp.cnt.RXInvalidDescs, tc.invalid)
			}
			if got := k.dp.frames.stats().RXFree - before.RXFree; got != tc.freed {
				t.Fatalf("%d frames freed, want %d", got, tc.freed)
			}
			if err := k.dp.frames.check(); err != nil {
				t.Fatal(err)
			}
			if got := atomic.LoadUint32(k.dp.rx.consumer); got != uint32(len(descs)) {
				t.Fatalf("consumed %d descriptors, want %d", got, len(descs))
			}
			if err := k.dp.release(pkts[:n]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestIncompleteChainWaits(t *testing.T) {
	k := newSim(t, Config{RXFrames: 8, TXFrames: 4, MultiBuffer: true})
	k.dp.refill()
	k.consumeFill()
	a0, a1 := k.avail[0], k.avail[1]
	k.writeRX(Desc{Addr: a0 + 256, Len: 3840, Options: unix.XDP_PKT_CONTD})
	pkts := make([]Packet, 4)
	if n := k.dp.receive(pkts); n != 0 {
		t.Fatalf("received %d packets from half a chain", n)
	}
	if c := atomic.LoadUint32(k.dp.rx.consumer); c != 0 {
		t.Fatalf("consumer moved to %d over an unfinished chain", c)
	}
	k.writeRX(Desc{Addr: a1 + 256, Len: 326})
	if n := k.dp.receive(pkts); n != 1 || pkts[0].Segments() != 2 || pkts[0].Len() != 4166 {
		t.Fatalf("got %d packets, first %d segments %d bytes", 1, pkts[0].Segments(), pkts[0].Len())
	}
}

func TestUnterminatedChainFillingRing(t *testing.T) {
	k := newSim(t, Config{RXFrames: 8, TXFrames: 4, MultiBuffer: true})
	k.dp.refill()
	k.consumeFill()
	var ds []Desc
	for _, a := range k.avail {
		ds = append(ds, Desc{Addr: a + 256, Len: 100, Options: unix.XDP_PKT_CONTD})
	}
	k.writeRX(ds...)
	pkts := make([]Packet, 4)
	if n := k.dp.receive(pkts); n != 0 {
		t.Fatalf("received %d packets", n)
	}
	st := k.dp.frames.stats()
	if st.RXFree != 8 || k.dp.cnt.RXDroppedChains != 1 {
		t.Fatalf("stats %+v counters %+v", st, k.dp.cnt)
	}
	if err := k.dp.frames.check(); err != nil {
		t.Fatal(err)
	}
}

func TestHostileIndices(t *testing.T) {
	k := newSim(t, Config{RXFrames: 8, TXFrames: 4})
	k.dp.refill()
	k.consumeFill()
	// A producer index far ahead of anything written: at most one ring's
	// worth is looked at, and every entry is bounds-checked (all zero here:
	// address 0 len 0 is frame 0, which the kernel does hold once).
	atomic.StoreUint32(k.dp.rx.producer, 1<<30)
	pkts := make([]Packet, 64)
	n := k.dp.receive(pkts)
	if n > 1 || k.dp.cnt.RXDescs != uint64(k.dp.rx.size) {
		t.Fatalf("received %d packets from %d descriptors", n, k.dp.cnt.RXDescs)
	}
	if err := k.dp.frames.check(); err != nil {
		t.Fatal(err)
	}
	// A consumer index ahead of our producer: no room claimed.
	atomic.StoreUint32(k.dp.fill.consumer, 1<<30)
	if got := k.dp.fill.free(1); got != 0 {
		t.Fatalf("fill ring free %d with a bogus consumer index", got)
	}
	// Completions for addresses never submitted change nothing.
	before := k.dp.frames.stats()
	k.writeCompletion(0, k.g.umemSize, uint64(k.g.rxFrames)*k.g.chunkSize, 1<<50)
	if freed := k.dp.complete(); freed != 0 || k.dp.cnt.TXInvalidCompl != 4 {
		t.Fatalf("freed %d, invalid %d", freed, k.dp.cnt.TXInvalidCompl)
	}
	if k.dp.frames.stats() != before {
		t.Fatal("bogus completions changed the accounting")
	}
}

func TestTXChain(t *testing.T) {
	k := newSim(t, Config{RXFrames: 4, TXFrames: 4, MultiBuffer: true, TXFrameSize: 3 * 4096})
	frames := make([]TXFrame, 4)
	if n := k.dp.allocTX(frames); n != 4 {
		t.Fatalf("allocated %d", n)
	}
	if len(frames[0].Buf()) != 3*4096 {
		t.Fatalf("buffer of %d bytes", len(frames[0].Buf()))
	}
	lens := []int{4166, 4096, 60, 3 * 4096}
	for i := range frames {
		frames[i].Len = lens[i]
		for j := range lens[i] {
			frames[i].Buf()[j] = byte(i + j)
		}
	}
	base := frames[0].Buf()
	if n, err := k.dp.submit(frames); n != 4 || err != nil {
		t.Fatalf("submitted %d: %v", n, err)
	}
	r := &k.dp.tx
	d0, d1 := r.entries[0], r.entries[1]
	start := uint64(uintptr(unsafe.Pointer(&base[0])) - uintptr(unsafe.Pointer(&k.dp.umem[0])))
	if d0 != (Desc{Addr: start, Len: 4096, Options: unix.XDP_PKT_CONTD}) || d1 != (Desc{Addr: start + 4096, Len: 70}) {
		t.Fatalf("4166-byte frame as %+v %+v", d0, d1)
	}
	if got := atomic.LoadUint32(r.producer); got != 2+1+1+3 {
		t.Fatalf("%d descriptors published", got)
	}
	k.consumeTX()
	for i, f := range k.sent {
		if len(f) != lens[i] {
			t.Fatalf("frame %d: %d bytes sent", i, len(f))
		}
		for j, c := range f {
			if c != byte(i+j) {
				t.Fatalf("frame %d byte %d differs", i, j)
			}
		}
	}
	k.completeTX(4)
	if freed := k.dp.complete(); freed != 4 {
		t.Fatalf("%d freed", freed)
	}
	if st := k.dp.frames.stats(); st.TXFree != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSubmitErrors(t *testing.T) {
	k := newSim(t, Config{RXFrames: 4, TXFrames: 4})
	frames := make([]TXFrame, 3)
	k.dp.allocTX(frames)
	frames[0].Len = 100
	frames[1].Len = 4097 // longer than the buffer: refused, stays held
	frames[2].Len = 100
	n, err := k.dp.submit(frames)
	if n != 1 || !errors.Is(err, ErrFrameLength) {
		t.Fatalf("submit = %d, %v", n, err)
	}
	if st := k.dp.frames.stats(); st.TXHeld != 2 || st.TXKernel != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The queued frame was zeroed: submitting it again is a double release.
	if n, err := k.dp.submit(frames[:1]); n != 0 || !errors.Is(err, ErrDoubleRelease) {
		t.Fatalf("resubmit = %d, %v", n, err)
	}
	frames[1].Len = 0
	if _, err := k.dp.submit(frames[1:2]); !errors.Is(err, ErrFrameLength) {
		t.Fatalf("zero length: %v", err)
	}
	stale := frames[1]
	if err := k.dp.freeTX(frames[1:]); err != nil {
		t.Fatal(err)
	}
	if err := k.dp.freeTX([]TXFrame{stale}); !errors.Is(err, ErrDoubleRelease) {
		t.Fatalf("stale free: %v", err)
	}
	// The stale handle's buffer is handed out again: the old copy must
	// still be refused (tokens, not just states).
	again := make([]TXFrame, 2)
	k.dp.allocTX(again)
	stale.Len = 10
	if _, err := k.dp.submit([]TXFrame{stale}); !errors.Is(err, ErrDoubleRelease) {
		t.Fatalf("stale submit after reuse: %v", err)
	}
	if err := k.dp.frames.check(); err != nil {
		t.Fatal(err)
	}
}

func TestPacketBytes(t *testing.T) {
	k := newSim(t, Config{RXFrames: 8, TXFrames: 2, MultiBuffer: true})
	k.dp.refill()
	k.consumeFill()
	k.deliver(1000)
	k.deliver(4166)
	pkts := make([]Packet, 4)
	if n := k.dp.receive(pkts); n != 2 {
		t.Fatalf("received %d", n)
	}
	one, err := pkts[0].Bytes(nil)
	if err != nil || len(one) != 1000 {
		t.Fatalf("single segment: %d bytes, %v", len(one), err)
	}
	if &one[0] != &k.dp.umem[pkts[0].Desc(0).Addr] {
		t.Fatal("single-segment packet was copied")
	}
	if pkts[1].Segments() != 2 || pkts[1].Desc(0).Len != 3840 || pkts[1].Desc(1).Len != 326 {
		t.Fatalf("4166-byte packet as %+v %+v", pkts[1].Desc(0), pkts[1].Desc(1))
	}
	if _, err := pkts[1].Bytes(make([]byte, 4165)); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("short scratch: %v", err)
	}
	scratch := make([]byte, 5000)
	k.checkPacket(&pkts[0], scratch)
	k.checkPacket(&pkts[1], scratch)
	whole, _ := pkts[1].Bytes(scratch)
	if !bytes.Equal(whole[:3840], pkts[1].Segment(0)) || !bytes.Equal(whole[3840:], pkts[1].Segment(1)) {
		t.Fatal("linearized chain differs from its segments")
	}
}

func TestDoubleRelease(t *testing.T) {
	k := newSim(t, Config{RXFrames: 4, TXFrames: 2})
	k.dp.refill()
	k.consumeFill()
	k.deliver(100)
	pkts := make([]Packet, 1)
	k.dp.receive(pkts)
	stale := pkts[0]
	if err := k.dp.release(pkts); err != nil {
		t.Fatal(err)
	}
	if err := k.dp.release(pkts); !errors.Is(err, ErrDoubleRelease) {
		t.Fatalf("releasing a zeroed packet: %v", err)
	}
	before := k.dp.frames.stats()
	if err := k.dp.release([]Packet{stale}); !errors.Is(err, ErrDoubleRelease) {
		t.Fatalf("releasing a stale copy: %v", err)
	}
	// Recycle the same frame through the kernel and hand it out again: the
	// stale copy still names it, and must still be refused.
	k.dp.refill()
	k.consumeFill()
	for range 4 {
		k.deliver(100)
	}
	again := make([]Packet, 4)
	if n := k.dp.receive(again); n != 4 {
		t.Fatalf("received %d", n)
	}
	if err := k.dp.release([]Packet{stale}); !errors.Is(err, ErrDoubleRelease) {
		t.Fatalf("releasing a stale copy after reuse: %v", err)
	}
	if st := k.dp.frames.stats(); st.RXHeld != 4 || st.RXFree != before.RXFree-1 {
		t.Fatalf("stats %+v (before %+v)", st, before)
	}
	if err := k.dp.frames.check(); err != nil {
		t.Fatal(err)
	}
}

// TestRandomOperations is the property test: random interleavings of every
// application and kernel operation, including double releases and bad
// lengths, never lose, duplicate or corrupt a frame; received and sent
// bytes are exact; after draining, every frame is back where it started.
func TestRandomOperations(t *testing.T) {
	configs := []Config{
		{RXFrames: 16, TXFrames: 8},
		{RXFrames: 16, TXFrames: 8, MultiBuffer: true, ChunkSize: 2048, TXFrameSize: 3 * 2048, Headroom: 64},
		{RXFrames: 5, TXFrames: 3, MultiBuffer: true},
	}
	for ci, cfg := range configs {
		for seed := range 15 {
			t.Run(fmt.Sprintf("cfg%d/seed%d", ci, seed), func(t *testing.T) {
				runRandomOperations(t, cfg, uint64(seed), 3000)
			})
		}
	}
}

func runRandomOperations(t *testing.T, cfg Config, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	k := newSim(t, cfg)
	k.dp.refill()
	initial := k.dp.frames.stats()
	maxRX := k.segSize()
	if cfg.MultiBuffer {
		maxRX = 4 * k.segSize()
	}
	var (
		held, stale     []Packet
		txHeld, txStale []TXFrame
		txWant          [][]byte
		txSeq           byte
		gotRX, gotTX    int
		pkts            = make([]Packet, 8)
		txBuf           = make([]TXFrame, 8)
		scratch         = make([]byte, 4*4096)
	)
	checkSent := func() {
		for len(k.sent) > 0 {
			if len(txWant) == 0 || !bytes.Equal(k.sent[0], txWant[0]) {
				t.Fatalf("kernel sent a frame the socket did not submit or with other bytes")
			}
			k.sent, txWant = k.sent[1:], txWant[1:]
		}
	}
	pick := func(n int) []int { // a random subset of [0, n), in random order
		idx := rng.Perm(n)
		return idx[:rng.IntN(n+1)]
	}
	for range steps {
		switch op := rng.IntN(13); op {
		case 0:
			k.consumeFill()
		case 1:
			k.deliver(1 + rng.IntN(maxRX))
		case 2:
			n := k.dp.receive(pkts[:1+rng.IntN(len(pkts))])
			for i := range pkts[:n] {
				k.checkPacket(&pkts[i], scratch)
				held = append(held, pkts[i])
				pkts[i] = Packet{} // the handle moved to held
			}
			gotRX += n
		case 3:
			if len(held) == 0 {
				continue
			}
			var batch, keep []Packet
			sel := map[int]bool{}
			for _, i := range pick(len(held)) {
				sel[i] = true
			}
			for i, p := range held {
				if sel[i] {
					batch = append(batch, p)
					stale = append(stale, p)
				} else {
					keep = append(keep, p)
				}
			}
			if err := k.dp.release(batch); err != nil {
				t.Fatal(err)
			}
			held = keep
		case 4:
			k.dp.refill()
		case 5:
			if len(stale) == 0 {
				continue
			}
			before := k.dp.frames.stats()
			p := stale[rng.IntN(len(stale))]
			if err := k.dp.release([]Packet{p}); !errors.Is(err, ErrDoubleRelease) {
				t.Fatalf("double release returned %v", err)
			}
			if k.dp.frames.stats() != before {
				t.Fatal("double release changed the accounting")
			}
		case 6:
			n := k.dp.allocTX(txBuf[:1+rng.IntN(len(txBuf))])
			txHeld = append(txHeld, txBuf[:n]...)
			clear(txBuf[:n]) // the handles moved to txHeld
		case 7:
			if len(txHeld) == 0 {
				continue
			}
			n := 1 + rng.IntN(len(txHeld))
			batch := append([]TXFrame(nil), txHeld[:n]...)
			var want [][]byte
			for i := range batch {
				f := &batch[i]
				f.Len = 1 + rng.IntN(len(f.Buf()))
				if rng.IntN(10) == 0 {
					f.Len = []int{0, -1, len(f.Buf()) + 1}[rng.IntN(3)]
				}
				txSeq++
				for j := range min(max(f.Len, 0), len(f.Buf())) {
					f.Buf()[j] = byte(j*13) + txSeq
				}
				if f.Len > 0 && f.Len <= len(f.Buf()) {
					want = append(want, append([]byte(nil), f.Buf()[:f.Len]...))
				}
			}
			copies := append([]TXFrame(nil), batch...)
			done, err := k.dp.submit(batch)
			if done < n && !errors.Is(err, ErrFrameLength) {
				t.Fatalf("submit stopped at %d of %d: %v", done, n, err)
			}
			txWant = append(txWant, want[:done]...)
			gotTX += done
			txStale = append(txStale, copies[:done]...)
			txHeld = append(txHeld[:0:0], txHeld[done:]...)
		case 8:
			if len(txHeld) == 0 {
				continue
			}
			n := 1 + rng.IntN(len(txHeld))
			txStale = append(txStale, txHeld[:n]...)
			if err := k.dp.freeTX(append([]TXFrame(nil), txHeld[:n]...)); err != nil {
				t.Fatal(err)
			}
			txHeld = append(txHeld[:0:0], txHeld[n:]...)
		case 9:
			if len(txStale) == 0 {
				continue
			}
			before := k.dp.frames.stats()
			f := txStale[rng.IntN(len(txStale))]
			f.Len = 1
			var err error
			if rng.IntN(2) == 0 {
				_, err = k.dp.submit([]TXFrame{f})
			} else {
				err = k.dp.freeTX([]TXFrame{f})
			}
			if !errors.Is(err, ErrDoubleRelease) {
				t.Fatalf("stale TX frame accepted: %v", err)
			}
			if k.dp.frames.stats() != before {
				t.Fatal("stale TX frame changed the accounting")
			}
		case 10:
			k.consumeTX()
			checkSent()
		case 11:
			k.completeTX(rng.IntN(4))
		case 12:
			k.dp.complete()
		}
		k.checkModel()
	}

	// Drain everything and come back to the starting point.
	if err := k.dp.release(held); err != nil {
		t.Fatal(err)
	}
	if err := k.dp.freeTX(txHeld); err != nil {
		t.Fatal(err)
	}
	k.consumeTX()
	checkSent()
	k.completeTX(len(k.inflight))
	k.dp.complete()
	for {
		n := k.dp.receive(pkts)
		if n == 0 {
			break
		}
		for i := range pkts[:n] {
			k.checkPacket(&pkts[i], scratch)
		}
		if err := k.dp.release(pkts[:n]); err != nil {
			t.Fatal(err)
		}
	}
	k.dp.refill()
	k.consumeFill()
	k.checkModel()
	if len(k.expected) != 0 || len(txWant) != 0 {
		t.Fatalf("%d delivered packets not received, %d submitted frames not sent", len(k.expected), len(txWant))
	}
	t.Logf("%d packets received, %d frames submitted", gotRX, gotTX)
	if gotRX < steps/100 || gotTX < steps/100 {
		t.Fatalf("only %d packets received and %d frames submitted in %d steps", gotRX, gotTX, steps)
	}
	if final := k.dp.frames.stats(); final != initial {
		t.Fatalf("after draining: %+v, at start: %+v", final, initial)
	}
}

// TestDatapathNoAllocs: a full receive/release/refill/alloc/submit/complete
// cycle allocates nothing.
func TestDatapathNoAllocs(t *testing.T) {
	k := newSim(t, Config{RXFrames: 64, TXFrames: 64, MultiBuffer: true})
	k.dp.refill()
	pkts := make([]Packet, 16)
	tx := make([]TXFrame, 16)
	received, sent := 0, 0
	cycle := func() {
		n := k.dp.receive(pkts)
		received += n
		_ = k.dp.release(pkts[:n])
		k.dp.refill()
		m := k.dp.allocTX(tx)
		for i := range tx[:m] {
			tx[i].Len = 4166
		}
		s, _ := k.dp.submit(tx[:m])
		sent += s
		k.dp.complete()
	}
	// The simulated kernel allocates; only the socket side is measured.
	kernel := func() {
		k.consumeFill()
		for range 16 {
			k.deliver(4166)
		}
		k.expected = k.expected[:0]
		k.consumeTX()
		k.sent = k.sent[:0]
		k.completeTX(len(k.inflight))
	}
	var total float64
	for range 20 {
		kernel()
		total += testing.AllocsPerRun(1, cycle)
	}
	if received == 0 || sent == 0 {
		t.Fatalf("cycles moved nothing: %d received, %d sent", received, sent)
	}
	if total != 0 {
		t.Fatalf("data path allocated %.0f times over 20 cycles", total)
	}
}

// TestHandlesNotOverwritten: reusing a slice whose handles were not handed
// back must not strand their frames.
func TestHandlesNotOverwritten(t *testing.T) {
	k := newSim(t, Config{RXFrames: 8, TXFrames: 4})
	k.dp.refill()
	k.consumeFill()
	for range 4 {
		k.deliver(100)
	}
	pkts := make([]Packet, 2)
	if n := k.dp.receive(pkts); n != 2 {
		t.Fatalf("received %d", n)
	}
	if n := k.dp.receive(pkts); n != 0 {
		t.Fatalf("received %d into unreleased packets", n)
	}
	if err := k.dp.release(pkts[1:]); err != nil {
		t.Fatal(err)
	}
	// pkts[0] still held: nothing goes into it, so nothing at all.
	if n := k.dp.receive(pkts); n != 0 {
		t.Fatalf("received %d", n)
	}
	if n := k.dp.receive(pkts[1:]); n != 1 {
		t.Fatalf("received %d into a released slot", n)
	}
	// A slot whose packet was released through a copy is free again.
	cp := pkts[0]
	if err := k.dp.release([]Packet{cp}); err != nil {
		t.Fatal(err)
	}
	if n := k.dp.receive(pkts[:1]); n != 1 {
		t.Fatalf("received %d into a slot released through a copy", n)
	}
	if st := k.dp.frames.stats(); st.RXHeld != 2 {
		t.Fatalf("stats %+v", st)
	}

	tx := make([]TXFrame, 3)
	if n := k.dp.allocTX(tx); n != 3 {
		t.Fatalf("allocated %d", n)
	}
	if n := k.dp.allocTX(tx); n != 0 {
		t.Fatalf("allocated %d over held buffers", n)
	}
	if err := k.dp.freeTX(tx[:1]); err != nil {
		t.Fatal(err)
	}
	if n := k.dp.allocTX(tx); n != 1 {
		t.Fatalf("allocated %d into one freed slot", n)
	}
	if err := k.dp.frames.check(); err != nil {
		t.Fatal(err)
	}
}
