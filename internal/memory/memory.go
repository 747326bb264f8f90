// Package memory is a device's memory as the transport sees it, after
// rxe_mr.c and rxe_mw.c: protection domains, memory regions and windows,
// the table that turns their keys into them, and a window's binding and
// the checks of a remote access through it. It holds no transport state:
// what a window is bound through is an owner identity (Owner) the engines
// give each QP, not the QP. The engines (internal/transport) resolve keys
// here; copying data to and from a region's memory is theirs (dma.go).
package memory

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
)

// Owner identifies what a type-2 window is bound through (a QP): unique
// for the device's life, never reused, so a window bound through a QP
// that is gone is usable by no other. 0 is no one.
type Owner uint64

// PD is a protection domain: QPs reach only memory regions of their own PD.
type PD struct {
	id uint32
	// users counts the regions, windows, QPs, SRQs and address handles of
	// the PD: ibv_dealloc_pd is EBUSY while any exists.
	users atomic.Int32
}

// NewPD is protection domain number id.
func NewPD(id uint32) *PD { return &PD{id: id} }

// ID is the PD's number.
func (pd *PD) ID() uint32 { return pd.id }

// Users is how many objects use the PD.
func (pd *PD) Users() int32 { return pd.users.Load() }

// AddUsers counts n more (or, negative, fewer) objects using the PD.
func (pd *PD) AddUsers(n int32) { pd.users.Add(n) }

// MR is a registered memory region.
type MR struct {
	pd     *PD
	buf    []byte         // the region's memory, in this process
	mem    ibv.ProcMemory // or, for a daemon's client's own memory, where it is
	length uint64
	addr   uint64
	access ibv.Access
	lkey   uint32
	rkey   uint32
	valid  bool // in the table (changed under every engine's mutex)
	// boundMWs counts the memory windows bound to the region (under the
	// table's window lock or every engine's mutex).
	boundMWs int
}

// NewMR is a region of pd over buf whose first byte has the address
// iova; the caller checked the length and access. Table.AddMR keys it.
func NewMR(pd *PD, buf []byte, iova uint64, access ibv.Access) *MR {
	return &MR{pd: pd, buf: buf, length: uint64(len(buf)), access: access, addr: iova}
}

// NewProcMR is a region of pd over length bytes of another process's
// memory, reached through mem, at address iova.
func NewProcMR(pd *PD, mem ibv.ProcMemory, iova, length uint64, access ibv.Access) *MR {
	return &MR{pd: pd, mem: mem, length: length, access: access, addr: iova}
}

// LKey is the local key that SGEs name.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the remote key peers name.
func (m *MR) RKey() uint32 { return m.rkey }

// Bytes is the region's memory in this process (nil for another's).
func (m *MR) Bytes() []byte { return m.buf }

// Proc is the other process's memory the region is (nil for this one's).
func (m *MR) Proc() ibv.ProcMemory { return m.mem }

// PD is the region's protection domain.
func (m *MR) PD() *PD { return m.pd }

// Access is the region's access flags.
func (m *MR) Access() ibv.Access { return m.access }

// Valid reports whether the region is registered.
func (m *MR) Valid() bool { return m.valid }

// BoundMWs is how many memory windows are bound to the region.
func (m *MR) BoundMWs() int { return m.boundMWs }

// Locate returns the offset in the region of [addr, addr+n) if it lies
// inside it.
func (m *MR) Locate(addr uint64, n uint32) (uint64, bool) {
	if addr < m.addr {
		return 0, false
	}
	off := addr - m.addr
	if off > m.length || uint64(n) > m.length-off {
		return 0, false
	}
	return off, true
}

// Slice returns the region's bytes [addr, addr+n) if they lie inside it
// and in this process.
func (m *MR) Slice(addr uint64, n uint32) ([]byte, bool) { return ibv.SliceAt(m.buf, m.addr, addr, n) }

// MW is a memory window: a remote key for part of a memory region, bound
// through a QP's send queue. A type-2 window is bound to that QP and
// invalidated through it; a type-1 window is the PD's, may be bound again
// while bound, and only a bind of length 0 or Dealloc unbinds it.
type MW struct {
	pd   *PD
	typ1 bool          // type 1 (ibv_bind_mw), else type 2
	rkey atomic.Uint32 // the application reads it; binds change its key byte

	// Under the table's window lock (or every engine's mutex).
	alive  bool
	bound  bool
	owner  Owner // type 2: what it was bound through, the only one that may use it
	mr     *MR
	addr   uint64
	length uint64
	access ibv.Access
}

// NewMW is a window of pd, of type 1 or (typ1 false) type 2; Table.AddMW
// keys it. One never added is dead: every bind of it fails.
func NewMW(pd *PD, typ1 bool) *MW { return &MW{pd: pd, typ1: typ1} }

// RKey is the window's current remote key.
func (mw *MW) RKey() uint32 { return mw.rkey.Load() }

