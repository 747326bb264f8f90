package verbs

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
)

// MWType is a memory window's type (enum ibv_mw_type).
type MWType = ibv.MWType

const (
	MWType1 = ibv.MWType1 // bound with ibv_bind_mw (a BIND_MW work request), any QP of its PD may use it
	MWType2 = ibv.MWType2 // bound by a BIND_MW work request on a QP, only that QP may use it
)

// MW is a memory window: a remote key for part of a memory region, bound
// through a QP's send queue. As rxe's, it is allocated with an rkey that
// names nothing, and a BIND_MW work request gives it a range, rights and a
// new key byte. A type-2 window is then bound to that QP, and LOCAL_INV or
// a peer's SEND_WITH_INV frees it again; a type-1 window (ibv_bind_mw) is
// the PD's, may be bound again while bound, and only a bind of length 0 or
// Dealloc unbinds it.
type MW struct {
	pd  *PD
	typ MWType
	ops ibv.MWOps
}

// MWBind is a BIND_MW work request's window and what it exposes (struct
// ibv_mw_bind plus struct ibv_mw_bind_info).
type MWBind struct {
	MW *MW
	// RKey is the window's rkey once bound; only its low byte (the key byte)
	// is taken, as rxe does. IncRKey(mw.RKey()) gives a fresh one.
	RKey uint32
	// MR, Addr and Length: the part of the region the window exposes; the
	// region needs AccessMWBind. A type-1 window bound with Length 0 (and
	// no MR) exposes nothing.
	MR     *MR
	Addr   uint64
	Length uint64
	// Access is a combination of AccessRemoteRead, AccessRemoteWrite and
	// AccessRemoteAtomic.
	Access Access
}

// IncRKey returns rkey with its key byte incremented (ibv_inc_rkey).
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// RKey is the window's current remote key.
func (mw *MW) RKey() uint32 { return mw.ops.RKey() }

// Type is the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// AllocMW creates a memory window of the protection domain (ibv_alloc_mw)
// of type 1 or 2.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("verbs: memory window type %d (types 1 and 2 exist): %w", typ, ErrInvalid)
	}
	ops, err := pd.ops.AllocMW(typ)
	if err != nil {
		return nil, err
	}
	return &MW{pd: pd, typ: typ, ops: ops}, nil
}

// Dealloc frees the window (ibv_dealloc_mw); a bound window is unbound
// first, so its rkey stops working when Dealloc returns.
func (mw *MW) Dealloc() error { return mw.ops.Dealloc() }
