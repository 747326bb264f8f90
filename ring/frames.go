package ring

import "fmt"

// Frame accounting.
//
// UMEM is split once, at Open, into RX frames (one chunk each, chunks
// [0, rxFrames)) and TX buffers (slotChunks contiguous chunks each, after
// the RX frames). The two pools never exchange frames, so a receive burst
// cannot starve transmission or the other way round.
//
// Every frame has exactly one state at all times; the states are the places
// a frame can be:
//
//	RX: free list -> fill (fill ring, driver, or RX ring not yet read)
//	    -> held (in a Packet the application owns) -> free list
//	TX: free list -> held (a TXFrame the application is writing)
//	    -> kernel (TX ring, being sent, or completion ring not yet read)
//	    -> free list
//
// A transition is made only from the expected state, so a frame can be
// neither lost nor handed out twice; anything else (a descriptor the kernel
// should not have produced, a double release) is rejected before any state
// changes. Handles given to the application carry a token that is unique
// per hand-out, so a stale copy of a Packet or TXFrame is rejected even
// after its frames were recycled and handed out again.
type frameState uint8

const (
	stateFree frameState = iota
	stateFill
	stateHeld
	stateKernel
	numStates
)

func (s frameState) String() string {
	switch s {
	case stateFree:
		return "free"
	case stateFill:
		return "fill"
	case stateHeld:
		return "held"
	case stateKernel:
		return "kernel"
	}
	return fmt.Sprintf("frameState(%d)", uint8(s))
}

// FrameStats counts frames by place. RX frames and TX buffers are counted
// separately; RXFree+RXFill+RXHeld == RXFrames and TXFree+TXHeld+TXKernel ==
// TXFrames always hold.
type FrameStats struct {
	RXFrames int // RX frames in the UMEM
	RXFree   int // on the free list, ready for the fill ring
	RXFill   int // given to the kernel: fill ring, driver, or RX ring not yet read
	RXHeld   int // in Packets the application has not released

	TXFrames int // TX buffers in the UMEM
	TXFree   int // ready for AllocTX
	TXHeld   int // reserved by AllocTX, not yet submitted or freed
	TXKernel int // submitted: TX ring, being sent, or completion ring not yet read
}

// frames is the accounting for one UMEM. Frame ids: RX frame i is chunk i;
// TX buffer j has id rxFrames+j and starts at chunk rxFrames+j*slotChunks.
type frames struct {
	g      geometry
	state  []frameState // by frame id
	token  []uint64     // by frame id: hand-out token while held
	inTX   []uint8      // by TX buffer: descriptors not yet completed
	busy   []bool       // by TX chunk: submitted and not yet completed
	rxFree []uint32     // stack of free RX frame ids
	txFree []uint32     // stack of free TX buffer ids
	count  [2][numStates]int
	tokens uint64 // last token handed out
}

const (
	poolRX = 0
	poolTX = 1
)

func newFrames(g geometry) *frames {
	n := g.rxFrames + g.txFrames
	f := &frames{
		g:      g,
		state:  make([]frameState, n),
		token:  make([]uint64, n),
		inTX:   make([]uint8, g.txFrames),
		busy:   make([]bool, g.txChunks),
		rxFree: make([]uint32, 0, g.rxFrames),
		txFree: make([]uint32, 0, g.txFrames),
	}
	// Stacks hand out low ids first: pushed in reverse.
	for i := int(g.rxFrames) - 1; i >= 0; i-- {
		f.rxFree = append(f.rxFree, uint32(i))
	}
	for i := int(g.txFrames) - 1; i >= 0; i-- {
		f.txFree = append(f.txFree, g.rxFrames+uint32(i))
	}
	f.count[poolRX][stateFree] = int(g.rxFrames)
	f.count[poolTX][stateFree] = int(g.txFrames)
	return f
}

func (f *frames) pool(id uint32) int {
	if id < f.g.rxFrames {
		return poolRX
	}
	return poolTX
}

func (f *frames) set(id uint32, s frameState) {
	p := f.pool(id)
	f.count[p][f.state[id]]--
	f.count[p][s]++
	f.state[id] = s
}