// PD is the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// Alive reports whether the window is allocated.
func (mw *MW) Alive() bool { return mw.alive }

// Memory window keys live above the region keys, with rxe's index ranges
// (rxe_param.h: regions 1..0x80000, windows 0x80001..0x100000), so a key's
// index says which table it names.
const (
	mrMaxIndex   = 0x80000
	MWFirstIndex = mrMaxIndex + 1 // the key index of the first memory window
	mwMaxIndex   = 0x100000
)

// IsMWKey reports whether key's index names a memory window.
func IsMWKey(key uint32) bool { return key>>8 >= MWFirstIndex && key>>8 <= mwMaxIndex }

// Table maps key indexes to regions and memory windows; keys are
// index<<8 | a random byte, so a stale or guessed key rarely names a live
// region (as rxe). Its changes run as the device's control operations
// (every engine between two packets); an engine reads it under its own
// mutex alone, a poster under RLock.
type Table struct {
	// mu lets posters read the regions (inline sends copy their data at
	// post time) while a control operation changes them.
	mu   sync.RWMutex
	mrs  []*MR // index 0 unused
	free []uint32
	// mwMu orders the engines' binds and invalidations of windows
	// against each other and against remote accesses through windows: a
	// window bound by one QP may be invalidated by another QP of its PD,
	// which another engine may serve.
	mwMu   sync.Mutex
	mws    []*MW // mws[i] has index MWFirstIndex+i
	mwFree []uint32
}

// RLock holds the regions still for a poster; RUnlock lets them go.
func (t *Table) RLock()   { t.mu.RLock() }
func (t *Table) RUnlock() { t.mu.RUnlock() }

// AddMR keys mr with a free index and keyByte; a control operation.
func (t *Table) AddMR(mr *MR, keyByte uint32) error {
	t.mu.Lock() // the table may grow: posters must not read it meanwhile
	defer t.mu.Unlock()
	var idx uint32
	if n := len(t.free); n > 0 {
		idx, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if len(t.mrs) == 0 {
			t.mrs = append(t.mrs, nil)
		}
		if len(t.mrs) > mrMaxIndex {
			return fmt.Errorf("verbs: too many memory regions: %w", ibv.ErrNoMem)
		}
		idx = uint32(len(t.mrs))
		t.mrs = append(t.mrs, nil)
	}
	key := idx<<8 | keyByte&0xff
	mr.lkey, mr.rkey, mr.valid = key, key, true
	t.mrs[idx] = mr
	mr.pd.AddUsers(1)
	return nil
}

// RemoveMR forgets mr; a control operation.
func (t *Table) RemoveMR(mr *MR) {
	idx := mr.lkey >> 8
	// An inline post copying from the region finishes first; later ones
	// no longer find it.
	t.mu.Lock()
	t.mrs[idx] = nil
	mr.valid = false
	t.mu.Unlock()
	t.free = append(t.free, idx)
	mr.pd.AddUsers(-1)
}

// LookupMR returns the live region with this key, or nil.
func (t *Table) LookupMR(key uint32) *MR {
	idx := key >> 8
	if idx == 0 || int(idx) >= len(t.mrs) {
		return nil
	}
	mr := t.mrs[idx]
	if mr == nil || mr.lkey != key {
		return nil
	}
	return mr
}

// Regions is how many regions the table holds.
func (t *Table) Regions() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := 0
	for _, mr := range t.mrs {
		if mr != nil {
			n++
		}
	}
	return n
}

// AddMW keys mw with a free window index and keyByte; a control operation.
func (t *Table) AddMW(mw *MW, keyByte uint32) error {
	var i uint32
	if n := len(t.mwFree); n > 0 {
		i, t.mwFree = t.mwFree[n-1], t.mwFree[:n-1]
	} else {
		if len(t.mws) > mwMaxIndex-MWFirstIndex {
			return fmt.Errorf("verbs: too many memory windows: %w", ibv.ErrNoMem)
		}
		i = uint32(len(t.mws))
		t.mws = append(t.mws, nil)
	}
	mw.rkey.Store((MWFirstIndex+i)<<8 | keyByte&0xff)
	mw.alive = true
	t.mws[i] = mw
	mw.pd.AddUsers(1)
	return nil
}

// RemoveMW unbinds and forgets mw; a control operation.
func (t *Table) RemoveMW(mw *MW) {
	t.unbind(mw)
	i := mw.rkey.Load()>>8 - MWFirstIndex
	t.mws[i] = nil
	t.mwFree = append(t.mwFree, i)
	mw.alive = false
	mw.pd.AddUsers(-1)
}

// LookupMWIndex returns the live window whose rkey has key's index,
// whatever its key byte, or nil: a daemon's client names a window so in a
// BIND_MW.
func (t *Table) LookupMWIndex(key uint32) *MW {
	if !IsMWKey(key) {
		return nil
	}
	i := key>>8 - MWFirstIndex
	if int(i) >= len(t.mws) {
		return nil
	}
	return t.mws[i]
}

