package transport

import (
	"fmt"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
)

// MW is a memory window: a remote key for part of a memory region, bound
// through a QP's send queue. A type-2 window is bound to that QP and
// invalidated through it; a type-1 window is the PD's, may be bound again
// while bound, and only a bind of length 0 or Dealloc unbinds it.
type MW struct {
	pd   *PD
	typ1 bool          // type 1 (ibv_bind_mw), else type 2
	rkey atomic.Uint32 // the application reads it; binds change its key byte

	// Engine-owned.
	alive  bool
	bound  bool
	qp     *QP // type 2: the QP it was bound through, the only one that may use it
	mr     *MR
	addr   uint64
	length uint64
	access ibv.Access
}

// AllocMW creates a memory window of the protection domain, of type 1 or
// (typ1 false) type 2.
func (pd *PD) AllocMW(typ1 bool) (*MW, error) {
	mw := &MW{pd: pd, typ1: typ1}
	if err := pd.dev.do(func() error { return pd.dev.addMW(mw) }); err != nil {
		return nil, err
	}
	return mw, nil
}

// RKey is the window's current remote key.
func (mw *MW) RKey() uint32 { return mw.rkey.Load() }

// Dealloc frees the window; a bound window is unbound first, so its rkey
// stops working when Dealloc returns.
func (mw *MW) Dealloc() error {
	return mw.pd.dev.do(func() error {
		if !mw.alive {
			return fmt.Errorf("verbs: memory window already deallocated: %w", ibv.ErrInvalid)
		}
		mw.pd.dev.objs.removeMW(mw)
		return nil
	})
}

// Memory window keys live above the region keys, with rxe's index ranges
// (rxe_param.h: regions 1..0x80000, windows 0x80001..0x100000), so a key's
// index says which table it names.
const (
	mrMaxIndex   = 0x80000
	mwFirstIndex = mrMaxIndex + 1
	mwMaxIndex   = 0x100000
)

func isMWKey(key uint32) bool { return key>>8 >= mwFirstIndex && key>>8 <= mwMaxIndex }

func (d *NIC) addMW(mw *MW) error {
	t := &d.objs.mrs
	var i uint32
	if n := len(t.mwFree); n > 0 {
		i, t.mwFree = t.mwFree[n-1], t.mwFree[:n-1]
	} else {
		if len(t.mws) > mwMaxIndex-mwFirstIndex {
			return fmt.Errorf("verbs: too many memory windows: %w", ibv.ErrNoMem)
		}
		i = uint32(len(t.mws))
		t.mws = append(t.mws, nil)
	}
	mw.rkey.Store((mwFirstIndex+i)<<8 | uint32(d.rng.IntN(256)))
	mw.alive = true
	t.mws[i] = mw
	mw.pd.users.Add(1)
	return nil
}

func (e *objects) removeMW(mw *MW) {
	e.unbindMW(mw)
	i := mw.rkey.Load()>>8 - mwFirstIndex
	e.mrs.mws[i] = nil
	e.mrs.mwFree = append(e.mrs.mwFree, i)
	mw.alive = false
	mw.pd.users.Add(-1)
}

// lookupMWIndex returns the live window whose rkey has key's index, whatever
// its key byte, or nil: a daemon's client names a window so in a BIND_MW.
func (e *objects) lookupMWIndex(key uint32) *MW {
	if !isMWKey(key) {
		return nil
	}
	i := key>>8 - mwFirstIndex
	if int(i) >= len(e.mrs.mws) {
		return nil
	}
	return e.mrs.mws[i]
}

// lookupMW returns the live window whose current rkey is key, or nil.
func (e *objects) lookupMW(key uint32) *MW {
	if !isMWKey(key) {
		return nil
	}
	i := key>>8 - mwFirstIndex
	if int(i) >= len(e.mrs.mws) {
		return nil
	}
	mw := e.mrs.mws[i]
	if mw == nil || mw.rkey.Load() != key {
		return nil
	}
	return mw
}

// bindMW executes a BIND_MW work request of qp (rxe_check_bind_mw's
// rules); false is a bind error.
func (e *engine) bindMW(qp *QP, b *Bind) bool {
	e.mwMu.Lock()
	defer e.mwMu.Unlock()
	mw, mr := b.MW, b.MR
	if !mw.alive {
		return false
	}
	if mw.typ1 {
		// A type-1 window may be bound again while bound; a bind of length
		// 0 leaves it valid but bound to nothing (rxe takes no region then).
		if b.Length == 0 {
			e.unbindMW(mw)
			mw.rkey.Store(mw.rkey.Load()&^0xff | b.RKey&0xff)
			return true
		}
	} else if mw.bound || mw.pd != qp.pd {
		return false // o10-37.2.30: a type-2 window must be free; C10-72: same PD
	}
	switch {
	case mr == nil || !mr.valid || mr.pd != mw.pd || b.Length == 0:
		return false // o10-37.2.40
	case mr.access&ibv.AccessMWBind == 0:
		// C10-73. Local rights in the bind's access are not refused: rxe
		// looks only at the remote rights a window grants (pyverbs binds
		// with LOCAL_WRITE|REMOTE_WRITE).
		return false
	case b.Access&(ibv.AccessRemoteWrite|ibv.AccessRemoteAtomic) != 0 && mr.access&ibv.AccessLocalWrite == 0:
		return false // C10-74
	case b.Addr < mr.addr || b.Length > mr.length || b.Addr-mr.addr > mr.length-b.Length:
		return false // C10-75
	}
	e.unbindMW(mw) // a type-1 window's previous binding
	mw.rkey.Store(mw.rkey.Load()&^0xff | b.RKey&0xff)
	mw.bound, mw.mr = true, mr
	if !mw.typ1 {
		mw.qp = qp
	}
	mw.addr, mw.length, mw.access = b.Addr, b.Length, b.Access
	mr.boundMWs++
	return true
}

// invalidateRKey frees the type-2 window named by key for qp (LOCAL_INV or
// a peer's SEND_WITH_INV). Region keys cannot be invalidated: xdproce has
// no fast-registration regions, and rxe refuses user regions the same way;
// nor can type-1 windows' (rxe_invalidate_mw: EINVAL).
func (e *engine) invalidateRKey(qp *QP, key uint32) bool {
	e.mwMu.Lock()
	defer e.mwMu.Unlock()
	mw := e.lookupMW(key)
	if mw == nil || mw.typ1 || !mw.bound || mw.pd != qp.pd {
		return false
	}
	e.unbindMW(mw)
	return true
}

// unbindMW returns a window to the free state; its rkey keeps the key byte
// but names nothing until the next bind.
func (e *objects) unbindMW(mw *MW) {
	if !mw.bound {
		return
	}
	mw.mr.boundMWs--
	mw.bound, mw.qp, mw.mr = false, nil, nil
	mw.addr, mw.length, mw.access = 0, 0, 0
}

// checkMWAccess resolves a remote access through a window: the window's
// rights and range first, then the region under it.
func (e *engine) checkMWAccess(qp *QP, rkey uint32, va uint64, n uint32, need ibv.Access) (*MR, bool) {
	e.mwMu.Lock()
	defer e.mwMu.Unlock()
	mw := e.lookupMW(rkey)
	if mw == nil || !mw.bound || mw.pd != qp.pd || (!mw.typ1 && mw.qp != qp) || mw.access&need != need {
		return nil, false
	}
	if va < mw.addr || uint64(n) > mw.length || va-mw.addr > mw.length-uint64(n) {
		return nil, false
	}
	if _, ok := mw.mr.span(va, n); !ok || !mw.mr.valid {
		return nil, false
	}
	return mw.mr, true
}
