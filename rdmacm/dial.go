package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

// Conn is a connected ID with an event channel of its own: what Dial and
// Request.Accept return.
type Conn struct {
	id *ID
	ch *EventChannel
	// Param is what the peer sent with its answer (its private data, its
	// QPN, the resources it grants).
	Param ConnParam
}

// ID is the connection's communication ID.
func (c *Conn) ID() *ID { return c.id }

// Next waits for the connection's next event (DISCONNECTED when the peer
// closes).
func (c *Conn) Next(ctx context.Context) (Event, error) { return c.ch.Get(ctx) }

// Disconnect closes the connection and waits for the peer's answer (or the
// CM's last timeout): the QP is in ERR, its work flushed.
func (c *Conn) Disconnect(ctx context.Context) error {
	c.id.mu.Lock()
	answered := c.id.state == stateDisconnect // the peer's DREQ came first
	c.id.mu.Unlock()
	if err := c.id.Disconnect(); err != nil || answered {
		return err
	}
	for {
		e, err := c.ch.Get(ctx)
		if err != nil {
			return fmt.Errorf("rdmacm: waiting for the disconnection: %w", err)
		}
		if e.Type == EventDisconnected {
			return nil
		}
	}
}

// Close destroys the ID (the QP stays the caller's).
func (c *Conn) Close() error { return c.id.Destroy() }

// wait returns the ID's next event on ch of one of the types, failing on
// anything else.
func wait(ctx context.Context, ch *EventChannel, want ...EventType) (Event, error) {
	e, err := ch.Get(ctx)
	if err != nil {
		return e, err
	}
	for _, w := range want {
		if e.Type == w {
			return e, nil
		}
	}
	switch e.Type {
	case EventRejected:
		return e, fmt.Errorf("rdmacm: rejected (reason %d): %w", e.Status, ErrConnRefused)
	case EventUnreachable:
		return e, fmt.Errorf("rdmacm: %v: %w", e, ErrTimedOut)
	}
	return e, fmt.Errorf("rdmacm: %v, want %v: %w", e, want, ErrConnReset)
}

// Dial connects qp (RC, in RESET or INIT) to the listener at dst: address
// and route resolution, REQ, REP, the QP to RTS, RTU. An error from the
// peer is ECONNREFUSED (rejected) or ETIMEDOUT (no answer).
func (s *Service) Dial(ctx context.Context, qp *verbs.QP, dst netip.AddrPort, p ConnParam) (*Conn, error) {
	ch := NewEventChannel()
	id, err := s.CreateID(ch, PortSpaceTCP, nil)
	if err != nil {
		return nil, err
	}
	c, err := s.dial(ctx, id, ch, qp, dst, p)
	if err != nil {
		id.Destroy()
		return nil, err
	}
	return c, nil
}

func (s *Service) dial(ctx context.Context, id *ID, ch *EventChannel, qp *verbs.QP, dst netip.AddrPort, p ConnParam) (*Conn, error) {
	if err := id.resolve(ctx, ch, dst); err != nil {
		return nil, err
	}
	if qp != nil {
		if err := id.AttachQP(qp); err != nil {
			return nil, err
		}
	}
	if err := id.Connect(p); err != nil {
		return nil, err
	}
	e, err := wait(ctx, ch, EventEstablished)
	if err != nil {
		return nil, err
	}
	return &Conn{id: id, ch: ch, Param: e.Param}, nil
}

// resolve runs address and route resolution to dst, bounded by ctx.
func (id *ID) resolve(ctx context.Context, ch *EventChannel, dst netip.AddrPort) error {
	// Half of what ctx leaves, so that the resolution's own error (ADDR_ERROR)
	// comes before ctx's.
	timeout := 2 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d)/2)
	}
	if err := id.ResolveAddr(netip.AddrPort{}, dst, timeout); err != nil {
		return err
	}
	e, err := wait(ctx, ch, EventAddrResolved)
	if err != nil {
		if e.Type == EventAddrError {
			return fmt.Errorf("rdmacm: resolving %v: %w", dst, errnoOf(e.Status))
		}
		return err
	}
	if err := id.ResolveRoute(timeout); err != nil {
		return err
	}
	_, err = wait(ctx, ch, EventRouteResolved)
	return err
}

