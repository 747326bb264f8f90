package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/verbs"
)

// perftest's rdma_cm mode (-R), as Debian 12's perftest 4.5-0.17 runs it:
//
//   - The out-of-band channel is an RC connection of its own (the control
//     connection, RDMA_PS_TCP) to the server's Port: one signaled SEND per
//     message, of exactly the message's size, and a single 56-byte receive
//     posted at a time, reposted before the reply is written. The key
//     messages are the binary struct pingpong_dest (Dest.MarshalStruct).
//   - After the opening exchanges, a hand shake, then the N data connections
//     (RDMA_PS_TCP for RC, RDMA_PS_UDP for UD, which is SIDR) to the same
//     port, then another hand shake; the tools' own exchanges follow,
//     without the QP connection step. QPNs, PSNs and the path come from the
//     CM; only rkey and vaddr are read from the key messages.
//   - UD: the client's address handle comes from the ESTABLISHED event. The
//     server's comes, for the latency test, from a 4-byte SEND with
//     immediate (the client's QPN) that the client sends first.
//   - Teardown: the RC data connections are disconnected (the client of
//     4.5-0.17 disconnects and waits for DISCONNECTED; the server answers),
//     then the resources go. The control connection is never disconnected
//     by perftest: its ID dies with the process, which sends a DREQ.

const (
	// perftest's rdma_resolve_addr and rdma_resolve_route timeouts.
	cmResolveTimeout = 2 * time.Second
	// NUM_OF_RETRIES: ADDR_ERRORs the control connection's client accepts.
	cmAddrRetries = 10
	// A connection the server refused because it was not listening yet
	// (REJ reason 8, or for UD the SIDR reply "unsupported") is tried
	// again after this pause, for at most cmRejectRetries times. Stock perftest gives up at the first one; a
	// server that listens a little late is a race of its own (its data
	// listener comes after its side of a hand shake).
	cmRejectRetryDelay = 100 * time.Millisecond
	cmRejectRetries    = 50
	// How long the teardown waits for the peer's answer to a disconnection.
	cmDisconnectWait = 10 * time.Second
	// How long the connection manager stays after the run at most, until
	// the connections it still holds (timewait) are over: a peer whose
	// DREQ or DREP got lost sends it again and must find an answer.
	cmLinger = 3 * time.Second
	// SYNC_SPEC_ID: the work request ID of the control connection's SENDs
	// and receives.
	syncSpecID = 5
	// The work request ID of the server's UD receive of the client's QPN.
	udQPNRecvID = 1 << 62
)

// startCM runs the connection manager of the device the tools run on.
// With a device served by the daemon, the daemon owns QP1 and its CM.
func startCM(dev *verbs.Device, opts rdmacm.Options) (*rdmacm.Service, error) {
	svc, err := rdmacm.Start(dev, opts)
	if err != nil {
		return nil, fmt.Errorf("perftest: starting the connection manager: %w", err)
	}
	return svc, nil
}

// stopCM stops the connection manager once the connections it still holds
// are over, or after cmLinger.
func (s *session) stopCM() {
	for end := time.Now().Add(cmLinger); s.svc.Connections() > 0 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if s.cmStopped != nil {
		s.cmStopped(s.svc)
	}
	s.svc.Close()
}

// cmState is what -R adds to a session: the data connections.
type cmState struct {
	ps     rdmacm.PortSpace
	ch     *rdmacm.EventChannel // the data connections' events
	listen *rdmacm.ID           // server: the data listener, until all came
	ids    []*rdmacm.ID         // by QP
}

// bindAddr is where the server listens: Bind, or every address.
func (s *session) bindAddr() (netip.AddrPort, error) {
	ip := netip.IPv4Unspecified()
	if s.cfg.Bind != "" {
		a, err := netip.ParseAddr(s.cfg.Bind)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("perftest: -R binds to an address of the device, not %q: %w", s.cfg.Bind, err)
		}
		ip = a.Unmap()
	}
	return netip.AddrPortFrom(ip, uint16(s.cfg.Port)), nil
}

