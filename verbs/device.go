package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/inproc"
	"github.com/xdproce/xdproce/loader"
)

// DeviceConfig describes the port a device runs on.
type DeviceConfig struct {
	// fast is the XDP responder fast path Open found (Options.FastPath).
	fast *loader.FastPath
	MAC  net.HardwareAddr
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
	// Groups, if set, makes the port a member of the multicast group addr
	// (join true) or no longer one: called when the device's first QP
	// attaches to the group and after its last one detaches
	// (verbs/mcast.go). Open sets it to the port's (nic.Port.JoinGroup).
	Groups func(addr netip.Addr, join bool) error
	// Recovery turns pieces of selective recovery off, to measure what
	// each is worth (docs/recovery.md); the zero value runs them all.
	Recovery Recovery
	// AckCoalesce makes the requester ask for an ACK only where progress
	// needs one — every MaxPktsPerAck packets, on the packet that fills
	// the window, and on the last packet it sends before the send queue
	// drains or waits — instead of on every message's last packet (as
	// rxe). A burst of WRITEs then draws one ACK. On with the XDP fast
	// path (Options.FastPath), where every ACK costs an XDP_TX.
	AckCoalesce bool
}

// Recovery is DeviceConfig.Recovery: pieces of selective recovery turned off.
type Recovery = port.Recovery

// The pieces of selective recovery (docs/recovery.md).
const (
	NoReadHoles = port.NoReadHoles // READ responses past a gap dropped, the READ asked again to its end
	NoHold      = port.NoHold      // request packets past a hole dropped by the responder
	NoProbe     = port.NoProbe     // a sequence NAK goes back over everything after it at once
)

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
	// MaxDMSize is the most device memory one AllocDM gives, 0 where the
	// device has none (ibv_device_attr_ex's max_dm_size).
	MaxDMSize int
}

// PortAttr describes the device's port (a subset of ibv_port_attr).
type PortAttr struct {
	State     string // "ACTIVE"
	MaxMTU    MTU
	ActiveMTU MTU
	GIDTblLen int
	DataPath  string // DeviceConfig.DataPath
}

// Device is an RNIC. Its provider (ibv.DeviceOps) is in-process
// (NewDevice, Open: internal/inproc, the objects and the engines that run
// the transport for its QPs, one engine and goroutine per queue of the
// link) or a daemon's (Dial: internal/attached, the objects live in the
// daemon). The API objects validate what applications ask and hand it to
// the provider in one call, as libibverbs hands it to a provider through
// verbs_context_ops.
type Device struct {
	cfg DeviceConfig
	ops ibv.DeviceOps

	closeMu sync.Mutex
	closed  bool
	// closing is set as Close begins: posts then fail with ErrClosed.
	closing atomic.Bool
	onClose func() error // releases what Open set up, after the engines stop
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
	ops, err := inproc.New(links, inproc.Config{
		Config: port.Config{MAC: cfg.MAC, GIDs: cfg.GIDs, ActiveMTU: cfg.ActiveMTU, Clock: cfg.Clock,
			BusyPoll: cfg.BusyPoll, SpinMax: cfg.SpinMax, AckHold: cfg.AckHold, Groups: cfg.Groups, Recovery: cfg.Recovery,
			AckCoalesce: cfg.AckCoalesce || cfg.fast != nil},
		Resolve: cfg.Resolve, PortCounters: cfg.PortCounters, FastPath: cfg.fast})
	if err != nil {
		return nil, err
	}
	return &Device{cfg: cfg, ops: ops}, nil
}

// Close stops the device: in-process its engines stop, outstanding work
// is abandoned, as when a device is removed, and QPs, CQs and MRs become
// unusable; attached, it detaches from the daemon, which destroys the
// device's objects (the regions' memory stays mapped: slices of it stay
// valid).
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.closing.Store(true)
	err := d.ops.Close()
	if d.onClose != nil {
		err = errors.Join(err, d.onClose())
	}
	return err
}

// CaptureFunc sees a frame the device sent (outbound) or received, on the
// engine's goroutine: it must not keep the frame, and what it takes slows
// the device down.
type CaptureFunc = ibv.CaptureFunc

// SetCapture starts showing every frame to f, or, with nil, stops; it may be
// called at any time (xdproce up --pcap). It does nothing on a device
// attached to a daemon.
func (d *Device) SetCapture(f CaptureFunc) { d.ops.SetCapture(f) }

// MAC is the port's MAC address.
func (d *Device) MAC() net.HardwareAddr { return d.cfg.MAC }

// QueryDevice returns the device's capabilities.
func (d *Device) QueryDevice() DeviceAttr {
	guid := NodeGUID(d.cfg.MAC)
	return DeviceAttr{
		MaxQP: MaxQP, MaxQPWR: MaxQPWR, MaxSGE: MaxSGE, MaxCQE: MaxCQE, MaxInlineData: MaxInlineData,
		MaxMRSize: MaxMRSize, MaxMsgSize: MaxMsgSize, MaxQPRdAtom: MaxRdAtomic, MaxQPInitRdAtom: MaxRdAtomic,
		NodeGUID: guid, MaxDMSize: d.ops.MaxDMSize(),
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
func (d *Device) PortCounters() ([]NamedCounter, error) { return d.ops.PortCounters() }

// QueueCounters returns each engine's counters, in queue order: how the
// device's work spreads over its queues.
func (d *Device) QueueCounters() ([]Counters, error) { return d.ops.QueueCounters() }

// BusyPolling reports whether the engines spin instead of sleeping
// (DeviceConfig.BusyPoll).
func (d *Device) BusyPolling() bool { return d.cfg.BusyPoll }

// Progress runs one round of each engine on the calling goroutine, unless
// another goroutine is running it, and reports whether there was work. An
// application that spins anyway (on a BusyPoll device's CQ, which calls
// Progress itself, or on memory, as ib_write_lat does) thereby moves its
// packets the moment they can move, instead of waiting for the engine's
// goroutine to get a processor: on a small machine that saves a scheduler
// hand-off each way. The engines' goroutines keep running, so an
// application that stops spinning stalls nothing. A device attached to a
// daemon has no engines here: false.
func (d *Device) Progress() bool { return d.ops.Progress() }

// SetDoorbellPage gives the engines a page, shared with clients, where
// each says whether it sleeps (uverbs.SetSleeping): a client rings the
// doorbell only for a sleeping engine.
func (d *Device) SetDoorbellPage(page []byte) { d.ops.SetDoorbellPage(page) }

// Wake rings every engine's doorbell: the daemon calls it when a client
// signals that it posted to a sleeping engine.
func (d *Device) Wake() { d.ops.Wake() }

// WatchDoorbell has the device's engine (0 to Engines()-1) wait on fd, a
// daemon's client's doorbell for that engine, itself, so that a ring wakes
// it in one hop and wakes no other engine. It is false, with nothing done,
// where the engine cannot (a link that watches nothing, a device attached
// to a daemon): the caller then reads fd and calls Wake. The caller keeps
// fd open until UnwatchDoorbell.
func (d *Device) WatchDoorbell(engine, fd int) (bool, error) { return d.ops.WatchDoorbell(engine, fd) }

// UnwatchDoorbell stops WatchDoorbell's watch: once it returns, the
// engine reads fd no more.
func (d *Device) UnwatchDoorbell(engine, fd int) error { return d.ops.UnwatchDoorbell(engine, fd) }

// Engines is the number of engines (queues) the device runs.
func (d *Device) Engines() int { return d.ops.Engines() }