// LookupUD finds the UD service at dst (SIDR): how to address datagrams
// to it from qp (UD), which is brought to RTS.
func (s *Service) LookupUD(ctx context.Context, qp *verbs.QP, dst netip.AddrPort, private []byte) (UDParam, error) {
	ch := NewEventChannel()
	id, err := s.CreateID(ch, PortSpaceUDP, nil)
	if err != nil {
		return UDParam{}, err
	}
	defer id.Destroy()
	if err := id.resolve(ctx, ch, dst); err != nil {
		return UDParam{}, err
	}
	if qp != nil {
		if err := id.AttachQP(qp); err != nil {
			return UDParam{}, err
		}
	}
	if err := id.Connect(ConnParam{PrivateData: private}); err != nil {
		return UDParam{}, err
	}
	e, err := wait(ctx, ch, EventEstablished)
	if err != nil {
		return UDParam{}, err
	}
	return e.UD, nil
}

// Listener takes connection requests on a port.
type Listener struct {
	id *ID
	ch *EventChannel
}

// Listen listens on addr (an unspecified address takes requests to any of
// the device's) in port space ps.
func (s *Service) Listen(ps PortSpace, addr netip.AddrPort, backlog int) (*Listener, error) {
	ch := NewEventChannel()
	id, err := s.CreateID(ch, ps, nil)
	if err != nil {
		return nil, err
	}
	if !addr.Addr().IsValid() {
		addr = netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port())
	}
	if err := id.Bind(addr); err != nil {
		id.Destroy()
		return nil, err
	}
	if err := id.Listen(backlog); err != nil {
		id.Destroy()
		return nil, err
	}
	return &Listener{id: id, ch: ch}, nil
}

// Addr is the address the listener is bound to (its port chosen if 0 was
// asked).
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// Close stops listening; requests not yet taken are rejected.
func (l *Listener) Close() error {
	err := l.id.Destroy()
	for {
		e, ok := l.ch.TryGet()
		if !ok {
			return err
		}
		if e.Type == EventConnectRequest {
			e.ID.Reject(nil)
			e.ID.Destroy()
		}
	}
}

// Request is a connection request (or UD lookup) a Listener took.
type Request struct {
	id *ID
	// Param is what the requester offered: private data, resources, QPN.
	Param ConnParam
	// UD is a UD lookup's private data.
	UD UDParam
}

// Peer is the requester's address.
func (r *Request) Peer() netip.AddrPort { return r.id.RemoteAddr() }

// ID is the request's communication ID.
func (r *Request) ID() *ID { return r.id }

// Next waits for the next request.
func (l *Listener) Next(ctx context.Context) (*Request, error) {
	for {
		e, err := l.ch.Get(ctx)
		if err != nil {
			return nil, err
		}
		if e.Type == EventConnectRequest {
			return &Request{id: e.ID, Param: e.Param, UD: e.UD}, nil
		}
	}
}

// Accept connects qp (in RESET or INIT; UD: any state before RTS) to the
// requester and waits until the connection is established (UD: replies at
// once and returns a nil Conn). p nil takes the request's resources.
func (r *Request) Accept(ctx context.Context, qp *verbs.QP, p *ConnParam) (*Conn, error) {
	ch := NewEventChannel()
	if err := r.id.Migrate(ch); err != nil {
		r.Reject(nil)
		return nil, err
	}
	if err := r.id.AttachQP(qp); err != nil {
		r.Reject(nil)
		return nil, err
	}
	if err := r.id.Accept(p); err != nil {
		r.Reject(nil)
		return nil, err
	}
	if r.id.ud() {
		return nil, r.id.Destroy()
	}
	e, err := wait(ctx, ch, EventEstablished)
	if err != nil {
		r.id.Destroy()
		return nil, err
	}
	return &Conn{id: r.id, ch: ch, Param: ConnParam{PrivateData: e.Param.PrivateData, QPNum: r.Param.QPNum}}, nil
}

// Reject refuses the request with private data and frees its ID.
func (r *Request) Reject(private []byte) error {
	err := r.id.Reject(private)
	r.id.Destroy()
	return err
}