// serverAddr resolves Server to an IPv4 address, as perftest's
// getaddrinfo with AF_INET.
func (s *session) serverAddr(ctx context.Context) (netip.AddrPort, error) {
	port := uint16(s.cfg.Port)
	if a, err := netip.ParseAddr(s.cfg.Server); err == nil {
		return netip.AddrPortFrom(a.Unmap(), port), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", s.cfg.Server)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("perftest: resolving %s: %w", s.cfg.Server, err)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), port), nil
}

// nextEvent waits for the next event on ch, at most until timeout.
func nextEvent(ctx context.Context, ch *rdmacm.EventChannel, timeout time.Duration) (rdmacm.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	e, err := ch.Get(ctx)
	if err != nil {
		return e, fmt.Errorf("perftest: waiting for an rdma_cm event: %w", err)
	}
	return e, nil
}

// cmChannel is the out-of-band channel over the control connection.
type cmChannel struct {
	ch       *rdmacm.EventChannel
	id       *rdmacm.ID
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	mr       *verbs.MR // the receive buffer at 0, the send buffer at cmSendOff
	qp       *verbs.QP
	// abort cancels ctx: a wait under way fails.
	ctx    context.Context
	cancel context.CancelFunc
	wc     []verbs.WorkCompletion
}

const cmSendOff = 64

func newCMChannel(dev *verbs.Device) (*cmChannel, error) {
	c := &cmChannel{ch: rdmacm.NewEventChannel(), wc: make([]verbs.WorkCompletion, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	var err error
	fail := func(what string, err error) (*cmChannel, error) {
		c.close()
		return nil, fmt.Errorf("perftest: the rdma_cm control connection's %s: %w", what, err)
	}
	if c.pd, err = dev.AllocPD(); err != nil {
		return fail("PD", err)
	}
	if c.scq, err = dev.CreateCQ(4); err != nil {
		return fail("send CQ", err)
	}
	if c.rcq, err = dev.CreateCQ(4); err != nil {
		return fail("receive CQ", err)
	}
	if c.mr, err = c.pd.AllocMR(cmSendOff+DestStructSize, verbs.AccessLocalWrite); err != nil {
		return fail("buffer", err)
	}
	// perftest's comm context: RC, one SEND and one receive at a time.
	if c.qp, err = c.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: c.scq, RecvCQ: c.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail("QP", err)
	}
	return c, nil
}

// postRecv posts the one receive, of sizeof(struct pingpong_dest).
func (c *cmChannel) postRecv() error {
	_, err := c.qp.PostRecv([]verbs.RecvWR{{ID: syncSpecID,
		SGList: []verbs.SGE{{Addr: c.mr.Addr(), Length: DestStructSize, LKey: c.mr.LKey()}}}})
	if err != nil {
		return fmt.Errorf("perftest: posting the control connection's receive: %w", err)
	}
	return nil
}

// controlParam is what perftest's control connection offers on both sides:
// no READs, retry counts of 7.
var controlParam = rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}

// connectControl makes the control connection: the server listens on its
// port for one client and stops listening; the client connects to it.
func (s *session) connectControl(ctx context.Context) (channel, error) {
	c, err := newCMChannel(s.dev)
	if err != nil {
		return nil, err
	}
	if s.server() {
		err = c.accept(ctx, s)
	} else {
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		err = c.dial(dctx, s)
		cancel()
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// accept is rdma_server_connect: listen with a backlog of 1, take the
// first request, post the receive, accept, stop listening. The control
// connection's ESTABLISHED is not waited for: the QP is in RTS once
// accepted, and the client speaks first.
func (c *cmChannel) accept(ctx context.Context, s *session) error {
	addr, err := s.bindAddr()
	if err != nil {
		return err
	}
	l, err := s.svc.CreateID(c.ch, rdmacm.PortSpaceTCP, nil)
	if err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	defer l.Destroy()
	if err := l.Bind(addr); err != nil {
		return fmt.Errorf("perftest: rdma_bind_addr %v: %w", addr, err)
	}
	if err := l.Listen(1); err != nil {
		return fmt.Errorf("perftest: rdma_listen on port %d: %w", addr.Port(), err)
	}
	// perftest prints it just before it listens; after is what tells a
	// script that waits for it that a client may come: stock clients do
	// not try again.
	s.printWaiting()
	e, err := c.ch.Get(ctx)
	if err != nil {
		return fmt.Errorf("perftest: waiting for a client on port %d: %w", addr.Port(), err)
	}
	if e.Type != rdmacm.EventConnectRequest {
		return fmt.Errorf("perftest: bad event waiting for connect request: %v", e)
	}
	c.id = e.ID
	if err := c.id.AttachQP(c.qp); err != nil {
		c.id.Reject(nil)
		return fmt.Errorf("perftest: %w", err)
	}
	if err := c.postRecv(); err != nil {
		c.id.Reject(nil)
		return err
	}
	p := controlParam
	if err := c.id.Accept(&p); err != nil {
		return fmt.Errorf("perftest: rdma_accept: %w", err)
	}
	return nil
}

// dial is rdma_client_connect: resolve the address (ADDR_ERROR is tried
// again) and the route, post the receive, connect, and expect ESTABLISHED.
// A server not listening yet (REJ reason 8, or no answer at all) is tried
// again while ctx lasts, as the TCP channel retries a refused connection.
func (c *cmChannel) dial(ctx context.Context, s *session) error {
	dst, err := s.serverAddr(ctx)
	if err != nil {
		return err
	}
	posted := false
	for {
		id, err := s.svc.CreateID(c.ch, rdmacm.PortSpaceTCP, nil)
		if err != nil {
			return fmt.Errorf("perftest: %w", err)
		}
		c.id = id
		if err := resolve(ctx, c.ch, id, dst); err != nil {
			return err
		}
		if err := id.AttachQP(c.qp); err != nil {
			return fmt.Errorf("perftest: %w", err)
		}
		if !posted { // the QP is in INIT now; a rejection leaves it so
			if err := c.postRecv(); err != nil {
				return err
			}
			posted = true
		}
		if err := id.Connect(controlParam); err != nil {
			return fmt.Errorf("perftest: rdma_connect to %v: %w", dst, err)
		}
		e, err := c.ch.Get(ctx)
		if err != nil {
			return fmt.Errorf("perftest: connecting to %v: %w", dst, err)
		}
		switch {
		case e.Type == rdmacm.EventEstablished:
			return nil
		case e.Type == rdmacm.EventRejected && e.Status == int(cm.RejInvalidServiceID), e.Type == rdmacm.EventUnreachable:
			// Nobody listens yet, or no CM answers yet (an xdproce
			// server not started).
			id.DetachQP()
			id.Destroy()
			c.id = nil
			select {
			case <-ctx.Done():
				return fmt.Errorf("perftest: connecting to %v: nobody listens: %w", dst, ctx.Err())
			case <-time.After(cmRejectRetryDelay):
			}
		default:
			return fmt.Errorf("perftest: connecting to %v: unexpected CM event %v", dst, e)
		}
	}
}

// resolve runs rdma_resolve_addr, trying again on ADDR_ERROR as perftest
// does, and rdma_resolve_route.
func resolve(ctx context.Context, ch *rdmacm.EventChannel, id *rdmacm.ID, dst netip.AddrPort) error {
	for tries := 0; ; tries++ {
		if err := id.ResolveAddr(netip.AddrPort{}, dst, cmResolveTimeout); err != nil {
			return fmt.Errorf("perftest: rdma_resolve_addr %v: %w", dst, err)
		}
		e, err := nextEvent(ctx, ch, 2*cmResolveTimeout)
		if err != nil {
			return err
		}
		if e.Type == rdmacm.EventAddrResolved {
			break
		}
		if e.Type != rdmacm.EventAddrError || tries+1 >= cmAddrRetries {
			return fmt.Errorf("perftest: resolving %v: unexpected CM event %v", dst, e)
		}
	}
	if err := id.ResolveRoute(cmResolveTimeout); err != nil {
		return fmt.Errorf("perftest: rdma_resolve_route to %v: %w", dst, err)
	}
	e, err := nextEvent(ctx, ch, 2*cmResolveTimeout)
	if err != nil {
		return err
	}
	if e.Type != rdmacm.EventRouteResolved {
		return fmt.Errorf("perftest: resolving the route to %v: unexpected CM event %v", dst, e)
	}
	return nil
}

// wait returns the next completion of cq, spinning a little and then
// sleeping on the CQ's notification, until deadline (zero: no bound) or
// abort.
func (c *cmChannel) wait(cq *verbs.CQ, deadline time.Time) (verbs.WorkCompletion, error) {
	ctx := c.ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	for spins := 0; ; spins++ {
		if cq.Poll(c.wc) == 1 {
			return c.wc[0], nil
		}
		if spins < 256 {
			runtime.Gosched()
			continue
		}
		cq.ReqNotify(false)
		if cq.Poll(c.wc) == 1 {
			return c.wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			if c.ctx.Err() != nil {
				return verbs.WorkCompletion{}, errors.New("aborted")
			}
			return verbs.WorkCompletion{}, err
		}
	}
}

// write is rdma_write_data: one signaled SEND of the message, polled to
// completion.
func (c *cmChannel) write(b []byte, deadline time.Time) error {
	if len(b) > DestStructSize {
		return fmt.Errorf("perftest: a %d-byte message does not fit the peer's %d-byte receive", len(b), DestStructSize)
	}
	copy(c.mr.Bytes()[cmSendOff:], b)
	wr := []verbs.SendWR{{ID: syncSpecID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: c.mr.Addr() + cmSendOff, Length: uint32(len(b)), LKey: c.mr.LKey()}}}}
	if _, err := c.qp.PostSend(wr); err != nil {
		return fmt.Errorf("perftest: writing %d bytes to the peer: %w", len(b), err)
	}
	wc, err := c.wait(c.scq, deadline)
	if err != nil {
		return fmt.Errorf("perftest: writing %d bytes to the peer: %w", len(b), err)
	}
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend || wc.WRID != syncSpecID {
		return fmt.Errorf("perftest: writing %d bytes to the peer: completion %v (vendor error %#x)", len(b), wc.Status, wc.VendorErr)
	}
	return nil
}

// read is rdma_read_data: the next receive's first n bytes; the receive is
// posted again before anything else goes out.
func (c *cmChannel) read(n int, deadline time.Time) ([]byte, error) {
	wc, err := c.wait(c.rcq, deadline)
	if err != nil {
		return nil, fmt.Errorf("perftest: reading %d bytes from the peer: %w", n, err)
	}
	if wc.Status != verbs.WCSuccess || wc.Opcode&verbs.WCRecv == 0 || wc.WRID != syncSpecID {
		return nil, fmt.Errorf("perftest: reading %d bytes from the peer: completion %v, opcode %v", n, wc.Status, wc.Opcode)
	}
	if int(wc.ByteLen) != n {
		return nil, fmt.Errorf("perftest: the peer sent %d bytes, want %d", wc.ByteLen, n)
	}
	in := append([]byte(nil), c.mr.Bytes()[:n]...)
	return in, c.postRecv()
}

func (c *cmChannel) marshalDest(d Dest) []byte        { return d.MarshalStruct() }
func (c *cmChannel) parseDest(b []byte) (Dest, error) { return ParseDestStruct(b) }

// finish: over rdma_cm, ctx_close_connection is the hand shake alone.
func (c *cmChannel) finish() error { return nil }

func (c *cmChannel) abort() { c.cancel() }

// close destroys the control connection's ID (a DREQ, as when perftest's
// process exits) and its resources.
func (c *cmChannel) close() error {
	c.cancel()
	if c.id != nil {
		c.id.Destroy()
		c.id = nil
	}
	if c.qp != nil {
		c.qp.Destroy()
		c.qp = nil
	}
	if c.mr != nil {
		c.mr.Dereg()
		c.mr = nil
	}
	if c.pd != nil {
		c.pd.Dealloc()
		c.pd = nil
	}
	return nil
}

// portSpace is the data connections': TCP for RC, UDP (SIDR) for UD.
func (s *session) portSpace() rdmacm.PortSpace {
	if s.cfg.Conn == UD {
		return rdmacm.PortSpaceUDP
	}
	return rdmacm.PortSpaceTCP
}

// connParam is what both sides offer for a data connection: READ and
// atomic tests their outstanding reads each way, retry counts of 7.
func (s *session) connParam() rdmacm.ConnParam {
	p := rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if v := s.cfg.Tool.Verb; v == Read || v == Atomic {
		n := uint8(min(s.outReads(), 255))
		p.ResponderResources, p.InitiatorDepth = n, n
	}
	return p
}

// udLatency reports whether the server needs the client's QPN before the
// test: UD latency (perftest's duplex bandwidth too, which xdproce perf
// does not run).
func (s *session) udLatency() bool { return s.cfg.Conn == UD && s.cfg.Tool.Test == Lat }

// cmConnect is create_rdma_cm_connection: a hand shake, the data
// connections, another hand shake. The server listens before the first
// hand shake (perftest after it): a client's request then cannot arrive
// before the listener.
func (s *session) cmConnect(ctx context.Context) error {
	c := &s.cfg
	s.cm = &cmState{ps: s.portSpace(), ch: rdmacm.NewEventChannel(), ids: make([]*rdmacm.ID, c.QPs)}
	if c.Conn == UD {
		s.ahs, s.remQPN, s.remKey = make([]*verbs.AddressHandle, c.QPs), make([]uint32, c.QPs), make([]uint32, c.QPs)
	}
	if s.server() && s.lateListen == 0 {
		if err := s.cmListen(); err != nil {
			return err
		}
	}
	// The hand shakes send my_dest[0], which perftest has not filled yet.
	if err := s.oob.barrier(Dest{}); err != nil {
		return err
	}
	if s.server() && s.lateListen > 0 {
		// perftest's order, made slow (tests): the client's requests
		// come before the listener.
		time.Sleep(s.lateListen)
		if err := s.cmListen(); err != nil {
			return err
		}
	}
	var err error
	if s.server() {
		err = s.cmAccept(ctx)
	} else {
		err = s.cmDial(ctx)
	}
	if err != nil {
		return err
	}
	return s.oob.barrier(Dest{})
}

// cmListen binds the data listener to the port, with a backlog of the QPs.
func (s *session) cmListen() error {
	addr, err := s.bindAddr()
	if err != nil {
		return err
	}
	l, err := s.svc.CreateID(s.cm.ch, s.cm.ps, nil)
	if err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	s.cm.listen = l
	if err := l.Bind(addr); err != nil {
		return fmt.Errorf("perftest: rdma_bind_addr %v: %w", addr, err)
	}
	if err := l.Listen(s.cfg.QPs); err != nil {
		return fmt.Errorf("perftest: rdma_listen on port %d: %w", addr.Port(), err)
	}
	return nil
}

// cmAccept is rdma_cm_server_connection: each request gets a QP and is
// accepted; the RC QP's RNR timer then becomes perftest's (an RTS to RTS
// modify: rdma_cm leaves it 0); the UD latency server learns the client's
// QPN and address from its first datagram. The server does not wait for
// ESTABLISHED. Then the listener goes.
func (s *session) cmAccept(ctx context.Context) error {
	c := &s.cfg
	for k := 0; k < c.QPs; {
		e, err := nextEvent(ctx, s.cm.ch, c.Timeout)
		if err != nil {
			return err
		}
		if e.Type != rdmacm.EventConnectRequest {
			continue // ESTABLISHED of the ones accepted
		}
		id := e.ID
		qp, err := s.createQP(k)
		if err != nil {
			id.Reject(nil)
			return err
		}
		s.cm.ids[k] = id
		if err := id.AttachQP(qp); err != nil {
			id.Reject(nil)
			return fmt.Errorf("perftest: %w", err)
		}
		if s.udLatency() {
			if err := s.postQPNRecv(k); err != nil {
				id.Reject(nil)
				return err
			}
		}
		p := s.connParam()
		if err := id.Accept(&p); err != nil {
			return fmt.Errorf("perftest: rdma_accept: %w", err)
		}
		if c.Conn == RC {
			if err := qp.Modify(verbs.QPAttr{MinRNRTimer: minRNRTimer}, verbs.AttrMinRNRTimer); err != nil {
				return fmt.Errorf("perftest: QP %#x's RNR timer: %w", qp.QPN(), err)
			}
		}
		if s.udLatency() {
			if err := s.takeQPN(ctx, k, id); err != nil {
				return err
			}
		}
		k++
	}
	s.cm.listen.Destroy()
	s.cm.listen = nil
	return nil
}

// cmDial is rdma_cm_client_connection: every ID resolves the address, then
// one loop on the channel takes each through the route, a QP and the
// connection, until all are established.
func (s *session) cmDial(ctx context.Context) error {
	c := &s.cfg
	dst, err := s.serverAddr(ctx)
	if err != nil {
		return err
	}
	start := func(i int) error {
		id, err := s.svc.CreateID(s.cm.ch, s.cm.ps, i)
		if err != nil {
			return fmt.Errorf("perftest: %w", err)
		}
		s.cm.ids[i] = id
		if err := id.ResolveAddr(netip.AddrPort{}, dst, cmResolveTimeout); err != nil {
			return fmt.Errorf("perftest: rdma_resolve_addr %v: %w", dst, err)
		}
		return nil
	}
	for i := range c.QPs {
		if err := start(i); err != nil {
			return err
		}
	}
	rejects := 0
	for left := c.QPs; left > 0; {
		e, err := nextEvent(ctx, s.cm.ch, c.Timeout)
		if err != nil {
			return err
		}
		i, ok := e.ID.Context.(int)
		if !ok || i >= c.QPs || s.cm.ids[i] != e.ID {
			continue // an ID given up after a rejection
		}
		id := e.ID
		switch e.Type {
		case rdmacm.EventAddrResolved:
			if err := id.ResolveRoute(cmResolveTimeout); err != nil {
				return fmt.Errorf("perftest: rdma_resolve_route to %v: %w", dst, err)
			}
		case rdmacm.EventRouteResolved:
			qp := s.qps[i]
			if qp == nil {
				if qp, err = s.createQP(i); err != nil {
					return err
				}
			}
			if err := id.AttachQP(qp); err != nil {
				return fmt.Errorf("perftest: %w", err)
			}
			if err := id.Connect(s.connParam()); err != nil {
				return fmt.Errorf("perftest: rdma_connect to %v: %w", dst, err)
			}
		case rdmacm.EventEstablished:
			if c.Conn == UD {
				if err := s.udPeer(i, e.UD); err != nil {
					return err
				}
			}
			left--
		case rdmacm.EventRejected, rdmacm.EventUnreachable:
			notYet := e.Type == rdmacm.EventRejected && e.Status == int(cm.RejInvalidServiceID) ||
				e.Type == rdmacm.EventUnreachable && c.Conn == UD && e.Status == int(cm.SIDRUnsupported)
			if !notYet || rejects >= cmRejectRetries {
				return fmt.Errorf("perftest: RDMA CM event error: Event: %v; error: %d", e.Type, e.Status)
			}
			// The server is not listening yet (REJ reason 8; for UD the
			// SIDR reply "unsupported"): the request again, on a new ID.
			rejects++
			id.DetachQP()
			id.Destroy()
			s.cm.ids[i] = nil
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cmRejectRetryDelay):
			}
			if err := start(i); err != nil {
				return err
			}
		default:
			return fmt.Errorf("perftest: RDMA CM event error: Event: %v; error: %d", e.Type, e.Status)
		}
	}
	return nil
}

