package transport

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/link"
)

// Config describes the port a NIC runs on: verbs.DeviceConfig with its
// defaults applied.
type Config struct {
	MAC       net.HardwareAddr
	GIDs      []netip.Addr
	ActiveMTU int
	Clock     Clock
	BusyPoll  bool
	SpinMax   time.Duration // 0: never spin
	AckHold   time.Duration // negative: ACKs leave at the end of their batch
	// Groups, if set, joins (join true) or leaves the multicast group
	// addr on the port: called in a control operation when the first QP
	// attaches to a group and after the last one detaches.
	Groups   func(addr netip.Addr, join bool) error
	Recovery Recovery // pieces of selective recovery turned off (recovery.go)
	// FastPath, if set, shares idle RC responders with the XDP program
	// (fastpath.go).
	FastPath FastPath
	// AckCoalesce: the requester asks for an ACK only where progress
	// needs one (ackpolicy.go), not on every message's last packet.
	AckCoalesce bool
}

// CaptureFunc sees a frame the NIC sent (outbound) or received, on the
// engine's goroutine: it must not keep the frame.
type CaptureFunc = ibv.CaptureFunc

// NIC is an in-process RNIC: the object tables and the engines that run
// the transport for its QPs, one engine and goroutine per queue of the
// link (each QP is served by the engine of its flow's queue). An engine
// owns its QPs' transport state; the API hands it work through per-QP
// queues and a doorbell, and control operations (Do: creating and
// modifying QPs, deregistering memory) run with every engine's mutex held,
// so that no operation races with a packet in flight.
type NIC struct {
	cfg   Config
	clock Clock
	rng   *rand.Rand // key bytes and QPNs; used by control operations only

	objs   objects
	shards []*engine

	done    chan struct{}
	stopped sync.WaitGroup // the engines' goroutines
	closeMu sync.Mutex
	closed  bool
	// closing is set as Close begins: posts then fail with ErrClosed.
	closing atomic.Bool
	// wakeMu orders a poster's doorbell against Close releasing the link:
	// a Wake never writes to a closed (or reused) eventfd. Posters take
	// it only when the engine sleeps.
	wakeMu   sync.RWMutex
	linkGone bool

	// gone (under every engine's mutex) means Close released the links.
	gone bool
	// doorbellPage, shared with a daemon's clients, says which engines
	// sleep (SetDoorbellPage).
	doorbellPage atomic.Pointer[[]byte]
	// capture, when set, sees every frame sent and received (SetCapture).
	capture atomic.Pointer[CaptureFunc]
	// local are the addresses of cfg.GIDs, as frames carry them: a frame
	// to one of them never leaves the device (engine.loopBack).
	local []netip.Addr
}

// isLocal reports whether ip is one of the device's own addresses.
func (d *NIC) isLocal(ip netip.Addr) bool {
	for _, a := range d.local {
		if a == ip {
			return true
		}
	}
	return false
}

// New starts a NIC with one engine per link, each link one queue of the
// port. Close stops it.
func New(links []link.Link, cfg Config) (*NIC, error) {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("verbs: seeding keys: %w", err)
	}
	d := &NIC{
		cfg: cfg, clock: cfg.Clock,
		rng:  rand.New(rand.NewChaCha8(seed)),
		done: make(chan struct{}),
	}
	d.objs.events.Ready = make(chan struct{}, 1)
	for _, g := range cfg.GIDs {
		d.local = append(d.local, queue.GIDAddr(g))
	}
	for i, l := range links {
		e := &engine{}
		e.init(d, l, i)
		d.shards = append(d.shards, e)
	}
	for _, e := range d.shards {
		e.mcHanded = make([]bool, len(d.shards))
	}
	for _, e := range d.shards {
		d.stopped.Add(1)
		go d.run(e)
	}
	return d, nil
}

