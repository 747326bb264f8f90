package cmagent

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
)

// State is a connection's CM state (IBTA 12.9.6; Linux's ib_cm_state).
type State uint8

// The states.
const (
	StateIdle State = iota
	StateReqSent
	StateReqRcvd
	StateMRAReqSent // we asked the active side to wait for our REP
	StateMRAReqRcvd // the passive side asked us to wait
	StateRepSent
	StateRepRcvd
	StateMRARepRcvd
	StateEstablished
	StateDreqSent
	StateDreqRcvd
	StateTimewait
	StateSIDRReqSent
)

var stateNames = [...]string{"IDLE", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD", "REP_SENT", "REP_RCVD",
	"MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// Conn is one connection (or one SIDR lookup) and its CM state.
type Conn struct {
	a *Agent
	// Everything below is guarded by a.mu.
	ctx               any
	state             State
	passive           bool
	sidr              bool // a SIDR lookup, not a connection
	listener          *Listener
	counted           bool // counted in listener.pending
	localID, remoteID uint32
	tid               uint64
	peer              netip.Addr
	req               cm.REQ
	rep               cm.REP
	destroyed         bool

	// The message awaiting an answer, its timer and the tries left.
	out      []byte
	deadline time.Time
	timeout  time.Duration
	retries  int
	// last is the last answer sent (REP, RTU, MRA or DREP), sent again
	// when the message it answers is.
	last []byte
}

// Context is the owner's value for c (Connect's, or SetContext's).
func (c *Conn) Context() any {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	return c.ctx
}

// SetContext sets the value c's events carry (a passive connection starts
// with none).
func (c *Conn) SetContext(ctx any) {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	c.ctx = ctx
}

// State is c's CM state.
func (c *Conn) State() State {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	return c.state
}

// Peer is the address of the other node.
func (c *Conn) Peer() netip.Addr { return c.peer }

// LocalID is c's communication ID.
func (c *Conn) LocalID() uint32 { return c.localID }

// arm starts the retransmission timer of out.
func (c *Conn) arm(out []byte, timeout time.Duration, retries int) {
	c.out, c.timeout, c.retries = out, timeout, retries
	c.deadline = c.a.cfg.Now().Add(timeout)
}

// disarm stops the timer.
func (c *Conn) disarm() {
	c.out, c.deadline = nil, time.Time{}
}

// timewait closes c for good after a while, long enough for the peer's
// retransmissions to find it (and get answered) rather than a new
// connection.
func (c *Conn) timewait() {
	c.disarm()
	c.state = StateTimewait
	// Bounded both ways: the exponent comes from the peer's messages.
	d := min(max(Duration(c.ackTimeout()), timewaitMinimum), timewaitMaximum)
	c.deadline = c.a.cfg.Now().Add(d)
}

func (c *Conn) ackTimeout() uint8 {
	if c.passive {
		return c.req.Primary.LocalACKTimeout
	}
	return ACKTimeout(c.rep.TargetACKDelay, c.a.cfg.PacketLifetime)
}

// Connect sends a REQ to peer. The caller fills the request (service ID,
// QPN, PSN, path, private data with rdma_cm's IP header); the agent numbers
// it. A CONNECT_RESPONSE, REJECTED or UNREACHABLE event follows.
func (a *Agent) Connect(peer netip.Addr, req cm.REQ, ctx any) (*Conn, error) {
	if req.LocalQPN == 0 || req.MaxCMRetries == 0 {
		return nil, fmt.Errorf("cmagent: REQ without QPN or CM retries: %w", ErrState)
	}
	a.mu.Lock()
	defer a.unlock()
	c := a.newConn(peer, ctx)
	req.LocalCommID, req.LocalCAGUID = c.localID, a.cfg.GUID
	c.req, c.tid = req, tidFor(c.localID)
	mad, err := cm.Encode(cm.CMHeader(cm.AttrREQ, c.tid), &c.req)
	if err != nil {
		a.forget(c)
		return nil, fmt.Errorf("cmagent: REQ: %w", err)
	}
	c.state = StateReqSent
	a.counters.Sent++
	a.cfg.Send.SendMAD(peer, mad)
	// Linux's REQ timeout: two packet lifetimes and the peer's response time.
	c.arm(mad, 2*Duration(a.cfg.PacketLifetime)+Duration(req.RemoteCMResponseTimeout), int(req.MaxCMRetries))
	return c, nil
}

// Accept answers a connection request with rep (the caller fills QPN, PSN,
// resources and private data); ESTABLISHED follows the peer's RTU.
func (c *Conn) Accept(rep cm.REP) error {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	if c.destroyed || c.sidr || (c.state != StateReqRcvd && c.state != StateMRAReqSent) {
		return fmt.Errorf("cmagent: accept in %v: %w", c.state, ErrState)
	}
	rep.Comm = cm.Comm{Local: c.localID, Remote: c.remoteID}
	rep.LocalCAGUID = a.cfg.GUID
	mad, err := cm.Encode(cm.CMHeader(cm.AttrREP, c.tid), &rep)
	if err != nil {
		return fmt.Errorf("cmagent: REP: %w", err)
	}
	c.rep = rep
	c.state = StateRepSent
	c.unpend()
	a.counters.Sent++
	a.cfg.Send.SendMAD(c.peer, mad)
	c.last = mad
	c.arm(mad, Duration(c.req.LocalCMResponseTimeout), int(c.req.MaxCMRetries))
	return nil
}

// unpend stops counting c among its listener's unanswered requests.
func (c *Conn) unpend() {
	if c.counted {
		c.listener.pending--
		c.counted = false
	}
}

// Reject refuses a request (passive, before Accept) or a reply (active,
// before Establish), with reason and private data.
func (c *Conn) Reject(reason cm.RejReason, private []byte) error {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	if c.sidr && c.passive && c.state == StateReqRcvd {
		return c.replySIDR(cm.SIDRRejected, 0, 0, private)
	}
	var which uint8
	switch c.state {
	case StateReqRcvd, StateMRAReqSent:
		which = 0
	case StateRepRcvd:
		which = 1
	default:
		return fmt.Errorf("cmagent: reject in %v: %w", c.state, ErrState)
	}
	c.sendREJ(which, reason, private)
	a.forget(c)
	return nil
}

func (c *Conn) sendREJ(which uint8, reason cm.RejReason, private []byte) {
	rej := &cm.REJ{Comm: cm.Comm{Local: c.localID, Remote: c.remoteID}, MsgRejected: which, Reason: reason}
	copy(rej.PrivateData[:], private)
	c.a.send(c.peer, c.tid, rej)
}

// Ignore forgets a request without answering it, as Linux does when a
// listener's backlog is full: the requester's retransmission is a new
// request, which may find room.
func (c *Conn) Ignore() {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	if c.passive && c.state == StateReqRcvd {
		c.destroyed = true
		a.forget(c)
	}
}

// Establish sends the RTU that completes an active connection whose REP
// arrived (the owner has moved its QP to RTS): ESTABLISHED follows.
func (c *Conn) Establish(private []byte) error {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	if c.destroyed || c.state != StateRepRcvd {
		return fmt.Errorf("cmagent: establish in %v: %w", c.state, ErrState)
	}
	rtu := &cm.RTU{Comm: cm.Comm{Local: c.localID, Remote: c.remoteID}}
	copy(rtu.PrivateData[:], private)
	c.last = a.send(c.peer, c.tid, rtu)
	c.state = StateEstablished
	a.emit(Event{Type: EventEstablished, Conn: c, Peer: c.peer})
	return nil
}

// CommEstablished tells a passive connection still waiting for its RTU
// that data arrived on its QP: the RTU was lost, the connection is up
// (IBTA's communication established event).
func (c *Conn) CommEstablished() {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	if c.state == StateRepSent || c.state == StateMRARepRcvd {
		c.disarm()
		c.state = StateEstablished
		a.emit(Event{Type: EventEstablished, Conn: c, Peer: c.peer})
	}
}

// Disconnect starts closing an established connection (DREQ), or answers
// the peer's DREQ (DREP). DISCONNECTED follows the DREP or the DREQ's last
// timeout; a connection that is not up yet is an error (ErrState), as
// rdma_disconnect's EINVAL.
func (c *Conn) Disconnect(private []byte) error {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	switch c.state {
	case StateEstablished, StateRepSent, StateMRARepRcvd:
		c.sendDREQ(private)
	case StateDreqRcvd:
		c.sendDREP(private)
		c.timewait()
	case StateDreqSent, StateTimewait:
	default:
		return fmt.Errorf("cmagent: disconnect in %v: %w", c.state, ErrState)
	}
	return nil
}

func (c *Conn) remoteQPN() uint32 {
	if c.passive {
		return c.req.LocalQPN
	}
	return c.rep.LocalQPN
}

func (c *Conn) sendDREQ(private []byte) {
	d := &cm.DREQ{Comm: cm.Comm{Local: c.localID, Remote: c.remoteID}, RemoteQPN: c.remoteQPN()}
	copy(d.PrivateData[:], private)
	// A DREQ is a transaction of its sender's own.
	c.tid = tidFor(c.localID)
	mad := c.a.send(c.peer, c.tid, d)
	c.state = StateDreqSent
	c.arm(mad, Duration(c.responseTimeout()), int(c.maxRetries()))
}

func (c *Conn) sendDREP(private []byte) {
	d := &cm.DREP{Comm: cm.Comm{Local: c.localID, Remote: c.remoteID}}
	copy(d.PrivateData[:], private)
	c.last = c.a.send(c.peer, c.tid, d)
}

// responseTimeout is how long the peer may take to answer us.
func (c *Conn) responseTimeout() uint8 {
	if c.passive {
		return c.req.LocalCMResponseTimeout
	}
	return c.req.RemoteCMResponseTimeout
}

func (c *Conn) maxRetries() uint8 { return c.req.MaxCMRetries }

// Destroy ends the owner's interest in c: no further events. What the
// protocol still owes happens as rdma_destroy_id does it: a request not
// yet answered is rejected, an established connection is disconnected and
// a DREQ answered, and c lingers (without events) through timewait.
func (c *Conn) Destroy() {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	if c.destroyed {
		return
	}
	c.destroyed = true
	c.ctx = nil
	if c.sidr {
		if c.passive && c.state == StateReqRcvd {
			c.replySIDR(cm.SIDRRejected, 0, 0, nil)
		} else if c.state != StateTimewait {
			a.forget(c)
		}
		return
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd:
		c.sendREJ(0, cm.RejTimeout, nil)
		a.forget(c)
	case StateReqRcvd, StateMRAReqSent:
		c.sendREJ(0, cm.RejConsumerDefined, nil)
		a.forget(c)
	case StateRepRcvd:
		c.sendREJ(1, cm.RejConsumerDefined, nil)
		a.forget(c)
	case StateRepSent, StateMRARepRcvd, StateEstablished:
		c.sendDREQ(nil)
	case StateDreqRcvd:
		c.sendDREP(nil)
		c.timewait()
	case StateDreqSent, StateTimewait:
	default:
		a.forget(c)
	}
}

// duplicateREQ answers a REQ the peer sent again: it did not get our
// answer, or is impatient. Before the owner accepts, an MRA asks it to
// wait; after, the REP goes again; in timewait the connection is stale.
func (c *Conn) duplicateREQ() {
	a := c.a
	switch c.state {
	case StateReqRcvd, StateMRAReqSent:
		mra := &cm.MRA{Comm: cm.Comm{Local: c.localID, Remote: c.remoteID}, MsgMRAed: 0, ServiceTimeout: mraServiceTimeout}
		c.last = a.send(c.peer, c.tid, mra)
		c.state = StateMRAReqSent
	case StateRepSent, StateMRARepRcvd:
		a.counters.Sent++
		a.cfg.Send.SendMAD(c.peer, c.last)
	case StateTimewait:
		c.sendREJ(0, cm.RejStaleConn, nil)
	}
}

// handle takes a message for c; false if its state has no use for it.
func (c *Conn) handle(h cm.Header, m cm.Message) bool {
	a := c.a
	switch m := m.(type) {
	case *cm.REP:
		switch c.state {
		case StateReqSent, StateMRAReqRcvd:
			c.disarm()
			c.remoteID, c.rep, c.state = m.Local, *m, StateRepRcvd
			a.emit(Event{Type: EventConnectResponse, Conn: c, Peer: c.peer, REP: c.rep, PrivateData: append([]byte(nil), m.PrivateData[:]...)})
		case StateEstablished:
			// Our RTU was lost: send it again.
			a.counters.Duplicates++
			if m.Local == c.remoteID {
				a.counters.Sent++
				a.cfg.Send.SendMAD(c.peer, c.last)
			}
		case StateRepRcvd:
			a.counters.Duplicates++
		default:
			return false
		}
	case *cm.RTU:
		if m.Local != c.remoteID {
			return false
		}
		switch c.state {
		case StateRepSent, StateMRARepRcvd:
			c.disarm()
			c.state = StateEstablished
			a.emit(Event{Type: EventEstablished, Conn: c, Peer: c.peer, PrivateData: append([]byte(nil), m.PrivateData[:]...)})
		default:
			return false
		}
	case *cm.MRA:
		switch {
		case m.MsgMRAed == 0 && c.state == StateReqSent:
			c.state = StateMRAReqRcvd
		case m.MsgMRAed == 1 && c.state == StateRepSent:
			c.state = StateMRARepRcvd
		default:
			return false
		}
		// Wait as long as the peer asked, then go on retransmitting.
		c.deadline = a.cfg.Now().Add(Duration(min(m.ServiceTimeout, maxMRAServiceTimeout)) + Duration(a.cfg.PacketLifetime))
	case *cm.REJ:
		return c.rejected(m)
	case *cm.DREQ:
		if m.Local != c.remoteID || m.RemoteQPN != c.localQPN() {
			return false
		}
		switch c.state {
		case StateEstablished, StateRepSent, StateMRARepRcvd:
			c.disarm()
			c.tid = h.TID
			c.state = StateDreqRcvd
			a.emit(Event{Type: EventDisconnected, Conn: c, Peer: c.peer, PrivateData: append([]byte(nil), m.PrivateData[:]...)})
		case StateDreqSent:
			// Both ends closed at once: answer, and ours counts as done.
			c.tid = h.TID
			c.sendDREP(nil)
			c.timewait()
			a.emit(Event{Type: EventDisconnected, Conn: c, Peer: c.peer})
		case StateTimewait:
			a.counters.Duplicates++
			a.send(c.peer, h.TID, &cm.DREP{Comm: cm.Comm{Local: c.localID, Remote: c.remoteID}})
		case StateDreqRcvd:
			a.counters.Duplicates++
		default:
			return false
		}
	case *cm.DREP:
		if m.Local != c.remoteID || c.state != StateDreqSent {
			return false
		}
		c.timewait()
		a.emit(Event{Type: EventDisconnected, Conn: c, Peer: c.peer, PrivateData: append([]byte(nil), m.PrivateData[:]...)})
	default:
		return false
	}
	return true
}

func (c *Conn) localQPN() uint32 {
	if c.passive {
		return c.rep.LocalQPN
	}
	return c.req.LocalQPN
}

// rejected takes the peer's REJ.
func (c *Conn) rejected(m *cm.REJ) bool {
	a := c.a
	if c.remoteID != 0 && m.Local != 0 && m.Local != c.remoteID {
		return false
	}
	ev := Event{Type: EventRejected, Conn: c, Peer: c.peer, Reason: m.Reason, PrivateData: append([]byte(nil), m.PrivateData[:]...)}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd, StateRepSent, StateMRARepRcvd, StateRepRcvd:
		a.emit(ev)
		if m.Reason == cm.RejStaleConn {
			c.timewait()
		} else {
			a.forget(c)
		}
	case StateEstablished, StateDreqSent:
		ev.Type = EventDisconnected
		a.emit(ev)
		c.timewait()
	default:
		return false
	}
	return true
}