// udPeer takes a UD service's answer (SIDR): the address handle, QPN and
// Q_Key to send to; the latency client then tells the server its QPN.
func (s *session) udPeer(i int, ud rdmacm.UDParam) error {
	ah, err := s.pd.CreateAH(ud.AH)
	if err != nil {
		return fmt.Errorf("perftest: the address handle of UD QP %d: %w", i, err)
	}
	s.ahs[i], s.remQPN[i], s.remKey[i] = ah, ud.QPNum, ud.QKey
	if s.cfg.Tool.Test == Lat {
		return s.sendQPN(i)
	}
	return nil
}

// sendQPN is rdma_cm_send_ud_connection_parameters: a 4-byte SEND with
// immediate whose immediate is this QP's number.
func (s *session) sendQPN(i int) error {
	qp := s.qps[i]
	src := s.mr.Bytes()[i*s.slot:]
	saved := binary.LittleEndian.Uint32(src)
	binary.LittleEndian.PutUint32(src, qp.QPN())
	defer binary.LittleEndian.PutUint32(src, saved)
	wr := []verbs.SendWR{{Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: qp.QPN(),
		SGList: []verbs.SGE{{Addr: s.mr.Addr() + uint64(i*s.slot), Length: 4, LKey: s.mr.LKey()}},
		AH:     s.ahs[i], RemoteQPN: s.remQPN[i], RemoteQKey: s.remKey[i]}}
	if _, err := qp.PostSend(wr); err != nil {
		return fmt.Errorf("perftest: sending the UD QPN: %w", err)
	}
	wc := make([]verbs.WorkCompletion, 1)
	if err := s.pollOne(context.Background(), s.sendCQ, wc, nil); err != nil {
		return fmt.Errorf("perftest: sending the UD QPN: %w", err)
	}
	return nil
}

