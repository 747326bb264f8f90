package rdmacm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cmagent"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// idState is enum rdma_cm_state.
type idState uint8

const (
	stateIdle idState = iota
	stateAddrQuery
	stateAddrResolved
	stateRouteQuery
	stateRouteResolved
	stateConnect
	stateDisconnect
	stateAddrBound
	stateListen
	stateDestroying
)

var idStateNames = [...]string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT",
	"DISCONNECT", "ADDR_BOUND", "LISTEN", "DESTROYING"}

func (s idState) String() string { return idStateNames[s] }

// Connection defaults as rdma_cm's on RoCE.
const (
	hopLimit        = 64
	maxCMPrivate    = 92 - cm.IPHeaderLen // a REQ's private data after the IP header
	maxSIDRPrivate  = 216 - cm.IPHeaderLen
	localCAACKDelay = cmagent.DefaultTargetACKDelay
	defaultRetry    = 7
)

// ID is an rdma_cm communication identifier (struct rdma_cm_id).
type ID struct {
	s  *Service
	ch *EventChannel
	ps PortSpace
	// Context is the owner's.
	Context any

	mu       sync.Mutex
	state    idState
	src, dst netip.AddrPort
	bound    bool
	sgid     int
	dmac     net.HardwareAddr
	flow     uint32 // the path's flow label
	qp       *verbs.QP
	qkey     uint32
	conn     *cmagent.Conn
	listener *cmagent.Listener
	backlog  int
	pending  int        // requests announced and not yet answered (listener)
	parent   *ID        // the listener of a passive ID, until it answers
	req      cm.REQ     // the request: sent (active) or received (passive)
	accepted bool       // passive: answered
	resp     *ConnParam // active: the REP's, which ESTABLISHED reports
	rep      cm.REP     // active: the REP
	seq      uint32     // the PSN this end receives first (its REQ's or REP's)
	ackTO    uint8      // RDMA_OPTION_ID_ACK_TIMEOUT, 0 for the CM's
	tos      uint8
	timeout  time.Duration
	// stopResolve ends the address resolution in progress (Destroy).
	stopResolve context.CancelFunc
	rem         *remoteID    // the daemon's ID, on a device attached to it
	quiet       bool         // the owner established: its ESTABLISHED is not reported
	groups      []netip.Addr // the multicast groups joined, by GID (mcast.go)
	// loopback: the destination was a loopback or wildcard address, which
	// resolves (cma_resolve_loopback) but has no RoCE route.
	loopback bool
}

// CreateID makes an ID in port space ps whose events go to ch.
func (s *Service) CreateID(ch *EventChannel, ps PortSpace, ctx any) (*ID, error) {
	switch ps {
	case PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
	default:
		return nil, fmt.Errorf("rdmacm: port space %#x: %w", uint16(ps), ErrNotSup)
	}
	id := &ID{s: s, ch: ch, ps: ps, Context: ctx, qkey: UDPQKey}
	if s.rem != nil {
		if err := s.rem.createID(id); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.ids[id] = struct{}{}
	s.mu.Unlock()
	return id, nil
}

// State is the ID's rdma_cm state (ADDR_BOUND, LISTEN, CONNECT, ...);
// empty for an ID in the daemon, which knows it.
func (id *ID) State() string {
	if id.rem != nil {
		return ""
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state.String()
}

// PortSpace is the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// Channel is the channel the ID's events go to.
func (id *ID) Channel() *EventChannel {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ch
}

// Migrate moves the ID's future events to ch (rdma_migrate_id).
func (id *ID) Migrate(ch *EventChannel) error {
	if id.rem != nil {
		if err := id.remoteMigrate(ch); err != nil {
			return err
		}
	}
	id.mu.Lock()
	from := id.ch
	id.ch = ch
	id.mu.Unlock()
	// The events already queued for the ID go with it, as the kernel's.
	if from != ch {
		for _, e := range from.takeFor(id) {
			ch.post(e)
		}
	}
	return nil
}

// LocalAddr and RemoteAddr are the ID's addresses (rdma_get_local_addr,
// rdma_get_peer_addr; their ports rdma_get_src_port and dst_port).
func (id *ID) LocalAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.rem != nil {
		return addrOf(id.rem.info.Src)
	}
	return id.src
}

// RemoteAddr: see LocalAddr.
func (id *ID) RemoteAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.rem != nil {
		return addrOf(id.rem.info.Dst)
	}
	return id.dst
}