// lookupMW returns the live window whose current rkey is key, or nil.
func (t *Table) lookupMW(key uint32) *MW {
	mw := t.LookupMWIndex(key)
	if mw == nil || mw.rkey.Load() != key {
		return nil
	}
	return mw
}

// BindArgs is what a BIND_MW work request gives its window.
type BindArgs struct {
	RKey   uint32 // only the key byte is taken, as rxe does
	Addr   uint64
	Length uint64
	Access ibv.Access
}

// Bind executes a BIND_MW work request of owner, of PD pd, binding mw to
// mr (rxe_check_bind_mw's rules); false is a bind error.
func (t *Table) Bind(owner Owner, pd *PD, mw *MW, mr *MR, b BindArgs) bool {
	t.mwMu.Lock()
	defer t.mwMu.Unlock()
	if !mw.alive {
		return false
	}
	if mw.typ1 {
		// A type-1 window may be bound again while bound; a bind of length
		// 0 leaves it valid but bound to nothing (rxe takes no region then).
		if b.Length == 0 {
			t.unbind(mw)
			mw.rkey.Store(mw.rkey.Load()&^0xff | b.RKey&0xff)
			return true
		}
	} else if mw.bound || mw.pd != pd {
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
	t.unbind(mw) // a type-1 window's previous binding
	mw.rkey.Store(mw.rkey.Load()&^0xff | b.RKey&0xff)
	mw.bound, mw.mr = true, mr
	if !mw.typ1 {
		mw.owner = owner
	}
	mw.addr, mw.length, mw.access = b.Addr, b.Length, b.Access
	mr.boundMWs++
	return true
}

// Invalidate frees the type-2 window named by key for a QP of pd
// (LOCAL_INV or a peer's SEND_WITH_INV). Region keys cannot be
// invalidated: xdproce has no fast-registration regions, and rxe refuses
// user regions the same way; nor can type-1 windows' (rxe_invalidate_mw:
// EINVAL).
func (t *Table) Invalidate(pd *PD, key uint32) bool {
	t.mwMu.Lock()
	defer t.mwMu.Unlock()
	mw := t.lookupMW(key)
	if mw == nil || mw.typ1 || !mw.bound || mw.pd != pd {
		return false
	}
	t.unbind(mw)
	return true
}

// unbind returns a window to the free state; its rkey keeps the key byte
// but names nothing until the next bind.
func (t *Table) unbind(mw *MW) {
	if !mw.bound {
		return
	}
	mw.mr.boundMWs--
	mw.bound, mw.owner, mw.mr = false, 0, nil
	mw.addr, mw.length, mw.access = 0, 0, 0
}

// CheckMWAccess resolves a remote access of owner, of PD pd, through a
// window: the window's rights and range first, then the region under it.
func (t *Table) CheckMWAccess(owner Owner, pd *PD, rkey uint32, va uint64, n uint32, need ibv.Access) (*MR, bool) {
	t.mwMu.Lock()
	defer t.mwMu.Unlock()
	mw := t.lookupMW(rkey)
	if mw == nil || !mw.bound || mw.pd != pd || (!mw.typ1 && mw.owner != owner) || mw.access&need != need {
		return nil, false
	}
	if va < mw.addr || uint64(n) > mw.length || va-mw.addr > mw.length-uint64(n) {
		return nil, false
	}
	if _, ok := mw.mr.Locate(va, n); !ok || !mw.mr.valid {
		return nil, false
	}
	return mw.mr, true
}

// PlaceMR moves the region to address addr and key (both keys), so that
// a capture's requests name it unchanged; a control operation (the golden
// tests replay captures).
func (t *Table) PlaceMR(m *MR, addr uint64, key uint32) error {
	t.RemoveMR(m)
	idx := key >> 8
	for uint32(len(t.mrs)) <= idx {
		t.mrs = append(t.mrs, nil)
	}
	if t.mrs[idx] != nil {
		return fmt.Errorf("key index %#x is taken", idx)
	}
	t.free = deleteIndex(t.free, idx)
	m.addr, m.lkey, m.rkey, m.valid = addr, key, key, true
	t.mrs[idx] = m
	m.pd.AddUsers(1)
	return nil
}

// PlaceMW gives the window key's index and a key byte other than key's
// (the bind sets the capture's); a control operation.
func (t *Table) PlaceMW(mw *MW, key uint32) {
	t.RemoveMW(mw)
	i := key>>8 - MWFirstIndex
	for uint32(len(t.mws)) <= i {
		t.mwFree = append(t.mwFree, uint32(len(t.mws)))
		t.mws = append(t.mws, nil)
	}
	t.mwFree = deleteIndex(t.mwFree, i)
	mw.rkey.Store(key ^ 0x5a)
	mw.alive = true
	t.mws[i] = mw
	mw.pd.AddUsers(1)
}

func deleteIndex(s []uint32, v uint32) []uint32 {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}