// Close stops the engines. Outstanding work is abandoned, as when a device
// is removed; its objects become unusable. It reports whether this call
// closed the NIC (false: it was closed already).
func (d *NIC) Close() bool {
	d.closeMu.Lock()
	if d.closed {
		d.closeMu.Unlock()
		return false
	}
	d.closed = true
	d.closing.Store(true)
	close(d.done)
	d.closeMu.Unlock()
	d.ringAll() // sleeping engines see done at once
	d.stopped.Wait()
	d.lockAll() // an application's Progress may be running an engine
	for _, e := range d.shards {
		// ACKs held for a reply go out now: the peer's requester waits
		// for them, and with retry_cnt 7 it would retry for ever.
		e.flush()
	}
	d.gone = true
	d.unlockAll()
	d.wakeMu.Lock() // a poster ringing now finishes first, later ones see linkGone
	d.linkGone = true
	d.wakeMu.Unlock()
	return true
}

// Closing reports whether Close has begun.
func (d *NIC) Closing() bool { return d.closing.Load() }

// lockAll takes every engine's mutex, in order: no engine is in a step
// until unlockAll.
func (d *NIC) lockAll() {
	for _, e := range d.shards {
		e.mu.Lock()
	}
}

func (d *NIC) unlockAll() {
	for _, e := range d.shards {
		e.mu.Unlock()
	}
}

// Do runs the control operation fn with every engine stopped between two
// packets, then rings them all: fn may have given them work.
func (d *NIC) Do(fn func() error) error { return d.do(fn) }

func (d *NIC) do(fn func() error) error {
	if d.closing.Load() {
		return ibv.ErrClosed
	}
	d.lockAll()
	if d.gone {
		d.unlockAll()
		return ibv.ErrClosed
	}
	err := fn()
	d.unlockAll()
	d.ringAll()
	return err
}

// SetCapture starts showing every frame to f, or, with nil, stops.
func (d *NIC) SetCapture(f CaptureFunc) {
	if f == nil {
		d.capture.Store(nil)
		return
	}
	d.capture.Store(&f)
}

// Now is the NIC's clock.
func (d *NIC) Now() time.Time { return d.clock.Now() }

// QueueCounters returns each engine's counters, in queue order.
func (d *NIC) QueueCounters() ([]ibv.Counters, error) {
	out := make([]ibv.Counters, len(d.shards))
	err := d.do(func() error {
		for i, e := range d.shards {
			out[i] = e.counters
			if r, ok := e.link.(link.RingDropper); ok {
				out[i].RingDrops = r.RingDrops()
			}
		}
		return nil
	})
	return out, err
}

// QPStatus returns a snapshot of every QP, in creation order.
func (d *NIC) QPStatus() ([]ibv.QPStatus, error) {
	var out []ibv.QPStatus
	err := d.do(func() error {
		now := d.clock.Now()
		for _, qp := range d.objs.live {
			out = append(out, d.engineOf(qp).status(qp, now))
		}
		return nil
	})
	return out, err
}

// Regions is how many memory regions the NIC holds.
func (d *NIC) Regions() int { return d.objs.mem.Regions() }

// SetDoorbellPage gives the engines a page, shared with clients, where
// each says whether it sleeps.
func (d *NIC) SetDoorbellPage(page []byte) { d.doorbellPage.Store(&page) }

// Wake rings every engine's doorbell.
func (d *NIC) Wake() { d.ringAll() }

// Engines is the number of engines (queues) the NIC runs.
func (d *NIC) Engines() int { return len(d.shards) }

// NextEvent returns the oldest asynchronous event, waiting for one until
// ctx ends.
func (d *NIC) NextEvent(ctx context.Context) (queue.Event, error) {
	eq := &d.objs.events
	for {
		eq.Mu.Lock()
		if len(eq.Q) > 0 {
			ev := eq.Q[0]
			eq.Q = append(eq.Q[:0], eq.Q[1:]...)
			more := len(eq.Q) > 0
			eq.Mu.Unlock()
			if more {
				select {
				case eq.Ready <- struct{}{}:
				default:
				}
			}
			return ev, nil
		}
		eq.Mu.Unlock()
		select {
		case <-eq.Ready:
		case <-ctx.Done():
			return queue.Event{}, ctx.Err()
		}
	}
}
