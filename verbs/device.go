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
	// AckHold is how long a transmit batch holding nothing but ACKs may wait
	// for a reply the application is about to post, so both leave in one
	// kick (on veth a kick costs a few µs). Zero means DefaultAckHold; a
	// negative value sends ACKs at the end of their receive batch.
	AckHold time.Duration
}

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

// Device is an RNIC: the verbs objects and the engine goroutine that runs the
// transport for all its QPs. The engine owns all transport state; the API
// hands it work through per-QP queues and a doorbell, and control operations
// (creating and modifying QPs, deregistering memory) through a command
// channel, so that no operation races with a packet in flight.
type Device struct {
	cfg   DeviceConfig
	link  Link
	clock Clock
	rng   *rand.Rand // key bytes; used by the engine goroutine only (under cmds)

	cmds    chan func()
	done    chan struct{}
	stopped chan struct{}
	closeMu sync.Mutex
	closed  bool
	// closing is set as Close begins: posts then fail with ErrClosed.
	closing atomic.Bool
	// wakeMu orders a poster's doorbell against Close releasing the link:
	// a Wake never writes to a closed (or reused) eventfd. Posters take
	// it only when the engine sleeps.
	wakeMu   sync.RWMutex
	linkGone bool
	onClose  func() error // releases what Open set up, after the engine stops

	// The doorbell. A poster sets work and wakes the link only when the
	// engine said it is going to sleep; the engine says so, then looks at
	// work once more before sleeping, so no post is missed and a busy engine
	// costs posters no system call.
	work     atomic.Bool
	sleeping atomic.Bool
	// QPs with new posts, appended once per engine pass (QP.queued guards).
	postedMu sync.Mutex
	posted   []*QP

	// engMu is held by whoever runs the engine: its goroutine, or an
	// application in Progress. gone (under engMu) means Close released the
	// link.
	engMu sync.Mutex
	gone  bool

	e engine
}

// NewDevice starts a device on link. Close stops it.
func NewDevice(link Link, cfg DeviceConfig) (*Device, error) {
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
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("verbs: seeding keys: %w", err)
	}
	d := &Device{
		cfg: cfg, link: link, clock: cfg.Clock,
		rng:     rand.New(rand.NewChaCha8(seed)),
		cmds:    make(chan func(), 16),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	d.e.init(d)
	go d.run()
	return d, nil
}

// Close stops the engine. Outstanding work is abandoned, as when a device is
// removed; QPs, CQs and MRs become unusable.
func (d *Device) Close() error {
	d.closeMu.Lock()
	if d.closed {
		d.closeMu.Unlock()
		return nil
	}
	d.closed = true
	d.closing.Store(true)
	close(d.done)
	d.closeMu.Unlock()
	<-d.stopped
	d.engMu.Lock() // an application's Progress may be running the engine
	d.gone = true
	d.engMu.Unlock()
	d.wakeMu.Lock() // a poster ringing now finishes first, later ones see linkGone
	d.linkGone = true
	d.wakeMu.Unlock()
	if d.onClose != nil {
		return d.onClose()
	}
	return nil
}

// do runs fn on the engine goroutine and waits for it.
func (d *Device) do(fn func() error) error {
	errc := make(chan error, 1)
	select {
	case d.cmds <- func() { errc <- fn() }:
	case <-d.done:
		return ErrClosed
	}
	d.ring()
	select {
	case err := <-errc:
		return err
	case <-d.stopped:
		return ErrClosed
	}
}

// ring tells the engine there is work, waking it if it sleeps.
func (d *Device) ring() {
	d.work.Store(true)
	if d.sleeping.Load() {
		d.wakeMu.RLock()
		if !d.linkGone {
			d.link.Wake()
		}
		d.wakeMu.RUnlock()
	}
}

// notePosted hands the engine a QP that gained posted work requests.
func (d *Device) notePosted(qp *QP) {
	if qp.queued.CompareAndSwap(false, true) {
		d.postedMu.Lock()
		d.posted = append(d.posted, qp)
		d.postedMu.Unlock()
	}
	d.ring()
}

// takePosted swaps the list of QPs with new posts for the engine's spare one.
func (d *Device) takePosted(spare []*QP) []*QP {
	d.postedMu.Lock()
	l := d.posted
	d.posted = spare[:0]
	d.postedMu.Unlock()
	return l
}

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
	err := d.do(func() error {
		c = d.e.counters
		if r, ok := d.link.(ringDropper); ok {
			c.RingDrops = r.RingDrops()
		}
		return nil
	})
	return c, err
}

// ringDropper is a Link whose kernel rings can drop frames before the engine
// sees them (AF_XDP).
type ringDropper interface{ RingDrops() uint64 }

