package transport

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/xdproce/xdproce/internal/engine"
	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/link"
)

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
	dev *engine.Device // not embedded: the engine's methods are not the NIC's (TestNICSurface)
	rng *rand.Rand     // key bytes and QPNs; used by control operations only

	closeMu sync.Mutex
	closed  bool
}

// New starts a NIC with one engine per link, each link one queue of the
// port. Close stops it.
func New(links []link.Link, cfg port.Config) (*NIC, error) {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("verbs: seeding keys: %w", err)
	}
	d := &NIC{
		dev: &engine.Device{Cfg: cfg, Clock: cfg.Clock, Done: make(chan struct{})},
		rng: rand.New(rand.NewChaCha8(seed)),
	}
	d.dev.Objs.Events.Ready = make(chan struct{}, 1)
	for _, g := range cfg.GIDs {
		d.dev.Local = append(d.dev.Local, queue.GIDAddr(g))
	}
	for i, l := range links {
		e := &engine.Engine{}
		e.Init(d.dev, l, i)
		d.dev.Shards = append(d.dev.Shards, e)
	}
	for _, e := range d.dev.Shards {
		e.McHanded = make([]bool, len(d.dev.Shards))
	}
	for _, e := range d.dev.Shards {
		d.dev.Stopped.Add(1)
		go d.dev.Run(e)
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
	d.dev.CloseBegun.Store(true)
	close(d.dev.Done)
	d.closeMu.Unlock()
	d.dev.RingAll() // sleeping engines see done at once
	d.dev.Stopped.Wait()
	d.dev.LockAll() // an application's Progress may be running an engine
	for _, e := range d.dev.Shards {
		// ACKs held for a reply go out now: the peer's requester waits
		// for them, and with retry_cnt 7 it would retry for ever.
		e.Flush()
	}
	d.dev.Gone = true
	d.dev.UnlockAll()
	d.dev.WakeMu.Lock() // a poster ringing now finishes first, later ones see LinkGone
	d.dev.LinkGone = true
	d.dev.WakeMu.Unlock()
	return true
}

// Closing reports whether Close has begun.
func (d *NIC) Closing() bool { return d.dev.CloseBegun.Load() }

// Do runs the control operation fn with every engine stopped between two
// packets, then rings them all: fn may have given them work.
func (d *NIC) Do(fn func() error) error { return d.do(fn) }

func (d *NIC) do(fn func() error) error {
	if d.dev.CloseBegun.Load() {
		return ibv.ErrClosed
	}
	d.dev.LockAll()
	if d.dev.Gone {
		d.dev.UnlockAll()
		return ibv.ErrClosed
	}
	err := fn()
	d.dev.UnlockAll()
	d.dev.RingAll()
	return err
}

// SetCapture starts showing every frame to f, or, with nil, stops.
func (d *NIC) SetCapture(f CaptureFunc) {
	if f == nil {
		d.dev.Capture.Store(nil)
		return
	}
	d.dev.Capture.Store(&f)
}

// Now is the NIC's clock.
func (d *NIC) Now() time.Time { return d.dev.Clock.Now() }

// QueueCounters returns each engine's counters, in queue order.
func (d *NIC) QueueCounters() ([]ibv.Counters, error) {
	out := make([]ibv.Counters, len(d.dev.Shards))
	err := d.do(func() error {
		for i, e := range d.dev.Shards {
			out[i] = e.Counters
			if r, ok := e.Link.(link.RingDropper); ok {
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
		now := d.dev.Clock.Now()
		for _, qp := range d.dev.Objs.Live {
			out = append(out, status(d.dev.EngineOf(qp), qp, now))
		}
		return nil
	})
	return out, err
}

// Regions is how many memory regions the NIC holds.
func (d *NIC) Regions() int { return d.dev.Objs.Mem.Regions() }

// SetDoorbellPage gives the engines a page, shared with clients, where
// each says whether it sleeps.
func (d *NIC) SetDoorbellPage(page []byte) { d.dev.DoorbellPage.Store(&page) }

// Wake rings every engine's doorbell.
func (d *NIC) Wake() { d.dev.RingAll() }

// Engines is the number of engines (queues) the NIC runs.
func (d *NIC) Engines() int { return len(d.dev.Shards) }

// NextEvent returns the oldest asynchronous event, waiting for one until
// ctx ends.
func (d *NIC) NextEvent(ctx context.Context) (queue.Event, error) {
	eq := &d.dev.Objs.Events
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
