// Package cmagent is a node's InfiniBand Communication Manager: the state
// machine of every connection QP1 carries (IBTA vol. 1 ch. 12, as Linux's
// cm.c runs it for rdma_cm on RoCE). It matches listeners by service ID,
// numbers connections, retransmits REQ, REP and DREQ until answered or out
// of retries, answers duplicates (REP again, RTU again, MRA, DREP) and keeps
// closed connections in timewait, and tells its owner what happened as
// rdma_cm-shaped events.
//
// It does no I/O of its own: MADs leave through a Sender and arrive through
// Receive; time is read from a clock and moves only when the owner calls
// Tick, so every timer is testable with a fake clock. Addresses (GIDs,
// routes), QPs and the rdma_cm IP header in private data are the owner's
// (package rdmacm).
package cmagent

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm"
)

// Sender transmits a 256-byte MAD to QP1 of the node at addr (an IP
// address: RoCE's GIDs are IP addresses). It must not block on the agent.
type Sender interface {
	SendMAD(to netip.Addr, mad []byte)
}

// The CM's timing as rdma_cm uses it on RoCE: timeouts are IBTA's
// 4.096 µs × 2^n exponents; 15 retries (CMA_MAX_CM_RETRIES); a packet
// lifetime of 18 (CMA_IBOE_PACKET_LIFETIME in Linux 6.1); a response
// timeout of 20 (CMA_CM_RESPONSE_TIMEOUT, ~4.3 s); rxe's ack delay 15.
const (
	DefaultMaxRetries      = 15
	DefaultPacketLifetime  = 18
	DefaultResponseTimeout = 20
	DefaultTargetACKDelay  = 15
	mraServiceTimeout      = 24 // CMA_CM_MRA_SETTING: ~68 s
	timewaitMinimum        = 100 * time.Millisecond
	timewaitMaximum        = 16 * time.Second
	maxMRAServiceTimeout   = 25   // ~137 s: the longest a peer's MRA makes us wait
	maxPendingPerListener  = 1024 // passive connections not yet accepted
	hiTID                  = 2    // the high half of our transaction IDs
)

// Duration converts an IBTA time exponent as Linux's cm_convert_to_ms does:
// 2^(n-8) ms (4.096 µs × 2^n, rounded to a power of two of milliseconds).
func Duration(exp uint8) time.Duration {
	if exp < 8 {
		return time.Millisecond
	}
	return time.Duration(1<<(exp-8)) * time.Millisecond
}

// ACKTimeout is a QP's local ACK timeout for a path of the given packet
// lifetime to a CA of the given ACK delay (Linux's cm_ack_timeout).
func ACKTimeout(caACKDelay, packetLifetime uint8) uint8 {
	t := int(packetLifetime) + 1
	d := int(caACKDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(packetLifetime)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(31, t))
}

// Config is what an Agent needs.
type Config struct {
	Send Sender
	// GUID is the local CA GUID (the node GUID) REQs and REPs carry.
	GUID uint64
	// Deliver receives every event, in order, never with the agent's lock
	// held; it must not block (queue the event and return).
	Deliver func(Event)
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// Seed seeds communication IDs and transaction IDs; 0 picks one.
	Seed uint64
	// PacketLifetime is the path's packet lifetime exponent;
	// DefaultPacketLifetime if 0.
	PacketLifetime uint8
	// ResponseTimeout is how long a SIDR lookup waits for each answer
	// (exponent); DefaultResponseTimeout if 0. A REQ says its own.
	ResponseTimeout uint8
}

// Counters count MADs in and out.
type Counters struct {
	Sent, Received, Retransmitted uint64
	// Dropped counts MADs that were not CM MADs, named no connection of
	// ours, came from the wrong peer or did not fit the connection's state.
	Dropped uint64
	// Duplicates counts retransmissions received (REQ, REP, DREQ).
	Duplicates uint64
}

// CounterNames names Counters' fields in order; the one table of them.
var CounterNames = [...]string{"cm_sent", "cm_received", "cm_retransmitted", "cm_dropped", "cm_duplicates"}

// Values returns the counters in CounterNames' order.
func (c Counters) Values() []uint64 {
	return []uint64{c.Sent, c.Received, c.Retransmitted, c.Dropped, c.Duplicates}
}

// Errors of the API.
var (
	ErrInUse = errors.New("cmagent: service ID already has a listener")
	ErrState = errors.New("cmagent: not in a state that allows this")
	ErrLimit = errors.New("cmagent: too many pending connections")
)

