// The device's memory as the engines use it: key lookups, binds,
// invalidations and window checks.

package engine

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
)

func IsMWKey(key uint32) bool { return memory.IsMWKey(key) }

// bindMW executes a BIND_MW work request of qp; false is a bind error.
func (e *Engine) bindMW(qp *queue.QP, b *queue.Bind) bool {
	return e.Mem.Bind(qp.OwnerID, qp.PD, b.MW, b.MR, memory.BindArgs{RKey: b.RKey, Addr: b.Addr, Length: b.Length, Access: b.Access})
}

// invalidateRKey frees the type-2 window named by key for qp (LOCAL_INV or
// a peer's SEND_WITH_INV).
func (e *Engine) invalidateRKey(qp *queue.QP, key uint32) bool { return e.Mem.Invalidate(qp.PD, key) }

// checkMWAccess resolves a remote access of qp through a window.
func (e *Engine) checkMWAccess(qp *queue.QP, rkey uint32, va uint64, n uint32, need ibv.Access) (*memory.MR, bool) {
	return e.Mem.CheckMWAccess(qp.OwnerID, qp.PD, rkey, va, n, need)
}

// spanOf returns the region's piece [addr, addr+n) if it lies inside it.
func spanOf(m *memory.MR, addr uint64, n uint32) (queue.Span, bool) {
	off, ok := m.Locate(addr, n)
	if !ok {
		return queue.Span{}, false
	}
	if mem := m.Proc(); mem != nil {
		return queue.Span{Mem: mem, Off: off, N: n}, true
	}
	return queue.Span{B: m.Bytes()[off : off+uint64(n)]}, true
}

// localSpan is a span of local bytes (INLINE data).
func localSpan(b []byte) queue.Span { return queue.Span{B: b} }
