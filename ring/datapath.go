package ring

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Packet is a received frame: a chain of 1..MaxSegments descriptors into
// UMEM, all but the last with XDP_PKT_CONTD. Its bytes stay valid and
// untouched by the kernel until the Packet is released. The zero value is
// an empty packet. Packets are values so a []Packet can be reused for every
// Receive without allocating.
type Packet struct {
	segs  [MaxSegments]Desc
	n     int
	token uint64
	umem  []byte
}

// Segments is the number of descriptors in the chain.
func (p *Packet) Segments() int { return p.n }

// Desc returns descriptor i of the chain.
func (p *Packet) Desc(i int) Desc { return p.segs[:p.n][i] }

// Segment returns the bytes of descriptor i, aliasing UMEM.
func (p *Packet) Segment(i int) []byte {
	d := p.segs[:p.n][i]
	return p.umem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)]
}

// Len is the frame length: the sum of the segment lengths.
func (p *Packet) Len() int {
	n := 0
	for _, d := range p.segs[:p.n] {
		n += int(d.Len)
	}
	return n
}

// Bytes returns the whole frame. A single-segment packet is returned in
// place (aliasing UMEM, no copy); a chain is copied into scratch, which must
// hold Len() bytes (else ErrShortBuffer), and the result aliases scratch.
func (p *Packet) Bytes(scratch []byte) ([]byte, error) {
	if p.n == 1 {
		return p.Segment(0), nil
	}
	total := p.Len()
	if len(scratch) < total {
		return nil, ErrShortBuffer
	}
	off := 0
	for i := range p.n {
		off += copy(scratch[off:], p.Segment(i))
	}
	return scratch[:total], nil
}

// TXFrame is a transmit buffer reserved by AllocTX: write a frame into
// Buf() (contiguous, TXFrameSize rounded up to whole chunks), set Len, and
// hand it to Submit, or give it back unsent with FreeTX.
type TXFrame struct {
	Len   int // bytes of Buf() to send
	buf   []byte
	id    uint32
	token uint64
}

// Buf is the buffer's memory in UMEM.
func (f *TXFrame) Buf() []byte { return f.buf }

// Counters are the socket's own event counts (the kernel's are in
// Statistics).
type Counters struct {
	RXPackets       uint64 // packets delivered by Receive
	RXDescs         uint64 // RX descriptors read
	RXInvalidDescs  uint64 // RX descriptors outside the RX frames or naming a frame the kernel does not hold: ignored
	RXDroppedChains uint64 // packets dropped for an invalid descriptor or more than MaxSegments descriptors
	TXPackets       uint64 // frames submitted
	TXDescs         uint64 // TX descriptors submitted
	TXCompletions   uint64 // completion-ring entries read
	TXInvalidCompl  uint64 // completion addresses naming no submitted chunk: ignored
	FillKicks       uint64 // wakeups for the fill ring (need_wakeup set)
	TXKicks         uint64 // sendto kicks for the TX ring
	TXKickRetries   uint64 // kicks answered EAGAIN/EBUSY/ENOBUFS/EINTR: retried later
	BindRetries     uint64 // binds answered EBUSY at Open (queue still held by a closed socket)
}

// datapath is the ring and frame logic of a socket, free of system calls
// so that it can be tested against a simulated kernel.
type datapath struct {
	umem   []byte
	frames *frames
	fill   addrRing
	comp   addrRing
	rx     descRing
	tx     descRing
	cnt    Counters
}

// refill moves free RX frames into the fill ring, as many as fit.
func (d *datapath) refill() int {
	want := uint32(len(d.frames.rxFree))
	if want == 0 {
		return 0
	}
	n := min(d.fill.free(want), want)
	for i := range n {
		addr, _ := d.frames.takeFill()
		d.fill.entries[(d.fill.prod+i)&d.fill.mask] = addr
	}
	d.fill.publish(n)
	return int(n)
}

