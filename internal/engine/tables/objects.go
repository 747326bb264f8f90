package tables

import (
	"net/netip"
	"sync"

	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
)

// LookupMR returns the live region with this key, or nil.
func (e *Objects) LookupMR(key uint32) *memory.MR { return e.Mem.LookupMR(key) }

// LookupMWIndex returns the live window whose rkey has key's index.
func (e *Objects) LookupMWIndex(key uint32) *memory.MW { return e.Mem.LookupMWIndex(key) }

// Objects are the device's tables, shared by its engines: the QPs by QPN,
// the memory regions and windows, the protection domains' numbers and the
// asynchronous events. Control operations (Device.do) change them with
// every engine's mutex held, so an engine reads them under its own mutex
// alone; the few changes an engine makes itself (binding and invalidating
// windows, atomics) take the narrower locks below.
type Objects struct {
	Qps     []*queue.QP // by QPN; nil where free
	Live    []*queue.QP // QPs that exist, in creation order
	NextQPN uint32      // a QPN to use next if free (the golden tests pin the captures' QPNs); 0: random
	// QPSeq numbers the QPs ever created: their owner identities, which
	// the memory windows bound through them keep (QPNs are reused).
	QPSeq uint64
	// Mem holds the memory regions and windows; it has its own locks for
	// posters (inline data) and for the windows the engines bind.
	Mem memory.Table
	// AtomicMu makes each atomic operation's read-modify-write one step
	// for every engine (IBV_ATOMIC_HCA: atomic across all QPs of the
	// device), as rxe's atomic_ops_lock does.
	AtomicMu sync.Mutex
	PDSeq    uint32
	// SharedQPs are the QPs whose work requests a daemon's clients post to
	// shared rings (shared.go).
	SharedQPs []*queue.QP
	// SharedSRQs are the SRQs a daemon's clients post to shared rings.
	SharedSRQs []*queue.SRQ
	Events     queue.EventQueue // asynchronous events, read by Device.GetAsyncEvent
	// Groups are the multicast groups QPs are attached to, by their
	// address as frames carry it; McAttached counts the attachments
	// (mcast.go).
	Groups     map[netip.Addr]*McGroup
	McAttached int
}