// QP is the ID's QP, if it has one.
func (id *ID) QP() *verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

// GIDIndex is the index of the GID the ID's address is.
func (id *ID) GIDIndex() int {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.rem != nil {
		return int(id.rem.info.GIDIndex)
	}
	return id.sgid
}

// ud reports whether the ID is a UD one: its lookups are SIDR's.
func (id *ID) ud() bool { return id.ps == PortSpaceUDP }

func (id *ID) post(e Event) {
	e.ID = id
	id.mu.Lock()
	ch := id.ch
	id.mu.Unlock()
	ch.post(e)
}

// Bind gives the ID a local address (one of the device's, or unspecified)
// and port (0: a free one), as rdma_bind_addr.
func (id *ID) Bind(addr netip.AddrPort) error {
	if id.rem != nil {
		return id.remoteBind(addr)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stateIdle {
		return fmt.Errorf("rdmacm: bind in %v: %w", id.state, ErrInvalid)
	}
	return id.bindLocked(addr)
}

func (id *ID) bindLocked(addr netip.AddrPort) error {
	ip := addr.Addr().Unmap()
	sgid := 0
	if ip.IsValid() && !ip.IsUnspecified() {
		if sgid = id.s.gidIndex(ip); sgid < 0 {
			return fmt.Errorf("rdmacm: %v is not the device's: %w", ip, ErrAddrNotAvail)
		}
	}
	port, err := id.s.bind(id, addr.Port())
	if err != nil {
		return err
	}
	id.src, id.sgid, id.bound, id.state = netip.AddrPortFrom(ip, port), sgid, true, stateAddrBound
	return nil
}

// ResolveAddr finds the local address for dst (src, if valid, is it) and
// the neighbour's MAC address: ADDR_RESOLVED, or ADDR_ERROR with the
// errno, follows within timeout.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	if id.rem != nil {
		return id.remoteResolveAddr(src, dst, timeout)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if !dst.Addr().IsValid() || id.s.ctx.Err() != nil {
		return fmt.Errorf("rdmacm: destination %v: %w", dst, ErrInvalid)
	}
	if id.state == stateIdle {
		if err := id.bindLocked(netip.AddrPortFrom(src.Addr(), src.Port())); err != nil {
			return err
		}
	}
	if id.state != stateAddrBound {
		return fmt.Errorf("rdmacm: resolve_addr in %v: %w", id.state, ErrInvalid)
	}
	dstIP := dst.Addr().Unmap()
	if dstIP.IsLoopback() || dstIP.IsUnspecified() {
		return id.resolveLoopbackLocked(dstIP, dst.Port())
	}
	if !id.src.Addr().IsValid() || id.src.Addr().IsUnspecified() {
		i, ok := id.s.gidFor(dstIP)
		if !ok {
			return fmt.Errorf("rdmacm: no address of the device reaches %v: %w", dstIP, ErrAddrNotAvail)
		}
		id.sgid = i
		id.src = netip.AddrPortFrom(id.s.gids[i].Unmap(), id.src.Port())
	} else if id.src.Addr().Is4() != dstIP.Is4() {
		return fmt.Errorf("rdmacm: %v cannot reach %v: %w", id.src.Addr(), dstIP, ErrInvalid)
	}
	id.dst = netip.AddrPortFrom(dstIP, dst.Port())
	id.state = stateAddrQuery
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	id.timeout = timeout
	// The resolution ends with the ID or the service, not only at its
	// timeout: an owner that destroys the ID leaves nothing running.
	ctx, cancel := context.WithTimeout(id.s.ctx, timeout)
	id.stopResolve = cancel
	id.s.wg.Add(1)
	go func() {
		defer id.s.wg.Done()
		defer cancel()
		id.resolveNeighbour(ctx, dstIP)
	}()
	return nil
}