// Counters are the device's transport counters under rxe's hw_counters names.
type Counters struct {
	SentPkts, RcvdPkts                         uint64
	DuplicateRequest, OutOfSeqRequest          uint64
	RcvdSeqErr, RcvdRNRErr, SendRNRErr         uint64
	CompleterRetryErr, RetryExceededErr        uint64
	RetryRNRExceededErr                        uint64
	RDMASends, RDMARecvs                       uint64
	DroppedMalformed, DroppedNoQP, AckDeferred uint64
	DroppedBadPKey                             uint64 // BTH P_Key not the default partition's
	SendErr                                    uint64 // frames lost for want of a transmit buffer
	// DroppedReplies counts responses not queued because a QP already had
	// maxQueuedReplies waiting (duplicate READs piling up: replies.go).
	DroppedReplies uint64
	// AckHeld counts batches of ACKs held for a reply to leave with them
	// (DeviceConfig.AckHold); AckHoldMissed those that left without one.
	AckHeld, AckHoldMissed uint64
	// ResponseOutOfWindow counts responses dropped because they answer
	// nothing outstanding: a PSN ahead of the last one sent, an ACK or
	// NAK to an idle QP, a READ response or atomic ACK no READ or atomic
	// of the QP holds, or one of the wrong opcode or length for its place
	// (forged, or from another connection). DuplicateResponse counts those
	// behind the oldest unacknowledged PSN or already placed: the answers
	// to retransmissions, dropped without effect. LostResponseRetry counts
	// READ and atomic requests sent again at once because a later response
	// showed theirs were lost.
	ResponseOutOfWindow, DuplicateResponse, LostResponseRetry uint64
	// TransportTimeouts counts expiries of the transport timer: the
	// losses nothing but time could reveal (each also counts in
	// CompleterRetryErr).
	TransportTimeouts uint64
	// RingDrops counts frames the kernel dropped on their way in because the
	// AF_XDP RX ring was full or the fill ring empty (XDP_STATISTICS): the
	// engine did not keep up.
	RingDrops uint64
}

// NamedCounter is one counter under its rxe hw_counters name (or, for
// those rxe lacks, xdproce's own in the same style).
type NamedCounter struct {
	Name  string
	Value uint64
}

// counterField is one row of the counters' name table.
type counterField struct {
	name string
	p    *uint64
}

// fields is the one table of the counters' names, in a fixed order.
func (c *Counters) fields() []counterField {
	return []counterField{
		{"sent_pkts", &c.SentPkts}, {"rcvd_pkts", &c.RcvdPkts},
		{"duplicate_request", &c.DuplicateRequest}, {"out_of_seq_request", &c.OutOfSeqRequest},
		{"rcvd_seq_err", &c.RcvdSeqErr}, {"rcvd_rnr_err", &c.RcvdRNRErr}, {"send_rnr_err", &c.SendRNRErr},
		{"completer_retry_err", &c.CompleterRetryErr}, {"retry_exceeded_err", &c.RetryExceededErr},
		{"retry_rnr_exceeded_err", &c.RetryRNRExceededErr}, {"rdma_sends", &c.RDMASends}, {"rdma_recvs", &c.RDMARecvs},
		{"ack_deferred", &c.AckDeferred}, {"dropped_malformed", &c.DroppedMalformed}, {"dropped_no_qp", &c.DroppedNoQP},
		{"dropped_bad_pkey", &c.DroppedBadPKey},
		{"response_out_of_window", &c.ResponseOutOfWindow}, {"duplicate_response", &c.DuplicateResponse},
		{"lost_response_retry", &c.LostResponseRetry}, {"transport_timeouts", &c.TransportTimeouts},
		{"send_err", &c.SendErr}, {"dropped_replies", &c.DroppedReplies}, {"ring_drops", &c.RingDrops}, {"ack_held", &c.AckHeld}, {"ack_hold_missed", &c.AckHoldMissed},
	}
}

// Named lists the counters under their names, in the table's order.
func (c Counters) Named() []NamedCounter {
	f := c.fields()
	out := make([]NamedCounter, len(f))
	for i, x := range f {
		out[i] = NamedCounter{x.name, *x.p}
	}
	return out
}

// Set sets the counter of that name (as Named lists it); false if there
// is none.
func (c *Counters) Set(name string, v uint64) bool {
	for _, f := range c.fields() {
		if f.name == name {
			*f.p = v
			return true
		}
	}
	return false
}

// run is the engine goroutine. Each round holds engMu, which an
// application's Progress takes too.
func (d *Device) run() {
	defer close(d.stopped)
	for {
		select {
		case <-d.done:
			return
		default:
		}
		d.engMu.Lock()
		for len(d.cmds) > 0 {
			(<-d.cmds)()
		}
		d.work.Store(false)
		busy := d.e.step()
		holding := d.e.holding
		var wait time.Duration
		if !busy && !d.cfg.BusyPoll {
			wait = d.e.nextTimer()
		}
		d.engMu.Unlock()
		switch {
		case busy:
			if holding {
				// Lone ACKs wait for a reply: let the application run.
				runtime.Gosched()
			}
		case d.cfg.BusyPoll:
			// Spinning, but the application's goroutines share the
			// processors with this one.
			runtime.Gosched()
		case wait > 0:
			d.sleeping.Store(true)
			if !d.work.Load() && len(d.cmds) == 0 {
				d.link.Wait(wait)
			}
			d.sleeping.Store(false)
		}
	}
}

// Progress runs one round of the engine on the calling goroutine, unless
// another goroutine is running it, and reports whether there was work. An
// application that spins anyway (on a BusyPoll device's CQ, which calls
// Progress itself, or on memory, as ib_write_lat does) thereby moves its
// packets the moment they can move, instead of waiting for the engine's
// goroutine to get a processor: on a small machine that saves a scheduler
// hand-off each way. The engine's goroutine keeps running, so an
// application that stops spinning stalls nothing.
func (d *Device) Progress() bool {
	if !d.engMu.TryLock() {
		return false
	}
	defer d.engMu.Unlock()
	if d.gone {
		return false
	}
	return d.e.step()
}

// idleWait is how long the engine sleeps when nothing is due.
const idleWait = 2 * time.Millisecond