// remoteKey identifies a passive connection by its peer and the peer's
// communication ID, to recognise a retransmitted REQ.
type remoteKey struct {
	peer netip.Addr
	id   uint32
	sidr bool
}

// Agent is one node's CM. All methods are safe for concurrent use.
type Agent struct {
	cfg Config

	mu        sync.Mutex
	conns     map[uint32]*Conn    // by our communication ID
	byRemote  map[remoteKey]*Conn // passive ones, by the peer's
	listeners map[uint64]*Listener
	idMask    uint32 // XORed into a counter: IDs nobody can predict
	nextID    uint32
	counters  Counters
	pending   []Event // delivered once the lock is released
}

// New returns an agent.
func New(cfg Config) *Agent {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PacketLifetime == 0 {
		cfg.PacketLifetime = DefaultPacketLifetime
	}
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = DefaultResponseTimeout
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed>>32|1))
	return &Agent{cfg: cfg, conns: map[uint32]*Conn{}, byRemote: map[remoteKey]*Conn{}, listeners: map[uint64]*Listener{},
		idMask: rng.Uint32(), nextID: 1}
}

// Counters returns the agent's counters.
func (a *Agent) Counters() Counters {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counters
}

// Conns is the number of connections the agent holds, timewait included.
func (a *Agent) Conns() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// unlock releases the lock and then delivers what the locked section
// queued.
func (a *Agent) unlock() {
	evs := a.pending
	a.pending = nil
	a.mu.Unlock()
	for _, e := range evs {
		a.cfg.Deliver(e)
	}
}

func (a *Agent) emit(e Event) {
	if e.Conn != nil && e.Conn.destroyed {
		return
	}
	a.pending = append(a.pending, e)
}

// newConn numbers a connection and files it.
func (a *Agent) newConn(peer netip.Addr, ctx any) *Conn {
	var id uint32
	for {
		id = a.nextID ^ a.idMask
		a.nextID++
		if _, used := a.conns[id]; !used && id != 0 {
			break
		}
	}
	c := &Conn{a: a, localID: id, peer: peer, ctx: ctx}
	a.conns[id] = c
	return c
}

// tidFor is the transaction ID of the messages a connection starts, as
// Linux forms it: a constant high half and the communication ID's bytes as
// the CPU holds them.
func tidFor(localID uint32) uint64 {
	return hiTID<<32 | uint64(bits.ReverseBytes32(localID))
}

// forget removes c from the agent's tables.
func (a *Agent) forget(c *Conn) {
	if a.conns[c.localID] == c {
		delete(a.conns, c.localID)
	}
	if c.passive {
		k := remoteKey{c.peer, c.remoteID, c.sidr}
		if a.byRemote[k] == c {
			delete(a.byRemote, k)
		}
	}
	if c.listener != nil && c.counted {
		c.listener.pending--
		c.counted = false
	}
	c.state = StateIdle
	c.out = nil
}

// send encodes m under h and transmits it to peer; the encoded MAD, for
// retransmission.
func (a *Agent) send(peer netip.Addr, tid uint64, m cm.Message) []byte {
	mad, err := cm.Encode(cm.CMHeader(m.Attr(), tid), m)
	if err != nil {
		// The agent builds every message from checked values; a field out of
		// range is a bug here, not the peer's.
		panic(fmt.Sprintf("cmagent: encoding %v: %v", m.Attr(), err))
	}
	a.counters.Sent++
	a.cfg.Send.SendMAD(peer, mad)
	return mad
}

// Listener receives connection requests for one service ID.
type Listener struct {
	a         *Agent
	serviceID uint64
	ctx       any
	pending   int
	closed    bool
}

// Listen starts taking REQs (and SIDR REQs) to serviceID; ctx comes back in
// the events.
func (a *Agent) Listen(serviceID uint64, ctx any) (*Listener, error) {
	a.mu.Lock()
	defer a.unlock()
	if _, ok := a.listeners[serviceID]; ok {
		return nil, fmt.Errorf("%w: %#x", ErrInUse, serviceID)
	}
	l := &Listener{a: a, serviceID: serviceID, ctx: ctx}
	a.listeners[serviceID] = l
	return l, nil
}

// Context is the value given to Listen.
func (l *Listener) Context() any { return l.ctx }

// ServiceID is the service ID l listens on.
func (l *Listener) ServiceID() uint64 { return l.serviceID }

