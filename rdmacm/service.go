// Package rdmacm is rdma_cm for an xdproce device: communication IDs that
// bind to IP addresses and ports, resolve addresses and routes, listen,
// connect, accept, reject and disconnect, with events on channels — the
// model of Linux's rdma_cm and librdmacm, over the device's QP1 and the
// Communication Manager of package cmagent. On top of it, Dial and
// Listen/Accept give Go programs connected QPs in one call.
//
// A Service runs where the device's QP1 is: in the process that opened the
// device in-process, or in the daemon, which offers the same operations to
// its clients (librdmacm.so.1).
package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cmagent"
	"github.com/xdproce/xdproce/verbs"
)

// PortSpace is an rdma_cm port space (RDMA_PS_*).
type PortSpace uint16

// The port spaces: TCP and IB carry RC connections, UDP datagrams (SIDR).
const (
	PortSpaceTCP PortSpace = cm.PortSpaceTCP
	PortSpaceUDP PortSpace = cm.PortSpaceUDP
	PortSpaceIB  PortSpace = cm.PortSpaceIB
)

// UDPQKey is the Q_Key of rdma_cm's UD QPs (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// Errors are the errno values rdma_cm returns, for errors.Is.
var (
	ErrInvalid      = syscall.EINVAL
	ErrAddrInUse    = syscall.EADDRINUSE
	ErrAddrNotAvail = syscall.EADDRNOTAVAIL
	ErrTimedOut     = syscall.ETIMEDOUT
	ErrConnRefused  = syscall.ECONNREFUSED
	ErrConnReset    = syscall.ECONNRESET
	ErrNotSup       = syscall.EOPNOTSUPP
)

// Options tune a Service.
type Options struct {
	// Now is the clock of the CM's timers; time.Now if nil.
	Now func() time.Time
	// Route chooses the source address for a destination (the kernel's
	// route lookup for a real device); nil takes the device's first GID of
	// the destination's family.
	Route func(dst netip.Addr) (netip.Addr, error)
	// Seed seeds communication IDs, ports and PSNs; 0 picks one.
	Seed uint64
	// PacketLifetime and ResponseTimeout are the CM's timing exponents
	// (4.096 µs × 2^n): they set how soon MADs are sent again. Zero means
	// rdma_cm's (18 and 20: REQs every 6 s); tests shorten them.
	PacketLifetime, ResponseTimeout uint8
}

// Service is the connection manager of one device.
type Service struct {
	dev   *verbs.Device
	opts  Options
	agent *cmagent.Agent
	gsi   *gsi
	rem   *remote // a device attached to the daemon: the daemon's CM
	gids  []netip.Addr
	mtu   verbs.MTU
	attr  verbs.DeviceAttr

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	rng   *rand.Rand
	ports map[portKey]*ID // bound ports
	ids   map[*ID]struct{}
}

type portKey struct {
	ps   PortSpace
	port uint16
}