// receive reads whole packets from the RX ring into pkts, stopping at a
// Packet the caller has not released (its frames would be lost). A chain whose
// last descriptor the kernel has not published yet stays in the ring for
// the next call. A chain with an invalid descriptor or too many
// descriptors is dropped: its valid frames go back to the free list.
func (d *datapath) receive(pkts []Packet) int {
	if len(pkts) == 0 {
		return 0
	}
	r := &d.rx
	avail := r.available(r.size)
	pos, np := uint32(0), 0
	for np < len(pkts) && pos < avail {
		if p := &pkts[np]; p.n != 0 && d.held(p) {
			break // never overwrite a packet the caller still holds
		}
		end := pos
		for end < avail && r.entries[(r.cons+end)&r.mask].Options&unix.XDP_PKT_CONTD != 0 {
			end++
		}
		if end == avail { // chain not finished
			if pos == 0 && avail == r.size {
				// A full ring with no chain end can never finish: drop it all.
				d.dropChain(pos, avail)
				pos = avail
			}
			break
		}
		end++ // one past the last descriptor
		p := &pkts[np]
		// Segments past n are never read: no need to zero the array.
		p.n, p.token, p.umem = 0, d.frames.nextToken(), d.umem
		ok := true
		for i := pos; i < end; i++ {
			desc := r.entries[(r.cons+i)&r.mask]
			id, valid := d.frames.claimRX(desc, p.token)
			if !valid {
				d.cnt.RXInvalidDescs++
				ok = false
				continue
			}
			if p.n == MaxSegments {
				d.frames.freeRX(id)
				ok = false
				continue
			}
			p.segs[p.n] = desc
			p.n++
		}
		d.cnt.RXDescs += uint64(end - pos)
		pos = end
		if !ok {
			d.releaseSegs(p)
			p.n, p.token = 0, 0
			d.cnt.RXDroppedChains++
			continue
		}
		np++
	}
	r.release(pos)
	d.cnt.RXPackets += uint64(np)
	return np
}

// dropChain discards RX ring entries [from, to): valid frames are freed,
// invalid descriptors counted.
func (d *datapath) dropChain(from, to uint32) {
	r := &d.rx
	token := d.frames.nextToken()
	for i := from; i < to; i++ {
		if id, ok := d.frames.claimRX(r.entries[(r.cons+i)&r.mask], token); ok {
			d.frames.freeRX(id)
		} else {
			d.cnt.RXInvalidDescs++
		}
	}
	d.cnt.RXDescs += uint64(to - from)
	d.cnt.RXDroppedChains++
}

// releaseSegs frees the frames of p (all held under p.token).
func (d *datapath) releaseSegs(p *Packet) {
	for _, s := range p.segs[:p.n] {
		d.frames.freeRX(uint32(s.Addr >> d.frames.g.chunkShift))
	}
}

// release returns the frames of each packet to the free list. A packet not
// held (already released, a stale copy, a zero value) is left alone and
// reported; the others are released anyway.
func (d *datapath) release(pkts []Packet) error {
	var first error
	for i := range pkts {
		p := &pkts[i]
		if !d.held(p) {
			if first == nil {
				first = fmt.Errorf("ring: release packet %d of %d: %w", i, len(pkts), ErrDoubleRelease)
			}
			continue
		}
		d.releaseSegs(p)
		p.n, p.token = 0, 0
	}
	return first
}

func (d *datapath) held(p *Packet) bool {
	if p.n == 0 || p.n > MaxSegments {
		return false
	}
	for _, s := range p.segs[:p.n] {
		id, ok := d.frames.rxFrameOf(s)
		if !ok || !d.frames.heldRX(id, p.token) {
			return false
		}
	}
	return true
}