// resolveLoopbackLocked resolves a loopback or wildcard destination as
// Linux's rdma_cm does on a RoCE device (cma_bind_loopback,
// cma_resolve_loopback, and rdma_resolve_ip through lo): the address
// resolves, to the device's first GID with the loopback address as the
// source, and nothing is asked on the wire; the route then fails with
// ENODEV (ResolveRoute), as on rxe: `rping -c -a 127.0.0.1` (or 0.0.0.0,
// ::1) reports "rdma_resolve_route: No such device" there.
func (id *ID) resolveLoopbackLocked(dst netip.Addr, port uint16) error {
	lo := netip.IPv6Loopback()
	if dst.Is4() {
		lo = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if !id.src.Addr().IsValid() || id.src.Addr().IsUnspecified() {
		id.sgid = 0
		id.src = netip.AddrPortFrom(lo, id.src.Port())
	}
	if dst.IsUnspecified() {
		dst = lo
	}
	id.dst = netip.AddrPortFrom(dst, port)
	id.dmac, id.state, id.loopback = slices.Clone(id.s.dev.MAC()), stateAddrResolved, true
	// The event goes out after the caller unlocks, as a neighbour's does.
	id.s.wg.Add(1)
	go func() {
		defer id.s.wg.Done()
		id.post(Event{Type: EventAddrResolved})
	}()
	return nil
}

// Resolving reports whether the ID is resolving an address.
func (id *ID) Resolving() bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state == stateAddrQuery
}

func (id *ID) resolveNeighbour(ctx context.Context, dst netip.Addr) {
	mac, err := id.s.dev.ResolveMAC(ctx, dst)
	id.mu.Lock()
	if id.state != stateAddrQuery {
		id.mu.Unlock()
		return
	}
	if err != nil {
		id.state = stateAddrBound
		id.mu.Unlock()
		id.post(Event{Type: EventAddrError, Status: status(err)})
		return
	}
	id.dmac, id.state = mac, stateAddrResolved
	id.mu.Unlock()
	id.post(Event{Type: EventAddrResolved})
}

// ResolveRoute fixes the path to the resolved address: on RoCE the
// addresses are the route, so ROUTE_RESOLVED follows at once.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	if id.rem != nil {
		return id.remoteResolveRoute(timeout)
	}
	id.mu.Lock()
	if id.state != stateAddrResolved {
		defer id.mu.Unlock()
		return fmt.Errorf("rdmacm: resolve_route in %v: %w", id.state, ErrInvalid)
	}
	if id.loopback {
		defer id.mu.Unlock()
		return fmt.Errorf("rdmacm: no RoCE route to %v: %w", id.dst.Addr(), syscall.ENODEV)
	}
	id.flow = flowLabel(id.src.Port(), id.dst.Port())
	id.state = stateRouteResolved
	id.mu.Unlock()
	id.post(Event{Type: EventRouteResolved})
	return nil
}

// flowLabel is the flow label rdma_cm gives an IP connection's path, from
// its ports (Linux's cma_get_roce_udp_flow_label); the QPs' UDP source
// port derives from it.
func flowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xfffff
}

// SetTOS sets the type of service of the ID's path (RDMA_OPTION_ID_TOS).
func (id *ID) SetTOS(tos uint8) {
	if id.rem != nil {
		id.SetOption(OptionLevelID, OptionTOS, []byte{tos})
		return
	}
	id.mu.Lock()
	id.tos = tos
	id.mu.Unlock()
}

// AttachQP gives the ID a QP the owner made (in RESET or INIT): connect
// and accept move it to RTS, disconnect to ERR. A UD QP is brought to RTS
// at once with rdma_cm's Q_Key, as rdma_create_qp does.
func (id *ID) AttachQP(qp *verbs.QP) error {
	if id.rem != nil {
		return id.remoteAttachQP(qp)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp != nil {
		return fmt.Errorf("rdmacm: the ID has a QP: %w", ErrInvalid)
	}
	if id.ud() {
		if err := bringUpUD(qp, id.qkey); err != nil {
			return err
		}
	} else if qp.State() == verbs.StateReset {
		if err := qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			return fmt.Errorf("rdmacm: QP to INIT: %w", err)
		}
	}
	id.qp = qp
	return nil
}