// Start runs a connection manager on dev: for an in-process device its QP1
// and CM; for one attached to the daemon (verbs.Dial), the daemon's,
// reached through the device's session (opts are then the daemon's).
// Close stops it.
func Start(dev *verbs.Device, opts Options) (*Service, error) {
	if dev.Attached() {
		return startRemote(dev), nil
	}
	s := &Service{dev: dev, opts: opts, ports: map[portKey]*ID{}, ids: map[*ID]struct{}{}}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	if s.opts.PacketLifetime == 0 {
		s.opts.PacketLifetime = cmagent.DefaultPacketLifetime
	}
	if s.opts.ResponseTimeout == 0 {
		s.opts.ResponseTimeout = cmagent.DefaultResponseTimeout
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s.rng = rand.New(rand.NewPCG(seed, 0x636d))
	s.attr = dev.QueryDevice()
	port := dev.QueryPort()
	s.mtu = port.ActiveMTU
	for i := range port.GIDTblLen {
		g, err := dev.QueryGID(i)
		if err != nil {
			return nil, err
		}
		s.gids = append(s.gids, g)
	}
	g, err := newGSI(dev, s.gidFor)
	if err != nil {
		return nil, err
	}
	s.gsi = g
	s.agent = cmagent.New(cmagent.Config{Send: g, GUID: s.attr.NodeGUID, Deliver: s.deliver, Now: s.opts.Now, Seed: seed,
		PacketLifetime: s.opts.PacketLifetime, ResponseTimeout: s.opts.ResponseTimeout})
	g.agent = s.agent
	ctx, cancel := context.WithCancel(context.Background())
	s.ctx, s.cancel = ctx, cancel
	s.wg.Add(2)
	go func() { defer s.wg.Done(); g.receive(ctx) }()
	go func() { defer s.wg.Done(); g.send(ctx) }()
	return s, nil
}

// Close stops the service: QP1 goes, IDs get no more events.
func (s *Service) Close() error {
	if s.rem != nil {
		s.rem.close()
		return nil
	}
	// What the CM queued last (a DREQ or DREP of an ID destroyed just
	// before) still goes out.
	s.gsi.drain(100 * time.Millisecond)
	s.cancel()
	s.wg.Wait()
	s.gsi.close()
	return nil
}

// Counters are the CM's counters (the daemon's are its own: zero here).
func (s *Service) Counters() cmagent.Counters {
	if s.rem != nil {
		return cmagent.Counters{}
	}
	return s.agent.Counters()
}

// Connections is how many connections the CM holds (timewait included;
// -1 when the daemon's CM serves the device).
func (s *Service) Connections() int {
	if s.rem != nil {
		return -1
	}
	return s.agent.Conns()
}

// CachedAddressHandles is how many peers' address handles QP1 keeps (at
// most gsiCachedAHs): device-wide, no client's.
func (s *Service) CachedAddressHandles() int {
	if s.rem != nil {
		return 0
	}
	return int(s.gsi.cached.Load())
}

// IDs is how many communication IDs exist.
func (s *Service) IDs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// gidFor is the index of the GID a node at peer is reached from: the
// routed source address if it is one of ours, else the first GID of the
// peer's family that is not link-local.
func (s *Service) gidFor(peer netip.Addr) (int, bool) {
	if s.opts.Route != nil {
		if src, err := s.opts.Route(peer); err == nil {
			if i := s.gidIndex(src); i >= 0 {
				return i, true
			}
		}
	}
	peer = peer.Unmap()
	for i, g := range s.gids {
		g = g.Unmap()
		if g.Is4() == peer.Is4() && !g.IsLinkLocalUnicast() && g.IsValid() && !g.IsUnspecified() {
			return i, true
		}
	}
	return 0, false
}

// gidIndex is the index of the GID of address a, or -1.
func (s *Service) gidIndex(a netip.Addr) int {
	a = a.Unmap()
	for i, g := range s.gids {
		if g.Unmap() == a {
			return i
		}
	}
	return -1
}

// deliver takes the agent's events to the IDs they concern.
func (s *Service) deliver(e cmagent.Event) {
	defer s.gsi.wake()
	if e.Type == cmagent.EventConnectRequest {
		l, _ := e.Listener.Context().(*ID)
		if l == nil {
			e.Conn.Destroy()
			return
		}
		l.request(e)
		return
	}
	id, _ := e.Conn.Context().(*ID)
	if id == nil {
		return
	}
	id.cmEvent(e)
}

// bind files id under (ps, port), port 0 picking a free ephemeral one as
// the kernel does (32768..60999).
func (s *Service) bind(id *ID, port uint16) (uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if port != 0 {
		if _, used := s.ports[portKey{id.ps, port}]; used {
			return 0, fmt.Errorf("rdmacm: port %d: %w", port, ErrAddrInUse)
		}
		s.ports[portKey{id.ps, port}] = id
		return port, nil
	}
	const lo, hi = 32768, 61000
	start := lo + s.rng.IntN(hi-lo)
	for i := range hi - lo {
		p := uint16(lo + (start-lo+i)%(hi-lo))
		if _, used := s.ports[portKey{id.ps, p}]; !used {
			s.ports[portKey{id.ps, p}] = id
			return p, nil
		}
	}
	return 0, fmt.Errorf("rdmacm: no free port: %w", ErrAddrInUse)
}

func (s *Service) unbind(id *ID, port uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports[portKey{id.ps, port}] == id {
		delete(s.ports, portKey{id.ps, port})
	}
}

// psn is a random starting PSN (24 bits).
func (s *Service) psn() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Uint32() & 0xffffff
}

// status is an rdma_cm event's status for err: the negative errno.
func status(err error) int {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return -int(errno)
	}
	return -int(syscall.EINVAL)
}

// errnoOf turns an event's negative errno status back into an error.
func errnoOf(status int) error {
	if status < 0 {
		return syscall.Errno(-status)
	}
	return ErrInvalid
}