// allocTX reserves up to len(out) TX buffers, stopping at a TXFrame the
// caller still holds.
func (d *datapath) allocTX(out []TXFrame) int {
	g := &d.frames.g
	for i := range out {
		if f := &out[i]; f.token != 0 && d.frames.heldTX(f.id, f.token) {
			return i // never overwrite a buffer the caller still holds
		}
		id, token, ok := d.frames.allocTX()
		if !ok {
			return i
		}
		start := d.frames.chunkAddr(d.frames.firstChunk(id))
		end := start + uint64(g.slotChunks)*g.chunkSize
		out[i] = TXFrame{buf: d.umem[start:end:end], id: id, token: token}
	}
	return len(out)
}

// freeTX returns reserved, unsent TX buffers.
func (d *datapath) freeTX(frames []TXFrame) error {
	var first error
	for i := range frames {
		f := &frames[i]
		if !d.frames.heldTX(f.id, f.token) {
			if first == nil {
				first = fmt.Errorf("ring: free TX frame %d of %d: %w", i, len(frames), ErrDoubleRelease)
			}
			continue
		}
		d.frames.unheldTX(f.id)
		*f = TXFrame{}
	}
	return first
}

// submit queues frames in order on the TX ring, each as a chain of
// per-chunk descriptors, and publishes them with one index update. It stops
// at the first frame it cannot queue: n frames were queued and err says why
// frames[n] was not (that frame stays with the caller unless it was not
// held in the first place).
func (d *datapath) submit(frames []TXFrame) (n int, err error) {
	g := &d.frames.g
	t := &d.tx
	var queued uint32
	for n = range frames {
		f := &frames[n]
		if !d.frames.heldTX(f.id, f.token) {
			err = fmt.Errorf("ring: submit TX frame %d: %w", n, ErrDoubleRelease)
			break
		}
		if f.Len <= 0 || f.Len > len(f.buf) {
			err = fmt.Errorf("ring: submit TX frame %d: length %d of %d-byte buffer: %w", n, f.Len, len(f.buf), ErrFrameLength)
			break
		}
		ndesc := uint32((uint64(f.Len) + g.chunkSize - 1) >> g.chunkShift)
		if t.free(queued+ndesc) < queued+ndesc {
			err = fmt.Errorf("ring: submit TX frame %d: %w", n, ErrRingFull)
			break
		}
		addr := d.frames.chunkAddr(d.frames.firstChunk(f.id))
		left := uint64(f.Len)
		for i := range ndesc {
			l := min(left, g.chunkSize)
			left -= l
			var opt uint32
			if i+1 < ndesc {
				opt = unix.XDP_PKT_CONTD
			}
			t.entries[(t.prod+queued)&t.mask] = Desc{Addr: addr, Len: uint32(l), Options: opt}
			queued++
			addr += g.chunkSize
		}
		d.frames.submitTX(f.id, ndesc)
		*f = TXFrame{}
	}
	if err == nil {
		n = len(frames)
	}
	t.publish(queued)
	d.cnt.TXPackets += uint64(n)
	d.cnt.TXDescs += uint64(queued)
	return n, err
}

// complete reaps the completion ring; it returns the TX buffers freed.
func (d *datapath) complete() int {
	c := &d.comp
	avail := c.available(c.size)
	freed := 0
	for i := range avail {
		f, ok := d.frames.completeTX(c.entries[(c.cons+i)&c.mask])
		if !ok {
			d.cnt.TXInvalidCompl++
		}
		if f {
			freed++
		}
	}
	c.release(avail)
	d.cnt.TXCompletions += uint64(avail)
	return freed
}

// bytes returns the UMEM bytes of d after the same bounds check applied to
// kernel descriptors.
func (d *datapath) bytes(desc Desc) ([]byte, error) {
	if _, ok := d.frames.chunkOf(desc); !ok {
		return nil, fmt.Errorf("ring: descriptor addr %#x len %d (UMEM %d bytes, chunk %d): %w",
			desc.Addr, desc.Len, d.frames.g.umemSize, d.frames.g.chunkSize, ErrOutOfBounds)
	}
	end := desc.Addr + uint64(desc.Len)
	return d.umem[desc.Addr:end:end], nil
}
