package verbs

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/link"
)

// DeviceConfig describes the port a device runs on.
type DeviceConfig struct {
	MAC net.HardwareAddr
	// GIDs is the port's GID table (index 0 the link-local GID, then IPv4
	// addresses as IPv4 or ::ffff:a.b.c.d, then IPv6), as nic.GIDTable.
	GIDs []netip.Addr
	// ActiveMTU is the port's IB MTU in bytes (256..4096).
	ActiveMTU int
	// DataPath says how the port's frames move (XDP mode, zero-copy,
	// multi-buffer, and why not): shown by PortAttr, empty in memory.
	DataPath string
	// Resolve finds the MAC address of a destination (ARP/ND); Modify to RTR
	// calls it when the AH has no DMAC.
	Resolve func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)
	// Clock tells the transport's timers the time; default the real clock.
	Clock Clock
	// BusyPoll keeps the engine spinning instead of sleeping when idle, and
	// lets applications that spin run it themselves (Progress).
	BusyPoll bool
	// SpinMax is how long an idle engine keeps looking for work before it
	// sleeps, as long as the idle gaps it sees are that short: waking a
	// sleeping engine costs a few µs each way, spinning through a long gap
	// costs a core. Zero means DefaultSpinMax; negative, never spin. On one
	// CPU (GOMAXPROCS 1, which follows a cgroup's CPU limit) an engine never
	// spins: it would only delay the application and the kernel work that
	// moves its packets. BusyPoll spins regardless.
	SpinMax time.Duration
	// PortCounters, if set, reads the counters of what moves the port's
	// frames (the XDP program's), which PortCounters reports beside the
	// transport's.
	PortCounters func() ([]NamedCounter, error)
	// AckHold is how long a transmit batch holding nothing but ACKs may wait
	// for a reply the application is about to post, so both leave in one
	// kick (on veth a kick costs a few µs). Zero means DefaultAckHold; a
	// negative value sends ACKs at the end of their receive batch.
	AckHold time.Duration
}

// DefaultSpinMax is the SpinMax of a device that does not set one: a
// little more than a round trip on veth, so a ping-pong's engines do not
// sleep between its messages.
const DefaultSpinMax = 50 * time.Microsecond

// DefaultAckHold is the AckHold of a device that does not set one: about
// what an application spinning on its CQ or memory takes to answer.
const DefaultAckHold = 5 * time.Microsecond

// DeviceAttr are the device's capabilities (a subset of ibv_device_attr).
type DeviceAttr struct {
	MaxQP, MaxQPWR, MaxSGE, MaxCQE, MaxInlineData int
	MaxMRSize, MaxMsgSize                         uint64
	MaxQPRdAtom, MaxQPInitRdAtom                  int
	NodeGUID                                      uint64
}

// PortAttr describes the device's port (a subset of ibv_port_attr).
type PortAttr struct {
	State     string // "ACTIVE"
	MaxMTU    MTU
	ActiveMTU MTU
	GIDTblLen int
	DataPath  string // DeviceConfig.DataPath
}

// Device is an RNIC: the verbs objects and the engines that run the
// transport for its QPs, one engine and goroutine per queue of the link
// (each QP is served by the engine of its flow's queue). An engine owns
// its QPs' transport state; the API hands it work through per-QP queues
// and a doorbell, and control operations (creating and modifying QPs,
// deregistering memory) run with every engine's mutex held, so that no
// operation races with a packet in flight.
type Device struct {
	cfg   DeviceConfig
	clock Clock
	rng   *rand.Rand // key bytes and QPNs; used by control operations only

	objs   objects
	shards []*engine
	ahs    atomic.Int32 // address handles alive

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
	onClose  func() error // releases what Open set up, after the engines stop

	// gone (under every engine's mutex) means Close released the links.
	gone bool
	// doorbellPage, shared with a daemon's clients, says which engines
	// sleep (SetDoorbellPage).
	doorbellPage atomic.Pointer[[]byte]
	// capture, when set, sees every frame sent and received (SetCapture).
	capture atomic.Pointer[CaptureFunc]
	// rem, for a device attached to a daemon (Dial), is the connection;
	// the device then has no engines of its own.
	rem *remote
}

// NewDevice starts a device on link. Close stops it.
func NewDevice(link Link, cfg DeviceConfig) (*Device, error) {
	return NewMultiQueueDevice([]Link{link}, cfg)
}

