package queue

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// Gather copies len(dst) bytes of the message, starting at offset off, from
// segs; reads from another process's memory are queued in pending (dst is a
// frame being built, see engine.send).
func Gather(dst []byte, segs []Span, off uint32, pending *ProcCopies) {
	for _, s := range segs {
		if len(dst) == 0 {
			return
		}
		if s.len() <= off {
			off -= s.len()
			continue
		}
		n := s.Read(dst, off, pending)
		dst = dst[n:]
		off = 0
	}
}

// PayloadLen is a received packet's payload length, both pieces (see
// wire.DecodeSplit).
func PayloadLen(p *wire.Packet) uint32 { return uint32(len(p.Payload) + len(p.PayloadTail)) }

// ScatterPayload copies a received packet's payload, both pieces, into segs
// at message offset off; false if it does not fit.
// Writes into another process's memory are queued in pending (the
// payload is a received frame's).
func ScatterPayload(segs []Span, off uint32, p *wire.Packet, pending *ProcCopies) bool {
	return Scatter(segs, off, p.Payload, pending) && Scatter(segs, off+uint32(len(p.Payload)), p.PayloadTail, pending)
}

// Scatter copies src into segs starting at message offset off; false if it
// does not fit. pending: see span.write.
func Scatter(segs []Span, off uint32, src []byte, pending *ProcCopies) bool {
	for _, s := range segs {
		if len(src) == 0 {
			return true
		}
		if s.len() <= off {
			off -= s.len()
			continue
		}
		n := s.Write(src, off, pending)
		src = src[n:]
		off = 0
	}
	return len(src) == 0
}

// Span is a piece of a registered region the engines copy to or from: local
// bytes, or n bytes of another process's memory at offset off.
type Span struct {
	B   []byte
	Mem ibv.ProcMemory
	Off uint64
	N   uint32
}

func (s Span) len() uint32 {
	if s.Mem != nil {
		return s.N
	}
	return uint32(len(s.B))
}

// Read copies the span's bytes from offset off into dst, as many as fit,
// and returns how many. From another process's memory, with pending set,
// the copy is only queued there (dst must stay valid until the engine makes
// it, see engine.sealDeferred); without, it is made at once.
func (s Span) Read(dst []byte, off uint32, pending *ProcCopies) int {
	if s.Mem == nil {
		return copy(dst, s.B[off:])
	}
	n := min(uint32(len(dst)), s.N-off)
	if pending != nil {
		pending.add(s.Mem, dst[:n], s.Off+uint64(off))
	} else {
		_ = s.Mem.ReadAt(dst[:n], s.Off+uint64(off))
	}
	return int(n)
}

// Write copies src into the span from offset off, as much as fits, and
// returns how much. Into another process's memory, with pending set, the
// copy is only queued there (src must stay valid until the engine flushes
// it, see ProcCopies); without, it is made at once.
func (s Span) Write(src []byte, off uint32, pending *ProcCopies) int {
	if s.Mem == nil {
		return copy(s.B[off:], src)
	}
	n := min(uint32(len(src)), s.N-off)
	if pending != nil {
		pending.add(s.Mem, src[:n], s.Off+uint64(off))
	} else {
		_ = s.Mem.WriteAt(src[:n], s.Off+uint64(off))
	}
	return int(n)
}

// ProcCopies are an engine's copies to (writes) or from (reads) other
// processes' memory not made yet, in order, grouped by memory; the local
// side is frame memory, valid until the engine makes them.
type ProcCopies struct {
	Read   bool
	groups []copyGroup
	N      int
}

type copyGroup struct {
	mem  ibv.ProcMemory
	bufs [][]byte
	offs []uint64
}

func (w *ProcCopies) add(mem ibv.ProcMemory, p []byte, off uint64) {
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
	w.N++
}

// Flush makes the queued copies, one call per memory where it can.
func (w *ProcCopies) Flush() {
	if w.N == 0 {
		return
	}
	for i := range w.groups {
		g := &w.groups[i]
		w.copyGroup(g)
		clear(g.bufs) // no reference to frames outlives the batch
		g.bufs, g.offs, g.mem = g.bufs[:0], g.offs[:0], nil
	}
	w.groups = w.groups[:0]
	w.N = 0
}

func (w *ProcCopies) copyGroup(g *copyGroup) {
	if w.Read {
		if v, ok := g.mem.(ibv.ProcReadVec); ok {
			_ = v.ReadVec(g.bufs, g.offs)
			return
		}
		for j, b := range g.bufs {
			_ = g.mem.ReadAt(b, g.offs[j])
		}
		return
	}
	if v, ok := g.mem.(ibv.ProcWriteVec); ok {
		_ = v.WriteVec(g.bufs, g.offs)
		return
	}
	for j, b := range g.bufs {
		_ = g.mem.WriteAt(b, g.offs[j])
	}
}
