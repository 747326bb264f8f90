// Data movement between messages and memory, as rxe_mr.c's copy_data: a
// region's spans, the gather into a frame being built and the scatter of a
// received payload, and the batched copies to and from daemon clients'
// memory.

package transport

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// gather copies len(dst) bytes of the message, starting at offset off, from
// segs; reads from another process's memory are queued in pending (dst is a
// frame being built, see engine.send).
func gather(dst []byte, segs []span, off uint32, pending *procCopies) {
	for _, s := range segs {
		if len(dst) == 0 {
			return
		}
		if s.len() <= off {
			off -= s.len()
			continue
		}
		n := s.read(dst, off, pending)
		dst = dst[n:]
		off = 0
	}
}

// payloadLen is a received packet's payload length, both pieces (see
// wire.DecodeSplit).
func payloadLen(p *wire.Packet) uint32 { return uint32(len(p.Payload) + len(p.PayloadTail)) }

// scatterPayload copies a received packet's payload, both pieces, into segs
// at message offset off; false if it does not fit.
// Writes into another process's memory are queued in pending (the
// payload is a received frame's).
func scatterPayload(segs []span, off uint32, p *wire.Packet, pending *procCopies) bool {
	return scatter(segs, off, p.Payload, pending) && scatter(segs, off+uint32(len(p.Payload)), p.PayloadTail, pending)
}

// scatter copies src into segs starting at message offset off; false if it
// does not fit. pending: see span.write.
func scatter(segs []span, off uint32, src []byte, pending *procCopies) bool {
	for _, s := range segs {
		if len(src) == 0 {
			return true
		}
		if s.len() <= off {
			off -= s.len()
			continue
		}
		n := s.write(src, off, pending)
		src = src[n:]
		off = 0
	}
	return len(src) == 0
}

// span is a piece of a registered region the engines copy to or from: local
// bytes, or n bytes of another process's memory at offset off.
type span struct {
	b   []byte
	mem ProcMemory
	off uint64
	n   uint32
}

func (s span) len() uint32 {
	if s.mem != nil {
		return s.n
	}
	return uint32(len(s.b))
}

// read copies the span's bytes from offset off into dst, as many as fit,
// and returns how many. From another process's memory, with pending set,
// the copy is only queued there (dst must stay valid until the engine makes
// it, see engine.sealDeferred); without, it is made at once.
func (s span) read(dst []byte, off uint32, pending *procCopies) int {
	if s.mem == nil {
		return copy(dst, s.b[off:])
	}
	n := min(uint32(len(dst)), s.n-off)
	if pending != nil {
		pending.add(s.mem, dst[:n], s.off+uint64(off))
	} else {
		_ = s.mem.ReadAt(dst[:n], s.off+uint64(off))
	}
	return int(n)
}

// write copies src into the span from offset off, as much as fits, and
// returns how much. Into another process's memory, with pending set, the
// copy is only queued there (src must stay valid until the engine flushes
// it, see procCopies); without, it is made at once.
func (s span) write(src []byte, off uint32, pending *procCopies) int {
	if s.mem == nil {
		return copy(s.b[off:], src)
	}
	n := min(uint32(len(src)), s.n-off)
	if pending != nil {
		pending.add(s.mem, src[:n], s.off+uint64(off))
	} else {
		_ = s.mem.WriteAt(src[:n], s.off+uint64(off))
	}
	return int(n)
}

// procCopies are an engine's copies to (writes) or from (reads) other
// processes' memory not made yet, in order, grouped by memory; the local
// side is frame memory, valid until the engine makes them.
type procCopies struct {
	read   bool
	groups []copyGroup
	n      int
}

type copyGroup struct {
	mem  ProcMemory
	bufs [][]byte
	offs []uint64
}

func (w *procCopies) add(mem ProcMemory, p []byte, off uint64) {
	if k := len(w.groups); k == 0 || w.groups[k-1].mem != mem {
		if k < cap(w.groups) {
			w.groups = w.groups[:k+1]
			w.groups[k].mem = mem
		} else {
			w.groups = append(w.groups, copyGroup{mem: mem})
		}
	}
	g := &w.groups[len(w.groups)-1]
	g.bufs = append(g.bufs, p)
	g.offs = append(g.offs, off)
	w.n++
}

// flush makes the queued copies, one call per memory where it can.
func (w *procCopies) flush() {
	if w.n == 0 {
		return
	}
	for i := range w.groups {
		g := &w.groups[i]
		w.copyGroup(g)
		clear(g.bufs) // no reference to frames outlives the batch
		g.bufs, g.offs, g.mem = g.bufs[:0], g.offs[:0], nil
	}
	w.groups = w.groups[:0]
	w.n = 0
}

func (w *procCopies) copyGroup(g *copyGroup) {
	if w.read {
		if v, ok := g.mem.(ProcReadVec); ok {
			_ = v.ReadVec(g.bufs, g.offs)
			return
		}
		for j, b := range g.bufs {
			_ = g.mem.ReadAt(b, g.offs[j])
		}
		return
	}
	if v, ok := g.mem.(ProcWriteVec); ok {
		_ = v.WriteVec(g.bufs, g.offs)
		return
	}
	for j, b := range g.bufs {
		_ = g.mem.WriteAt(b, g.offs[j])
	}
}

// ProcMemory, ProcReadVec and ProcWriteVec are the provider interface's
// (package ibv): memory of another process the engines reach by copying.
type (
	ProcMemory   = ibv.ProcMemory
	ProcReadVec  = ibv.ProcReadVec
	ProcWriteVec = ibv.ProcWriteVec
)
