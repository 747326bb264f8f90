package engine

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/engine/tables"
	"github.com/xdproce/xdproce/internal/ibv"
)

// Device is what the engines share of the NIC and read of it: the port's
// configuration, the object tables, the engines themselves and the state
// of the NIC's life. The control operations are the NIC's.
type Device struct {
	Cfg   port.Config
	Clock port.Clock

	Objs   tables.Objects
	Shards []*Engine

	Done    chan struct{}
	Stopped sync.WaitGroup // the engines' goroutines
	// CloseBegun is set as Close begins: posts then fail with ErrClosed.
	CloseBegun atomic.Bool
	// WakeMu orders a poster's doorbell against Close releasing the link:
	// a Wake never writes to a closed (or reused) eventfd. Posters take
	// it only when the engine sleeps.
	WakeMu   sync.RWMutex
	LinkGone bool

	// Gone (under every engine's mutex) means Close released the links.
	Gone bool
	// DoorbellPage, shared with a daemon's clients, says which engines
	// sleep (SetDoorbellPage).
	DoorbellPage atomic.Pointer[[]byte]
	// Capture, when set, sees every frame sent and received (SetCapture).
	Capture atomic.Pointer[ibv.CaptureFunc]
	// Local are the addresses of Cfg.GIDs, as frames carry them: a frame
	// to one of them never leaves the device (engine.loopBack).
	Local []netip.Addr
}

// isLocal reports whether ip is one of the device's own addresses.
func (d *Device) isLocal(ip netip.Addr) bool {
	for _, a := range d.Local {
		if a == ip {
			return true
		}
	}
	return false
}

// LockAll takes every engine's mutex, in order: no engine is in a step
// until UnlockAll.
func (d *Device) LockAll() {
	for _, e := range d.Shards {
		e.Mu.Lock()
	}
}

func (d *Device) UnlockAll() {
	for _, e := range d.Shards {
		e.Mu.Unlock()
	}
}