// postQPNRecv posts the receive of the client's QPN datagram (its GRH area
// and 4 bytes) in QP k's receive slot.
func (s *session) postQPNRecv(k int) error {
	wr := []verbs.RecvWR{{ID: udQPNRecvID, SGList: []verbs.SGE{{Addr: s.mr.Addr() + uint64((s.cfg.QPs+k)*s.slot),
		Length: grhSize + 4, LKey: s.mr.LKey()}}}}
	if _, err := s.qps[k].PostRecv(wr); err != nil {
		return fmt.Errorf("perftest: posting the receive of the client's QPN: %w", err)
	}
	return nil
}

// takeQPN is rdma_cm_initialize_ud_connection_parameters: the client's
// datagram gives its QPN (the immediate) and, from its GRH, the address
// handle (ibv_create_ah_from_wc); the Q_Key is this QP's own.
func (s *session) takeQPN(ctx context.Context, k int, id *rdmacm.ID) error {
	wc := make([]verbs.WorkCompletion, 1)
	if err := s.pollOne(ctx, s.recvCQ, wc, nil); err != nil {
		return fmt.Errorf("perftest: waiting for the client's UD QPN: %w", err)
	}
	if wc[0].WRID != udQPNRecvID || wc[0].Opcode&verbs.WCRecv == 0 || wc[0].Flags&verbs.WCWithImm == 0 {
		return fmt.Errorf("perftest: the client's UD QPN: completion %+v", wc[0])
	}
	base := (s.cfg.QPs + k) * s.slot
	ah, err := verbs.AHFromGRH(s.mr.Bytes()[base:base+grhSize], id.GIDIndex())
	if err != nil {
		return err
	}
	if s.ahs[k], err = s.pd.CreateAH(ah); err != nil {
		return fmt.Errorf("perftest: the address handle of UD QP %d: %w", k, err)
	}
	s.remQPN[k], s.remKey[k] = wc[0].ImmData, rdmacm.UDPQKey
	return nil
}