func (f *frames) nextToken() uint64 {
	f.tokens++
	return f.tokens
}

// chunkAddr is the UMEM offset of a chunk.
func (f *frames) chunkAddr(chunk uint32) uint64 { return uint64(chunk) << f.g.chunkShift }

// --- RX ---

// takeFill pops a free RX frame for the fill ring.
func (f *frames) takeFill() (addr uint64, ok bool) {
	n := len(f.rxFree)
	if n == 0 {
		return 0, false
	}
	id := f.rxFree[n-1]
	f.rxFree = f.rxFree[:n-1]
	f.set(id, stateFill)
	return f.chunkAddr(id), true
}

// rxFrameOf checks that d lies inside one RX chunk of the UMEM and returns
// the frame. It is the bounds check for descriptors the kernel writes: a
// descriptor that fails it is never used to touch memory.
func (f *frames) rxFrameOf(d Desc) (uint32, bool) {
	chunk, ok := f.chunkOf(d)
	if !ok || chunk >= f.g.rxFrames {
		return 0, false
	}
	return chunk, true
}

// chunkOf checks that [d.Addr, d.Addr+d.Len) lies inside one chunk of the
// UMEM and returns that chunk.
func (f *frames) chunkOf(d Desc) (uint32, bool) {
	if d.Addr >= f.g.umemSize {
		return 0, false
	}
	off := d.Addr & (f.g.chunkSize - 1)
	if off+uint64(d.Len) > f.g.chunkSize { // no overflow: off < 4096, Len < 2^32
		return 0, false
	}
	return uint32(d.Addr >> f.g.chunkShift), true
}

// claimRX moves the frame of a kernel RX descriptor from fill to held
// under token. It fails, changing nothing, for a descriptor outside the RX
// frames or naming a frame the kernel does not have.
func (f *frames) claimRX(d Desc, token uint64) (uint32, bool) {
	id, ok := f.rxFrameOf(d)
	if !ok || f.state[id] != stateFill {
		return 0, false
	}
	f.set(id, stateHeld)
	f.token[id] = token
	return id, true
}

// heldRX reports whether RX frame id is held under token.
func (f *frames) heldRX(id uint32, token uint64) bool {
	return id < f.g.rxFrames && f.state[id] == stateHeld && f.token[id] == token && token != 0
}

// freeRX returns a held RX frame to the free list (the caller checked heldRX).
func (f *frames) freeRX(id uint32) {
	f.set(id, stateFree)
	f.token[id] = 0
	f.rxFree = append(f.rxFree, id) // capacity rxFrames: never reallocates
}

// --- TX ---

// allocTX pops a free TX buffer and holds it under a new token.
func (f *frames) allocTX() (id uint32, token uint64, ok bool) {
	n := len(f.txFree)
	if n == 0 {
		return 0, 0, false
	}
	id = f.txFree[n-1]
	f.txFree = f.txFree[:n-1]
	token = f.nextToken()
	f.set(id, stateHeld)
	f.token[id] = token
	return id, token, true
}

// heldTX reports whether TX buffer id is held under token.
func (f *frames) heldTX(id uint32, token uint64) bool {
	return id >= f.g.rxFrames && id < f.g.rxFrames+f.g.txFrames &&
		f.state[id] == stateHeld && f.token[id] == token && token != 0
}

// firstChunk is the first chunk of TX buffer id.
func (f *frames) firstChunk(id uint32) uint32 {
	return f.g.rxFrames + (id-f.g.rxFrames)*f.g.slotChunks
}

// submitTX moves held TX buffer id to the kernel with ndesc descriptors
// (its first ndesc chunks).
func (f *frames) submitTX(id uint32, ndesc uint32) {
	slot := id - f.g.rxFrames
	first := slot * f.g.slotChunks
	for i := range ndesc {
		f.busy[first+i] = true
	}
	f.inTX[slot] = uint8(ndesc)
	f.token[id] = 0
	f.set(id, stateKernel)
}

