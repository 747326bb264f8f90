package ring

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// simKernel plays the kernel's side of the four rings over Go memory, as
// the kernel does it: it consumes the fill and TX rings, produces the RX
// and completion rings, publishes with atomic stores. It checks what the
// socket writes with the kernel's own descriptor rules and remembers what
// it sent so the test can compare bytes.
type simKernel struct {
	t  testing.TB
	dp *datapath
	g  geometry

	avail    []uint64   // chunk addresses taken from the fill ring
	inflight [][]uint64 // TX chains taken, not yet completed
	expected []simPkt   // packets delivered on RX, in order, not yet received
	sent     [][]byte   // frames the socket transmitted, in order
	seq      uint32
}

type simPkt struct {
	seq    uint32
	length int
}

// simOffsets is a ring layout like the kernel's: indices on their own
// cache lines, entries after.
var simOffsets = unix.XDPRingOffset{Producer: 0, Consumer: 64, Flags: 128, Desc: 192}

func ringMem(n uint32, entry uint64) []byte {
	words := make([]uint64, (simOffsets.Desc+uint64(n)*entry)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

func newSim(t testing.TB, cfg Config) *simKernel {
	t.Helper()
	g, err := cfg.withDefaults().geometry()
	if err != nil {
		t.Fatal(err)
	}
	dp := &datapath{umem: make([]byte, g.umemSize), frames: newFrames(g)}
	for _, err := range []error{
		dp.fill.bind(ringMem(g.fillSize, 8), simOffsets, g.fillSize),
		dp.comp.bind(ringMem(g.compSize, 8), simOffsets, g.compSize),
		dp.rx.bind(ringMem(g.rxSize, 16), simOffsets, g.rxSize),
		dp.tx.bind(ringMem(g.txSize, 16), simOffsets, g.txSize),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return &simKernel{t: t, dp: dp, g: g}
}

// consumeFill takes every address the socket put on the fill ring.
func (k *simKernel) consumeFill() {
	r := &k.dp.fill
	prod := atomic.LoadUint32(r.producer)
	cons := atomic.LoadUint32(r.consumer)
	for ; cons != prod; cons++ {
		addr := r.entries[cons&r.mask]
		if addr >= k.g.umemSize || addr&(k.g.chunkSize-1) != 0 {
			k.t.Fatalf("fill ring entry %#x is not a chunk address", addr)
		}
		k.avail = append(k.avail, addr)
	}
	atomic.StoreUint32(r.consumer, cons)
}

func (k *simKernel) segSize() int { return int(k.g.chunkSize) - KernelHeadroom - int(k.g.headroom) }

func simByte(seq uint32, i int) byte { return byte(uint32(i)*131 + seq*7 + 1) }

// deliver receives a frame of length bytes as the kernel's copy mode does:
// split into segSize pieces over fill-ring chunks, published at once.
// It reports false (a kernel drop) when frames or RX ring room are missing.
func (k *simKernel) deliver(length int) bool {
	nseg := (length + k.segSize() - 1) / k.segSize()
	r := &k.dp.rx
	prod := atomic.LoadUint32(r.producer)
	if len(k.avail) < nseg || r.size-(prod-atomic.LoadUint32(r.consumer)) < uint32(nseg) {
		return false
	}
	k.seq++
	off := 0
	for i := range nseg {
		addr := k.avail[0] + KernelHeadroom + uint64(k.g.headroom)
		k.avail = k.avail[1:]
		l := min(k.segSize(), length-off)
		for j := range l {
			k.dp.umem[addr+uint64(j)] = simByte(k.seq, off+j)
		}
		off += l
		var opt uint32
		if i+1 < nseg {
			opt = unix.XDP_PKT_CONTD
		}
		r.entries[prod&r.mask] = Desc{Addr: addr, Len: uint32(l), Options: opt}
		prod++
	}
	atomic.StoreUint32(r.producer, prod)
	k.expected = append(k.expected, simPkt{seq: k.seq, length: length})
	return true
}

// writeRX publishes raw descriptors, for hostile-kernel tests.
func (k *simKernel) writeRX(descs ...Desc) {
	r := &k.dp.rx
	prod := atomic.LoadUint32(r.producer)
	for _, d := range descs {
		r.entries[prod&r.mask] = d
		prod++
	}
	atomic.StoreUint32(r.producer, prod)
}

// consumeTX takes every whole chain from the TX ring, validating each
// descriptor as the kernel's xp_aligned_validate_desc does.
func (k *simKernel) consumeTX() {
	r := &k.dp.tx
	prod := atomic.LoadUint32(r.producer)
	cons := atomic.LoadUint32(r.consumer)
	var chain []uint64
	var frame []byte
	for ; cons != prod; cons++ {
		d := r.entries[cons&r.mask]
		off := d.Addr & (k.g.chunkSize - 1)
		if d.Len == 0 || off+uint64(d.Len) > k.g.chunkSize || d.Addr >= k.g.umemSize || d.Options&^unix.XDP_PKT_CONTD != 0 {
			k.t.Fatalf("socket wrote invalid TX descriptor %+v", d)
		}
		if d.Addr>>k.g.chunkShift < uint64(k.g.rxFrames) {
			k.t.Fatalf("TX descriptor %+v points into RX frames", d)
		}
		chain = append(chain, d.Addr)
		frame = append(frame, k.dp.umem[d.Addr:d.Addr+uint64(d.Len)]...)
		if len(chain) > MaxTXSegments {
			k.t.Fatalf("TX chain of %d descriptors", len(chain))
		}
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			k.inflight = append(k.inflight, chain)
			k.sent = append(k.sent, frame)
			chain, frame = nil, nil
		}
	}
	if chain != nil {
		k.t.Fatalf("socket published an unterminated TX chain %v", chain)
	}
	atomic.StoreUint32(r.consumer, cons)
}

// completeTX puts the addresses of the first n consumed chains on the
// completion ring.
func (k *simKernel) completeTX(n int) {
	r := &k.dp.comp
	prod := atomic.LoadUint32(r.producer)
	n = min(n, len(k.inflight))
	for _, chain := range k.inflight[:n] {
		for _, a := range chain {
			if r.size-(prod-atomic.LoadUint32(r.consumer)) == 0 {
				k.t.Fatal("completion ring overflow")
			}
			r.entries[prod&r.mask] = a
			prod++
		}
	}
	k.inflight = k.inflight[n:]
	atomic.StoreUint32(r.producer, prod)
}

func (k *simKernel) writeCompletion(addrs ...uint64) {
	r := &k.dp.comp
	prod := atomic.LoadUint32(r.producer)
	for _, a := range addrs {
		r.entries[prod&r.mask] = a
		prod++
	}
	atomic.StoreUint32(r.producer, prod)
}

// checkModel compares the socket's accounting with what the simulated
// kernel holds: fill-state frames are exactly those in the fill ring, taken
// by the kernel, or in the RX ring; kernel-state TX chunks are exactly
// those in the TX ring, in flight, or in the completion ring.
func (k *simKernel) checkModel() {
	k.t.Helper()
	if err := k.dp.frames.check(); err != nil {
		k.t.Fatal(err)
	}
	st := k.dp.frames.stats()
	fill := &k.dp.fill
	rx := &k.dp.rx
	inFill := int(atomic.LoadUint32(fill.producer) - atomic.LoadUint32(fill.consumer))
	inRX := int(atomic.LoadUint32(rx.producer) - atomic.LoadUint32(rx.consumer))
	if got := inFill + len(k.avail) + inRX; got != st.RXFill {
		k.t.Fatalf("RX frames with the kernel: fill ring %d + taken %d + RX ring %d = %d, accounting says %d",
			inFill, len(k.avail), inRX, got, st.RXFill)
	}
	busy := 0
	for _, b := range k.dp.frames.busy {
		if b {
			busy++
		}
	}
	tx, comp := &k.dp.tx, &k.dp.comp
	inTX := int(atomic.LoadUint32(tx.producer) - atomic.LoadUint32(tx.consumer))
	inComp := int(atomic.LoadUint32(comp.producer) - atomic.LoadUint32(comp.consumer))
	inflight := 0
	for _, c := range k.inflight {
		inflight += len(c)
	}
	if got := inTX + inflight + inComp; got != busy {
		k.t.Fatalf("TX chunks with the kernel: TX ring %d + in flight %d + completion ring %d = %d, accounting says %d",
			inTX, inflight, inComp, got, busy)
	}
}

// checkPacket verifies a received packet against the next expected one.
func (k *simKernel) checkPacket(p *Packet, scratch []byte) {
	k.t.Helper()
	if len(k.expected) == 0 {
		k.t.Fatal("received a packet the kernel did not deliver")
	}
	want := k.expected[0]
	k.expected = k.expected[1:]
	if p.Len() != want.length {
		k.t.Fatalf("packet %d: length %d, want %d", want.seq, p.Len(), want.length)
	}
	if wantSegs := (want.length + k.segSize() - 1) / k.segSize(); p.Segments() != wantSegs {
		k.t.Fatalf("packet %d: %d segments, want %d", want.seq, p.Segments(), wantSegs)
	}
	for i := range p.Segments() {
		last := i == p.Segments()-1
		if (p.Desc(i).Options&unix.XDP_PKT_CONTD == 0) != last {
			k.t.Fatalf("packet %d segment %d: options %#x", want.seq, i, p.Desc(i).Options)
		}
	}
	b, err := p.Bytes(scratch)
	if err != nil {
		k.t.Fatal(err)
	}
	for i, c := range b {
		if c != simByte(want.seq, i) {
			k.t.Fatalf("packet %d byte %d: %#x, want %#x", want.seq, i, c, simByte(want.seq, i))
		}
	}
}