// DetachQP forgets the ID's QP (rdma_destroy_qp destroys it after).
func (id *ID) DetachQP() {
	id.mu.Lock()
	id.qp = nil
	id.mu.Unlock()
}

func bringUpUD(qp *verbs.QP, qkey uint32) error {
	if qp.State() == verbs.StateReset {
		if err := qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1, QKey: qkey},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey); err != nil {
			return fmt.Errorf("rdmacm: UD QP to INIT: %w", err)
		}
	}
	if qp.State() == verbs.StateInit {
		if err := qp.Modify(verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState); err != nil {
			return fmt.Errorf("rdmacm: UD QP to RTR: %w", err)
		}
	}
	if qp.State() == verbs.StateRTR {
		if err := qp.Modify(verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
			return fmt.Errorf("rdmacm: UD QP to RTS: %w", err)
		}
	}
	return nil
}

// Listen takes connection requests (UD: SIDR lookups) to the ID's port,
// at most backlog unanswered at once; an unbound ID gets a free port.
func (id *ID) Listen(backlog int) error {
	if id.rem != nil {
		return id.remoteListen(backlog)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateIdle {
		if err := id.bindLocked(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
	}
	if id.state != stateAddrBound {
		return fmt.Errorf("rdmacm: listen in %v: %w", id.state, ErrInvalid)
	}
	l, err := id.s.agent.Listen(cm.ServiceID(uint16(id.ps), id.src.Port()), id)
	if err != nil {
		return fmt.Errorf("rdmacm: listen: %w (%w)", ErrAddrInUse, err)
	}
	if backlog <= 0 {
		backlog = 1024
	}
	id.listener, id.backlog, id.state = l, backlog, stateListen
	return nil
}

// request takes a connection request (or SIDR lookup) to the listening ID:
// a new ID for it, announced on the listener's channel.
func (l *ID) request(e cmagent.Event) {
	l.mu.Lock()
	if l.state != stateListen {
		l.mu.Unlock()
		e.Conn.Reject(cm.RejConsumerDefined, nil)
		return
	}
	if l.pending >= l.backlog {
		// No answer, so the requester's retransmission may find room (Linux:
		// no REJ for ENOMEM).
		l.mu.Unlock()
		e.Conn.Ignore()
		return
	}
	listenAddr := l.src.Addr()
	ch := l.ch
	l.mu.Unlock()
	if isSIDR := e.SIDR.ServiceID != 0; isSIDR != (l.ps == PortSpaceUDP) {
		// A lookup of a connected service, or a connection to a UD one.
		e.Conn.Reject(cm.RejInvalidServiceID, nil)
		return
	}
	hdr, err := cm.GetIPHeader(e.PrivateData)
	if err != nil {
		e.Conn.Reject(cm.RejConsumerDefined, nil)
		return
	}
	dst := hdr.Dst.Unmap()
	sgid := l.s.gidIndex(dst)
	if sgid < 0 || e.Peer.Unmap() != hdr.Src.Unmap() ||
		(listenAddr.IsValid() && !listenAddr.IsUnspecified() && listenAddr != dst) {
		// Not rdma_cm's, not to us, or to another address than the
		// listener's: Linux's cma finds no listener and rejects.
		e.Conn.Reject(cm.RejConsumerDefined, nil)
		return
	}
	id := &ID{s: l.s, ch: ch, ps: l.ps, Context: l.Context, qkey: UDPQKey, state: stateConnect, parent: l, seq: l.s.psn(),
		src: netip.AddrPortFrom(dst, l.src.Port()), dst: netip.AddrPortFrom(hdr.Src.Unmap(), hdr.SrcPort),
		sgid: sgid, conn: e.Conn, req: e.REQ, flow: e.REQ.Primary.FlowLabel}
	l.s.mu.Lock()
	l.s.ids[id] = struct{}{}
	l.s.mu.Unlock()
	l.mu.Lock()
	l.pending++
	l.mu.Unlock()
	e.Conn.SetContext(id)
	ev := Event{Type: EventConnectRequest, ID: id, Listen: l}
	if id.ud() {
		ev.UD.PrivateData = e.PrivateData[cm.IPHeaderLen:min(len(e.PrivateData), cm.IPHeaderLen+maxSIDRPrivate)]
	} else {
		r := &e.REQ
		ev.Param = ConnParam{PrivateData: e.PrivateData[cm.IPHeaderLen:], ResponderResources: r.InitiatorDepth,
			InitiatorDepth: r.ResponderResources, FlowControl: r.EndToEndFlowControl, RetryCount: r.RetryCount,
			RNRRetryCount: r.RNRRetryCount, SRQ: r.SRQ, QPNum: r.LocalQPN}
	}
	ch.post(ev)
}

// answeredLocked stops counting a passive ID against its listener's
// backlog. Lock order: an ID before its listener.
func (id *ID) answeredLocked() {
	if !id.accepted && id.parent != nil {
		id.parent.mu.Lock()
		id.parent.pending--
		id.parent.mu.Unlock()
	}
	id.accepted = true
}

// Connect asks the resolved peer for a connection (UD: looks its service
// up): ESTABLISHED, or REJECTED, UNREACHABLE or CONNECT_ERROR, follows; with
// no QP of the ID's, CONNECT_RESPONSE, after which the owner moves its QP
// and calls Establish.
func (id *ID) Connect(p ConnParam) error {
	if id.rem != nil {
		return id.remoteConnParamOp(uverbs.OpCMConnect, &p)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stateRouteResolved {
		return fmt.Errorf("rdmacm: connect in %v: %w", id.state, ErrInvalid)
	}
	limit := maxCMPrivate
	if id.ps == PortSpaceUDP {
		limit = maxSIDRPrivate
	}
	if len(p.PrivateData) > limit {
		return fmt.Errorf("rdmacm: %d bytes of private data, at most %d: %w", len(p.PrivateData), limit, ErrInvalid)
	}
	pd := make([]byte, cm.IPHeaderLen+len(p.PrivateData))
	if err := cm.PutIPHeader(pd, cm.IPHeader{SrcPort: id.src.Port(), Src: id.src.Addr(), Dst: id.dst.Addr()}); err != nil {
		return fmt.Errorf("rdmacm: %w: %w", ErrInvalid, err)
	}
	copy(pd[cm.IPHeaderLen:], p.PrivateData)
	serviceID := cm.ServiceID(uint16(id.ps), id.dst.Port())
	if id.ps == PortSpaceUDP {
		c, err := id.s.agent.Resolve(id.dst.Addr(), serviceID, pd, id)
		if err != nil {
			return err
		}
		id.conn, id.state = c, stateConnect
		return nil
	}
	qpn := p.QPNum
	srq := p.SRQ
	if id.qp != nil {
		qpn = id.qp.QPN()
		srq = srq || id.qp.HasSRQ()
	}
	if qpn == 0 {
		return fmt.Errorf("rdmacm: connect without a QP: %w", ErrInvalid)
	}
	req := cm.REQ{ServiceID: serviceID, LocalQPN: qpn,
		ResponderResources:      min(p.ResponderResources, uint8(id.s.attr.MaxQPRdAtom)),
		InitiatorDepth:          min(p.InitiatorDepth, uint8(id.s.attr.MaxQPInitRdAtom)),
		RemoteCMResponseTimeout: id.s.opts.ResponseTimeout, LocalCMResponseTimeout: id.s.opts.ResponseTimeout,
		TransportType: cm.TransportRC, EndToEndFlowControl: p.FlowControl, StartingPSN: id.s.psn(),
		RetryCount: min(p.RetryCount, 7), RNRRetryCount: min(p.RNRRetryCount, 7), PKey: 0xffff, PathMTU: uint8(id.s.mtu),
		SRQ: srq, MaxCMRetries: cmagent.DefaultMaxRetries,
		Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: id.src.Addr().As16(), RemoteGID: id.dst.Addr().As16(),
			FlowLabel: id.flow, TrafficClass: id.tos, HopLimit: hopLimit, SL: 0,
			LocalACKTimeout: cmagent.ACKTimeout(localCAACKDelay, id.s.opts.PacketLifetime)}}
	copy(req.PrivateData[:], pd)
	c, err := id.s.agent.Connect(id.dst.Addr(), req, id)
	if err != nil {
		return err
	}
	id.conn, id.req, id.seq, id.state = c, req, req.StartingPSN, stateConnect
	return nil
}

// cmEvent takes the CM's news of the ID's connection.
func (id *ID) cmEvent(e cmagent.Event) {
	switch e.Type {
	case cmagent.EventConnectResponse:
		id.connectResponse(e)
	case cmagent.EventEstablished:
		id.mu.Lock()
		quiet := id.quiet
		id.mu.Unlock()
		if quiet {
			return
		}
		ev := Event{Type: EventEstablished}
		if id.ud() {
			id.mu.Lock()
			ev.UD = UDParam{PrivateData: e.PrivateData, QPNum: e.SIDR.QPN, QKey: e.SIDR.QKey,
				AH: verbs.AH{DGID: id.dst.Addr(), SGIDIndex: id.sgid, HopLimit: hopLimit, TrafficClass: id.tos, DMAC: id.dmac}}
			id.mu.Unlock()
		} else {
			id.mu.Lock()
			if id.resp != nil {
				ev.Param = *id.resp
			} else {
				ev.Param.PrivateData = e.PrivateData
			}
			id.mu.Unlock()
		}
		id.post(ev)
	case cmagent.EventRejected:
		id.mu.Lock()
		id.state = stateRouteResolved
		id.mu.Unlock()
		id.post(Event{Type: EventRejected, Status: int(e.Reason), Param: ConnParam{PrivateData: e.PrivateData}})
	case cmagent.EventUnreachable:
		st := status(ErrTimedOut)
		if id.ud() && e.SIDR.Status != cm.SIDRValid && e.SIDR.ServiceID != 0 {
			st = int(e.SIDR.Status)
		}
		id.post(Event{Type: EventUnreachable, Status: st})
	case cmagent.EventDisconnected:
		id.mu.Lock()
		id.state = stateDisconnect
		id.mu.Unlock()
		id.post(Event{Type: EventDisconnected, Param: ConnParam{PrivateData: e.PrivateData}})
	case cmagent.EventTimewaitExit:
		id.post(Event{Type: EventTimewaitExit})
	}
}

// connectResponse brings the ID's QP to RTS and completes the connection,
// as librdmacm does inside rdma_get_cm_event; without a QP the owner does.
func (id *ID) connectResponse(e cmagent.Event) {
	r := &e.REP
	param := ConnParam{PrivateData: e.PrivateData, ResponderResources: r.InitiatorDepth, InitiatorDepth: r.ResponderResources,
		FlowControl: r.EndToEndFlowControl, RNRRetryCount: r.RNRRetryCount, SRQ: r.SRQ, QPNum: r.LocalQPN}
	id.mu.Lock()
	qp, req, sgid, dmac := id.qp, id.req, id.sgid, id.dmac
	id.resp, id.rep = &param, *r
	id.mu.Unlock()
	if qp == nil {
		id.post(Event{Type: EventConnectResponse, Param: param})
		return
	}
	p := cmagent.ActiveQPParams(&req, r, id.s.opts.PacketLifetime)
	if err := id.s.connectQP(qp, id.peer(p, sgid, dmac)); err != nil {
		e.Conn.Reject(cm.RejConsumerDefined, nil)
		id.post(Event{Type: EventConnectError, Status: status(err)})
		return
	}
	if err := e.Conn.Establish(nil); err != nil {
		id.post(Event{Type: EventConnectError, Status: status(err)})
	}
}

// peer is what the connection's QP takes on its way to RTS.
func (id *ID) peer(p cmagent.QPParams, sgid int, dmac net.HardwareAddr) verbs.Peer {
	s := id.s
	access := verbs.AccessRemoteWrite
	if p.MaxDestRdAtomic > 0 {
		access |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	timeout := p.Timeout
	if id.ackTO != 0 {
		timeout = id.ackTO
	}
	return verbs.Peer{Access: access,
		AH: verbs.AH{DGID: netip.AddrFrom16(p.Path.RemoteGID).Unmap(), SGIDIndex: sgid, HopLimit: p.Path.HopLimit,
			TrafficClass: p.Path.TrafficClass, FlowLabel: p.Path.FlowLabel, DMAC: dmac},
		DestQPN: p.RemoteQPN, RQPSN: p.RQPSN, SQPSN: p.SQPSN, PathMTU: min(verbs.MTU(p.PathMTU), s.mtu),
		Timeout: timeout, RetryCnt: p.RetryCount, RNRRetry: p.RNRRetryCount,
		MaxRdAtomic: min(p.MaxRdAtomic, uint8(s.attr.MaxQPInitRdAtom)), MaxDestRdAtomic: min(p.MaxDestRdAtomic, uint8(s.attr.MaxQPRdAtom))}
}

// connectQP moves qp to RTS facing peer.
func (s *Service) connectQP(qp *verbs.QP, peer verbs.Peer) error {
	if qp.State() == verbs.StateInit {
		// rdma_create_qp left it in INIT without rights; now they are known.
		if err := qp.Modify(verbs.QPAttr{State: verbs.StateInit, AccessFlags: peer.Access}, verbs.AttrState|verbs.AttrAccessFlags); err != nil {
			return fmt.Errorf("rdmacm: QP to INIT: %w", err)
		}
	}
	return qp.Connect(peer)
}

// Establish completes an active connection whose CONNECT_RESPONSE the
// owner handled (its QP is in RTS): the RTU goes. No ESTABLISHED follows,
// as with rdma_establish: the owner knows.
func (id *ID) Establish() error {
	if id.rem != nil {
		return id.remoteOp(uverbs.OpCMEstablish, nil)
	}
	id.mu.Lock()
	c := id.conn
	id.quiet = true
	id.mu.Unlock()
	if c == nil {
		return fmt.Errorf("rdmacm: establish without a connection: %w", ErrInvalid)
	}
	if err := c.Establish(nil); err != nil {
		return fmt.Errorf("rdmacm: %w (%w)", ErrInvalid, err)
	}
	return nil
}

// Accept answers a CONNECT_REQUEST: the ID's QP goes to RTS and the REP
// leaves (ESTABLISHED follows the peer's RTU); for a UD lookup the reply
// names the ID's QP and Q_Key. A nil p takes the request's resources and
// retry counts of 7, as rdma_accept(id, NULL).
func (id *ID) Accept(p *ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.parent == nil || id.accepted || id.state != stateConnect {
		return fmt.Errorf("rdmacm: accept in %v: %w", id.state, ErrInvalid)
	}
	if p == nil {
		p = &ConnParam{ResponderResources: id.req.InitiatorDepth, InitiatorDepth: id.req.ResponderResources,
			RetryCount: defaultRetry, RNRRetryCount: defaultRetry}
	}
	if id.rem != nil {
		id.mu.Unlock()
		err := id.remoteConnParamOp(uverbs.OpCMAccept, p)
		id.mu.Lock()
		if err == nil {
			id.accepted = true
		}
		return err
	}
	qpn := p.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	if id.ud() {
		if len(p.PrivateData) > 136 {
			return fmt.Errorf("rdmacm: %d bytes of SIDR reply private data: %w", len(p.PrivateData), ErrInvalid)
		}
		if err := id.conn.ReplySIDR(cm.SIDRValid, qpn, id.qkey, p.PrivateData); err != nil {
			return fmt.Errorf("rdmacm: %w (%w)", ErrInvalid, err)
		}
		id.answeredLocked()
		return nil
	}
	if len(p.PrivateData) > 196 || qpn == 0 {
		return fmt.Errorf("rdmacm: accept with %d bytes of private data, QPN %#x: %w", len(p.PrivateData), qpn, ErrInvalid)
	}
	rep := cm.REP{LocalQPN: qpn, StartingPSN: id.seq,
		ResponderResources: min(p.ResponderResources, uint8(id.s.attr.MaxQPRdAtom)),
		InitiatorDepth:     min(p.InitiatorDepth, uint8(id.s.attr.MaxQPInitRdAtom)),
		TargetACKDelay:     localCAACKDelay, EndToEndFlowControl: p.FlowControl, RNRRetryCount: min(p.RNRRetryCount, 7),
		SRQ: p.SRQ || (id.qp != nil && id.qp.HasSRQ())}
	copy(rep.PrivateData[:], p.PrivateData)
	if id.qp != nil {
		if err := id.s.connectQP(id.qp, id.peer(cmagent.PassiveQPParams(&id.req, &rep), id.sgid, nil)); err != nil {
			return err
		}
	}
	if err := id.conn.Accept(rep); err != nil {
		return fmt.Errorf("rdmacm: %w (%w)", ErrInvalid, err)
	}
	id.answeredLocked()
	return nil
}

// Reject refuses a CONNECT_REQUEST with private data (REJ reason 28,
// "consumer defined"; for a UD lookup a SIDR reply "rejected").
func (id *ID) Reject(private []byte) error {
	if id.rem != nil {
		return id.remoteOp(uverbs.OpCMReject, &uverbs.CMReject{PrivateData: private})
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.parent == nil || id.accepted || id.conn == nil {
		return fmt.Errorf("rdmacm: reject in %v: %w", id.state, ErrInvalid)
	}
	if len(private) > 148 {
		return fmt.Errorf("rdmacm: %d bytes of reject private data: %w", len(private), ErrInvalid)
	}
	if err := id.conn.Reject(cm.RejConsumerDefined, private); err != nil {
		return fmt.Errorf("rdmacm: %w (%w)", ErrInvalid, err)
	}
	id.answeredLocked()
	return nil
}

// Disconnect moves the ID's QP to ERR (its work flushes) and closes the
// connection: the DREQ, or the DREP of the peer's.
func (id *ID) Disconnect() error {
	if id.rem != nil {
		return id.remoteOp(uverbs.OpCMDisconnect, nil)
	}
	id.mu.Lock()
	qp, c, st := id.qp, id.conn, id.state
	id.mu.Unlock()
	if c == nil || (st != stateConnect && st != stateDisconnect) || id.ud() {
		return fmt.Errorf("rdmacm: disconnect in %v: %w", st, ErrInvalid)
	}
	if qp != nil {
		if err := qp.Modify(verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
			return fmt.Errorf("rdmacm: QP to ERR: %w", err)
		}
	}
	if err := c.Disconnect(nil); err != nil {
		return fmt.Errorf("rdmacm: %w (%w)", ErrInvalid, err)
	}
	return nil
}

// Destroy frees the ID: its port, its listener, and its connection (what
// the CM still owes the peer — a REJ, a DREQ, a DREP — it sends). Its QP
// is the owner's.
func (id *ID) Destroy() error {
	id.mu.Lock()
	if id.state == stateDestroying {
		id.mu.Unlock()
		return fmt.Errorf("rdmacm: ID destroyed: %w", ErrInvalid)
	}
	id.state = stateDestroying
	l, c, bound, port := id.listener, id.conn, id.bound, id.src.Port()
	if id.stopResolve != nil {
		id.stopResolve()
	}
	if id.rem != nil {
		id.mu.Unlock()
		id.s.mu.Lock()
		delete(id.s.ids, id)
		id.s.mu.Unlock()
		return id.remoteDestroy()
	}
	id.answeredLocked()
	ch := id.ch
	id.mu.Unlock()
	if l != nil {
		l.Close()
		// The requests the owner never fetched die with the listener: each
		// ID is destroyed and its peer gets a REJ (consumer defined), as
		// ucma destroys the connection IDs of events it never reported.
		for _, e := range ch.takeRequestsFor(id) {
			e.ID.Destroy()
		}
	}
	if c != nil {
		c.Destroy()
	}
	if bound {
		id.s.unbind(id, port)
	}
	id.s.mu.Lock()
	delete(id.s.ids, id)
	id.s.mu.Unlock()
	id.s.gsi.wake()
	return nil
}
