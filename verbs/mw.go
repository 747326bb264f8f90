package verbs

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/transport"
)

// MWType is a memory window's type (enum ibv_mw_type).
type MWType uint8

const (
	MWType1 MWType = 1 // bound with ibv_bind_mw; not supported
	MWType2 MWType = 2 // bound by a BIND_MW work request on a QP
)

// MW is a type-2 memory window: a remote key for part of a memory region,
// bound and invalidated through a QP's send queue. As rxe's, it is
// allocated free (its rkey names nothing), a BIND_MW work request gives it
// a range, rights and a new key byte, and LOCAL_INV or a peer's
// SEND_WITH_INV frees it again.
type MW struct {
	pd  *PD
	c   *transport.MW // the engines' window, in-process
	att *attachedMW   // a client's side: the window lives in the daemon
}

// MWBind is a BIND_MW work request's window and what it exposes (struct
// ibv_mw_bind plus struct ibv_mw_bind_info).
type MWBind struct {
	MW *MW
	// RKey is the window's rkey once bound; only its low byte (the key byte)
	// is taken, as rxe does. IncRKey(mw.RKey()) gives a fresh one.
	RKey uint32
	// MR, Addr and Length: the part of the region the window exposes; the
	// region needs AccessMWBind.
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
func (mw *MW) RKey() uint32 {
	if mw.att != nil {
		return mw.att.rkey.Load()
	}
	return mw.c.RKey()
}

// AllocMW creates a memory window of the protection domain (ibv_alloc_mw).
// Only type 2 is supported.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType2 {
		return nil, fmt.Errorf("verbs: memory window type %d (only type 2 is supported): %w", typ, ErrInvalid)
	}
	if pd.dev.att != nil {
		return pd.allocAttachedMW(typ)
	}
	c, err := pd.c.AllocMW()
	if err != nil {
		return nil, err
	}
	return &MW{pd: pd, c: c}, nil
}

// Dealloc frees the window (ibv_dealloc_mw); a bound window is unbound
// first, so its rkey stops working when Dealloc returns.
func (mw *MW) Dealloc() error {
	if mw.att != nil {
		return mw.deallocAttached()
	}
	return mw.c.Dealloc()
}