// expire runs c's timer.
func (c *Conn) expire(now time.Time) {
	a := c.a
	if c.state == StateTimewait {
		a.forget(c)
		if !c.sidr {
			a.emit(Event{Type: EventTimewaitExit, Conn: c, Peer: c.peer})
		}
		return
	}
	if c.out != nil && c.retries > 0 {
		c.retries--
		a.counters.Sent++
		a.counters.Retransmitted++
		a.cfg.Send.SendMAD(c.peer, c.out)
		c.deadline = now.Add(c.timeout)
		return
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd, StateRepSent, StateMRARepRcvd:
		which := uint8(0)
		if c.passive {
			which = 1
		}
		c.sendREJ(which, cm.RejTimeout, nil)
		a.emit(Event{Type: EventUnreachable, Conn: c, Peer: c.peer})
		a.forget(c)
	case StateDreqSent:
		c.timewait()
		a.emit(Event{Type: EventDisconnected, Conn: c, Peer: c.peer})
	case StateSIDRReqSent:
		a.emit(Event{Type: EventUnreachable, Conn: c, Peer: c.peer})
		a.forget(c)
	default:
		c.disarm()
	}
}

// QPParams are the attributes a connection's QP takes on its way to RTS,
// from the REQ and REP (Linux's ib_cm_init_qp_attr): each end's starting
// PSN is the one it receives first, and responder resources and initiator
// depth cross over.
type QPParams struct {
	RemoteQPN    uint32
	SQPSN, RQPSN uint32
	PathMTU      uint8 // ibv_mtu
	// MaxDestRdAtomic is the READs and atomics this end serves at once,
	// MaxRdAtomic the ones it may have outstanding.
	MaxDestRdAtomic, MaxRdAtomic uint8
	RetryCount, RNRRetryCount    uint8
	// Timeout is the local ACK timeout exponent.
	Timeout uint8
	Path    cm.Path
}