// Close stops listening. Connections it already announced are the
// owner's to accept, reject or destroy.
func (l *Listener) Close() {
	a := l.a
	a.mu.Lock()
	defer a.unlock()
	if !l.closed && a.listeners[l.serviceID] == l {
		delete(a.listeners, l.serviceID)
	}
	l.closed = true
}

// Receive takes a MAD that arrived on QP1 from the node at from.
func (a *Agent) Receive(from netip.Addr, mad []byte) {
	h, m, err := cm.Decode(mad)
	a.mu.Lock()
	defer a.unlock()
	a.counters.Received++
	if err != nil {
		a.counters.Dropped++
		return
	}
	switch m := m.(type) {
	case *cm.REQ:
		a.onREQ(from, h, m)
	case *cm.SIDRREQ:
		a.onSIDRREQ(from, h, m)
	case *cm.SIDRREP:
		a.onSIDRREP(from, m)
	default:
		c := a.conns[remoteOf(m)]
		if c == nil || c.peer != from {
			a.unknownConn(from, h, m)
			return
		}
		if !c.handle(h, m) {
			a.counters.Dropped++
		}
	}
}

// remoteOf is the receiver's communication ID a message names: ours.
func remoteOf(m cm.Message) uint32 {
	switch m := m.(type) {
	case *cm.REP:
		return m.Remote
	case *cm.RTU:
		return m.Remote
	case *cm.REJ:
		return m.Remote
	case *cm.MRA:
		return m.Remote
	case *cm.DREQ:
		return m.Remote
	case *cm.DREP:
		return m.Remote
	}
	return 0
}

// unknownConn answers a message for a connection the agent does not have,
// as Linux does: a REP gets a REJ (invalid communication ID), so the peer
// stops retrying it; a DREQ gets a DREP, so the peer can close.
func (a *Agent) unknownConn(from netip.Addr, h cm.Header, m cm.Message) {
	a.counters.Dropped++
	switch m := m.(type) {
	case *cm.REP:
		a.send(from, h.TID, &cm.REJ{Comm: cm.Comm{Remote: m.Local}, MsgRejected: 1, Reason: cm.RejInvalidCommID})
	case *cm.DREQ:
		a.send(from, h.TID, &cm.DREP{Comm: cm.Comm{Local: m.Remote, Remote: m.Local}})
	}
}

// onREQ takes a connection request: a new one goes to its listener, a
// retransmitted one is answered from the connection's state.
func (a *Agent) onREQ(from netip.Addr, h cm.Header, r *cm.REQ) {
	if c := a.byRemote[remoteKey{from, r.LocalCommID, false}]; c != nil {
		a.counters.Duplicates++
		c.duplicateREQ()
		return
	}
	reject := func(reason cm.RejReason) {
		a.send(from, h.TID, &cm.REJ{Comm: cm.Comm{Remote: r.LocalCommID}, MsgRejected: 0, Reason: reason})
	}
	l := a.listeners[r.ServiceID]
	switch {
	case l == nil:
		reject(cm.RejInvalidServiceID)
		return
	case r.TransportType != cm.TransportRC && r.TransportType != cm.TransportUC:
		reject(cm.RejInvalidTransportType)
		return
	case r.LocalQPN == 0 || r.LocalCommID == 0:
		a.counters.Dropped++
		return
	case l.pending >= maxPendingPerListener:
		reject(cm.RejNoResources)
		return
	}
	c := a.newConn(from, nil)
	c.passive, c.listener, c.counted = true, l, true
	l.pending++
	c.remoteID, c.tid = r.LocalCommID, h.TID
	c.req = *r
	c.state = StateReqRcvd
	a.byRemote[remoteKey{from, r.LocalCommID, false}] = c
	a.emit(Event{Type: EventConnectRequest, Conn: c, Listener: l, Peer: from, REQ: c.req,
		PrivateData: append([]byte(nil), r.PrivateData[:]...)})
}

// Tick runs the timers due by now: retransmissions, timeouts, the end of
// timewait.
func (a *Agent) Tick() {
	a.mu.Lock()
	defer a.unlock()
	now := a.cfg.Now()
	for _, c := range a.conns {
		if !c.deadline.IsZero() && !now.Before(c.deadline) {
			c.expire(now)
		}
	}
}

// NextDeadline is when Tick next has work, or false if no timer runs.
func (a *Agent) NextDeadline() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var next time.Time
	for _, c := range a.conns {
		if !c.deadline.IsZero() && (next.IsZero() || c.deadline.Before(next)) {
			next = c.deadline
		}
	}
	return next, !next.IsZero()
}