// NewMultiQueueDevice starts a device with one engine per link, each link
// one queue of the port. Close stops it.
func NewMultiQueueDevice(links []Link, cfg DeviceConfig) (*Device, error) {
	if len(links) == 0 {
		return nil, fmt.Errorf("verbs: a device needs a link: %w", ErrInvalid)
	}
	if MTUFromBytes(cfg.ActiveMTU) == 0 {
		return nil, fmt.Errorf("verbs: active MTU %d is not an IB MTU: %w", cfg.ActiveMTU, ErrInvalid)
	}
	if len(cfg.MAC) != 6 || len(cfg.GIDs) == 0 {
		return nil, fmt.Errorf("verbs: a device needs a MAC address and a GID table: %w", ErrInvalid)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.AckHold == 0 {
		cfg.AckHold = DefaultAckHold
	}
	switch {
	case cfg.SpinMax == 0:
		cfg.SpinMax = DefaultSpinMax
	case cfg.SpinMax < 0:
		cfg.SpinMax = 0
	}
	if runtime.GOMAXPROCS(0) == 1 {
		cfg.SpinMax = 0
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("verbs: seeding keys: %w", err)
	}
	d := &Device{
		cfg: cfg, clock: cfg.Clock,
		rng:  rand.New(rand.NewChaCha8(seed)),
		done: make(chan struct{}),
	}
	d.objs.events.ready = make(chan struct{}, 1)
	for i, l := range links {
		e := &engine{}
		e.init(d, l, i)
		d.shards = append(d.shards, e)
	}
	for _, e := range d.shards {
		d.stopped.Add(1)
		go d.run(e)
	}
	return d, nil
}

// Close stops the engines. Outstanding work is abandoned, as when a device
// is removed; QPs, CQs and MRs become unusable.
func (d *Device) Close() error {
	if d.rem != nil {
		return d.closeRemote()
	}
	d.closeMu.Lock()
	if d.closed {
		d.closeMu.Unlock()
		return nil
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
	if d.onClose != nil {
		return d.onClose()
	}
	return nil
}

// lockAll takes every engine's mutex, in order: no engine is in a step
// until unlockAll.
func (d *Device) lockAll() {
	for _, e := range d.shards {
		e.mu.Lock()
	}
}

func (d *Device) unlockAll() {
	for _, e := range d.shards {
		e.mu.Unlock()
	}
}

// do runs the control operation fn with every engine stopped between two
// packets, then rings them all: fn may have given them work.
func (d *Device) do(fn func() error) error {
	if d.closing.Load() {
		return ErrClosed
	}
	d.lockAll()
	if d.gone {
		d.unlockAll()
		return ErrClosed
	}
	err := fn()
	d.unlockAll()
	d.ringAll()
	return err
}

// CaptureFunc sees a frame the device sent (outbound) or received, on the
// engine's goroutine: it must not keep the frame, and what it takes slows
// the device down.
type CaptureFunc func(frame []byte, outbound bool)

// SetCapture starts showing every frame to f, or, with nil, stops; it may be
// called at any time (xdproce up --pcap).
func (d *Device) SetCapture(f CaptureFunc) {
	if f == nil {
		d.capture.Store(nil)
		return
	}
	d.capture.Store(&f)
}

// MAC is the port's MAC address.
func (d *Device) MAC() net.HardwareAddr { return d.cfg.MAC }

// QueryDevice returns the device's capabilities.
func (d *Device) QueryDevice() DeviceAttr {
	guid := NodeGUID(d.cfg.MAC)
	return DeviceAttr{
		MaxQP: MaxQP, MaxQPWR: MaxQPWR, MaxSGE: MaxSGE, MaxCQE: MaxCQE, MaxInlineData: MaxInlineData,
		MaxMRSize: MaxMRSize, MaxMsgSize: MaxMsgSize, MaxQPRdAtom: MaxRdAtomic, MaxQPInitRdAtom: MaxRdAtomic,
		NodeGUID: guid,
	}
}

// QueryPort describes port 1.
func (d *Device) QueryPort() PortAttr {
	return PortAttr{State: "ACTIVE", MaxMTU: MTU4096, ActiveMTU: MTUFromBytes(d.cfg.ActiveMTU), GIDTblLen: len(d.cfg.GIDs),
		DataPath: d.cfg.DataPath}
}

// QueryGID returns GID index i of port 1.
func (d *Device) QueryGID(i int) (netip.Addr, error) {
	if i < 0 || i >= len(d.cfg.GIDs) {
		return netip.Addr{}, fmt.Errorf("verbs: GID index %d of %d: %w", i, len(d.cfg.GIDs), ErrInvalid)
	}
	return d.cfg.GIDs[i], nil
}

// Counters returns the transport's counters (rxe's names).
func (d *Device) Counters() (Counters, error) {
	var c Counters
	per, err := d.QueueCounters()
	for i := range per {
		c.Add(&per[i])
	}
	return c, err
}

// PortCounters returns the counters of what moves the port's frames (the
// XDP program's), none for a device on an in-memory link.
func (d *Device) PortCounters() ([]NamedCounter, error) {
	if d.rem != nil {
		return d.rem.portCounters()
	}
	if d.cfg.PortCounters == nil {
		return nil, nil
	}
	return d.cfg.PortCounters()
}

// QueueCounters returns each engine's counters, in queue order: how the
// device's work spreads over its queues.
func (d *Device) QueueCounters() ([]Counters, error) {
	if d.rem != nil {
		c, err := d.rem.counters()
		return []Counters{c}, err
	}
	out := make([]Counters, len(d.shards))
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

// BusyPolling reports whether the engines spin instead of sleeping
// (DeviceConfig.BusyPoll).
func (d *Device) BusyPolling() bool { return d.cfg.BusyPoll }