// QPParams returns c's QP attributes once both REQ and REP are known
// (from CONNECT_RESPONSE on the active side, after Accept on the passive).
func (c *Conn) QPParams() QPParams {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	if c.passive {
		return PassiveQPParams(&c.req, &c.rep)
	}
	return ActiveQPParams(&c.req, &c.rep, c.a.cfg.PacketLifetime)
}

// PassiveQPParams are the QP attributes of the end that received req and
// answers with rep.
func PassiveQPParams(req *cm.REQ, rep *cm.REP) QPParams {
	p := QPParams{PathMTU: req.PathMTU, RetryCount: req.RetryCount, Path: req.Primary,
		RemoteQPN: req.LocalQPN, SQPSN: req.StartingPSN, RQPSN: rep.StartingPSN,
		MaxDestRdAtomic: rep.ResponderResources, MaxRdAtomic: rep.InitiatorDepth,
		RNRRetryCount: req.RNRRetryCount, Timeout: req.Primary.LocalACKTimeout}
	// The path as this end sees it.
	p.Path.LocalGID, p.Path.RemoteGID = p.Path.RemoteGID, p.Path.LocalGID
	p.Path.LocalLID, p.Path.RemoteLID = p.Path.RemoteLID, p.Path.LocalLID
	return p
}

// ActiveQPParams are the QP attributes of the end that sent req and
// received rep over a path of the given packet lifetime.
func ActiveQPParams(req *cm.REQ, rep *cm.REP, packetLifetime uint8) QPParams {
	return QPParams{PathMTU: req.PathMTU, RetryCount: req.RetryCount, Path: req.Primary,
		RemoteQPN: rep.LocalQPN, SQPSN: rep.StartingPSN, RQPSN: req.StartingPSN,
		MaxDestRdAtomic: rep.InitiatorDepth, MaxRdAtomic: rep.ResponderResources,
		RNRRetryCount: rep.RNRRetryCount, Timeout: ACKTimeout(rep.TargetACKDelay, packetLifetime)}
}