// cmDisconnect closes the RC data connections and waits for the peer's
// answers (DISCONNECTED). UD has nothing to close.
func (s *session) cmDisconnect() error {
	if s.cfg.Conn != RC {
		return nil
	}
	pending := map[*rdmacm.ID]bool{}
	var errs []error
	for _, id := range s.cm.ids {
		if id == nil {
			continue
		}
		if err := id.Disconnect(); err != nil {
			errs = append(errs, fmt.Errorf("perftest: rdma_disconnect: %w", err))
			continue
		}
		pending[id] = true
	}
	// The peer's DREQ may have come first: its DISCONNECTED is queued.
	end := time.Now().Add(min(cmDisconnectWait, s.cfg.Timeout))
	for len(pending) > 0 {
		e, err := nextEvent(context.Background(), s.cm.ch, time.Until(end))
		if err != nil {
			errs = append(errs, fmt.Errorf("perftest: %d data connections not disconnected: %w", len(pending), err))
			break
		}
		if e.Type == rdmacm.EventDisconnected {
			delete(pending, e.ID)
		}
	}
	return errors.Join(errs...)
}

// cmRelease destroys the data connections' IDs (what the CM still owes the
// peer, it sends) and the listener.
func (s *session) cmRelease() {
	for i, id := range s.cm.ids {
		if id != nil {
			id.Destroy()
			s.cm.ids[i] = nil
		}
	}
	if s.cm.listen != nil {
		s.cm.listen.Destroy()
		s.cm.listen = nil
	}
}