// unheldTX returns a held, unsent TX buffer to the free list.
func (f *frames) unheldTX(id uint32) {
	f.token[id] = 0
	f.set(id, stateFree)
	f.txFree = append(f.txFree, id)
}

// completeTX accounts one completion-ring address. The buffer returns to
// the free list when all its descriptors have completed. An address that
// names no submitted chunk is rejected, changing nothing.
func (f *frames) completeTX(addr uint64) (freed, ok bool) {
	chunk, ok := f.chunkOf(Desc{Addr: addr})
	if !ok || chunk < f.g.rxFrames {
		return false, false
	}
	tc := chunk - f.g.rxFrames
	if !f.busy[tc] {
		return false, false
	}
	slot := tc / f.g.slotChunks
	id := f.g.rxFrames + slot
	f.busy[tc] = false
	f.inTX[slot]--
	if f.inTX[slot] > 0 {
		return false, true
	}
	f.set(id, stateFree)
	f.txFree = append(f.txFree, id)
	return true, true
}

// stats returns the counts by place.
func (f *frames) stats() FrameStats {
	rx, tx := &f.count[poolRX], &f.count[poolTX]
	return FrameStats{
		RXFrames: int(f.g.rxFrames), RXFree: rx[stateFree], RXFill: rx[stateFill], RXHeld: rx[stateHeld],
		TXFrames: int(f.g.txFrames), TXFree: tx[stateFree], TXHeld: tx[stateHeld], TXKernel: tx[stateKernel],
	}
}

// check recomputes everything from the per-frame states and compares it with
// the counters and free lists: every frame in exactly one place, each free
// list holding exactly the free frames of its pool once, TX chunk
// bookkeeping consistent. It allocates; it is for tests and diagnostics.
func (f *frames) check() error {
	var count [2][numStates]int
	for id, s := range f.state {
		p := f.pool(uint32(id))
		if s >= numStates || (p == poolRX && s == stateKernel) || (p == poolTX && s == stateFill) {
			return fmt.Errorf("frame %d: impossible state %v", id, s)
		}
		count[p][s]++
		if (s == stateHeld) != (f.token[id] != 0) {
			return fmt.Errorf("frame %d: state %v with token %d", id, s, f.token[id])
		}
	}
	if count != f.count {
		return fmt.Errorf("state counters %v, recount %v", f.count, count)
	}
	if got, want := count[poolRX][stateFree]+count[poolRX][stateFill]+count[poolRX][stateHeld], int(f.g.rxFrames); got != want {
		return fmt.Errorf("RX frames: %d accounted, %d exist", got, want)
	}
	if got, want := count[poolTX][stateFree]+count[poolTX][stateHeld]+count[poolTX][stateKernel], int(f.g.txFrames); got != want {
		return fmt.Errorf("TX buffers: %d accounted, %d exist", got, want)
	}
	seen := make(map[uint32]bool)
	for _, list := range [][]uint32{f.rxFree, f.txFree} {
		for _, id := range list {
			if int(id) >= len(f.state) || f.state[id] != stateFree || seen[id] {
				return fmt.Errorf("free list entry %d: bad, duplicate or not free", id)
			}
			seen[id] = true
		}
	}
	if len(f.rxFree) != count[poolRX][stateFree] || len(f.txFree) != count[poolTX][stateFree] {
		return fmt.Errorf("free lists hold %d RX + %d TX, counters say %d + %d",
			len(f.rxFree), len(f.txFree), count[poolRX][stateFree], count[poolTX][stateFree])
	}
	for slot := range f.g.txFrames {
		busy := 0
		for i := range f.g.slotChunks {
			if f.busy[slot*f.g.slotChunks+i] {
				busy++
			}
		}
		id := f.g.rxFrames + slot
		if busy != int(f.inTX[slot]) || (f.state[id] == stateKernel) != (busy > 0) {
			return fmt.Errorf("TX buffer %d: state %v, %d busy chunks, %d outstanding", id, f.state[id], busy, f.inTX[slot])
		}
	}
	return nil
}
