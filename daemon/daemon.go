// Package daemon serves one xdproce device to many processes, as the
// kernel's uverbs serves an RNIC: applications attach over a unix socket
// (package ipc), create objects with control requests (package uverbs),
// and post and poll through rings in shared memory that the device's
// engines read and write themselves. Objects belong to the connection that
// created them; when it closes, for whatever reason, they are destroyed.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"github.com/cilium/ebpf"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/cmagent"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// Config sets up a Server.
type Config struct {
	// Ifname names the interface: clients find the server by it.
	Ifname string
	// Device is the RNIC served; the server does not close it.
	Device *verbs.Device
	// Group, if not negative, lets members of that group attach besides
	// root and the daemon's own user.
	Group int
	// Logger receives the server's notes. Default slog.Default().
	Logger *slog.Logger
	// CM tunes the device's connection manager (QP1, rdma_cm), which the
	// server runs; Route defaults to the kernel's route lookup.
	CM rdmacm.Options
	// Limits caps what one client may hold; zero fields take defaults.
	Limits Limits
}

// Server is a running daemon's control socket and clients.
type Server struct {
	cfg  Config
	log  *slog.Logger
	ln   *net.UnixListener
	page *ipc.Mapping // the doorbell page, which clients may only read
	cm   *rdmacm.Service
	// privPorts: CM ports below it need CAP_NET_BIND_SERVICE.
	privPorts uint16

	mu       sync.Mutex
	sessions map[*session]struct{}
	owners   map[any]owner        // QPs, CQs and SRQs by the session that made them
	accounts map[acctKey]*account // clients' limits and usage, by process and user
	wg       sync.WaitGroup
	stop     chan struct{} // closed by a SHUTDOWN request
	stopOnce sync.Once

	// dmFreed is freed device memory still charged, by pool (dm.go); its
	// own lock, since pruning it costs a system call per block.
	dmMu    sync.Mutex
	dmFreed map[acctKey][]freedDM
	// mapGone asks whether a block's map is gone (dmMapGone; a test
	// stands in a daemon without CAP_SYS_ADMIN).
	mapGone func(id ebpf.MapID) (gone, known bool)
	// The watchers of users' charges that wait for their processes to
	// end (dmuser.go), under dmMu; dmQuit stops them as Run returns.
	dmWatched map[acctKey]bool
	dmOrphans uint64 // the last freedDM.orphan
	dmStopped bool
	dmQuit    chan struct{}
	dmWG      sync.WaitGroup
}

// New opens the control socket for cfg.Ifname in the calling thread's
// network namespace. Run serves it.
func New(cfg Config) (*Server, error) {
	if cfg.Device == nil || cfg.Ifname == "" {
		return nil, fmt.Errorf("daemon: a device and an interface name are needed")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	nofile, maps, err := systemLimits()
	if err != nil {
		return nil, err
	}
	cfg.Limits = cfg.Limits.withDefaults(nofile, maps)
	page, err := ipc.NewReadOnlyMapping("doorbell", uverbs.DoorbellPageSize)
	if err != nil {
		return nil, err
	}
	if cfg.CM.Route == nil {
		cfg.CM.Route = func(dst netip.Addr) (netip.Addr, error) {
			p, err := nic.Route(dst)
			return p.Src, err
		}
	}
	cm, err := rdmacm.Start(cfg.Device, cfg.CM)
	if err != nil {
		return nil, errors.Join(err, page.Unmap())
	}
	ln, err := ipc.Listen(cfg.Ifname)
	if err != nil {
		return nil, errors.Join(err, cm.Close(), page.Unmap())
	}
	s := &Server{cfg: cfg, log: cfg.Logger, ln: ln, page: page, cm: cm, privPorts: unprivilegedPortStart(),
		sessions: map[*session]struct{}{}, owners: map[any]owner{}, stop: make(chan struct{}),
		mapGone: dmMapGone, dmQuit: make(chan struct{})}
	cfg.Device.SetDoorbellPage(page.Mem)
	return s, nil
}

// Run serves clients until ctx ends or a client asks the daemon to stop;
// then it disconnects every client, destroying what they created.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.stop:
			cancel()
		}
		s.ln.Close()
	}()
	s.wg.Add(1)
	go s.routeEvents(ctx)
	err := s.accept(ctx)
	cancel()
	s.mu.Lock()
	for ss := range s.sessions {
		ss.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.stopUserDM()
	s.cm.Close()
	// The doorbell page stays mapped: the device's engines, which outlive
	// the server, still write it.
	return err
}

// accept admits clients until the listener closes. Running out of fds or
// buffers, or a client that hung up before it was accepted, does not stop
// the daemon: it waits a little, as net/http's Serve, and goes on (the
// clients that hold the fds may leave).
func (s *Server) accept(ctx context.Context) error {
	var delay time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err == nil {
			delay = 0
			s.admit(ctx, c)
			continue
		}
		if ctx.Err() != nil {
			return nil // the listener was closed to stop
		}
		if !transientAcceptError(err) {
			return err
		}
		delay = min(max(2*delay, 5*time.Millisecond), time.Second)
		s.log.Warn("daemon: accepting a client; retrying", "err", err, "in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// transientAcceptError: what accept(2) fails with while the daemon or the
// host is short of fds or memory, or a client went away.
func transientAcceptError(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// admit checks a new connection's credentials and serves it. Its process
// is bound first (identify): the group check and the own-memory handles
// are that process's, not whoever has its pid by then.
func (s *Server) admit(ctx context.Context, c *net.UnixConn) {
	peer, err := ipc.PeerOf(c)
	var cl *client
	if err == nil {
		cl, err = identify(c, peer)
	}
	if err == nil && !s.allowed(peer, cl) {
		cl.close(true)
		err = fmt.Errorf("uid %d gid %d may not use the device", peer.UID, peer.GID)
	}
	if err != nil {
		s.log.Warn("daemon: client refused", "err", err)
		c.Close()
		return
	}
	conn := ipc.NewConn(c)
	if err := conn.PassCred(); err != nil {
		s.log.Warn("daemon: client refused", "err", err)
		cl.close(true)
		c.Close()
		return
	}
	cl.openMem()
	ss := newSession(s, conn, peer)
	ss.proc, ss.comm = cl, cl.comm()
	if err := ss.room(objSession); err != nil {
		s.log.Warn("daemon: client refused: it holds its share of the daemon's fds", "pid", peer.PID, "uid", peer.UID)
		ss.release()
		cl.close(true)
		c.Close()
		return
	}
	s.mu.Lock()
	s.sessions[ss] = struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ss.serve(ctx)
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
}

// allowed: root, the daemon's user, and members of the configured group.
func (s *Server) allowed(p ipc.Peer, cl *client) bool {
	if p.UID == 0 || int(p.UID) == os.Getuid() {
		return true
	}
	if s.cfg.Group < 0 {
		return false
	}
	if int(p.GID) == s.cfg.Group {
		return true
	}
	return cl.inGroup(s.cfg.Group)
}

// Clients is the number of attached clients.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// counters reads the transport's counters (rxe's names) and the port's.
func (s *Server) counters() (transport, port []uverbs.Counter, err error) {
	c, err := s.cfg.Device.Counters()
	if err != nil {
		return nil, nil, err
	}
	for _, n := range c.Named() {
		transport = append(transport, uverbs.Counter(n))
	}
	// The connection manager's MADs on QP1 count with the transport.
	for i, v := range s.cm.Counters().Values() {
		transport = append(transport, uverbs.Counter{Name: cmagent.CounterNames[i], Value: v})
	}
	named, err := s.cfg.Device.PortCounters()
	for _, n := range named {
		port = append(port, uverbs.Counter(n))
	}
	return transport, port, err
}

// snapshot lists the sessions.
func (s *Server) snapshot() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		out = append(out, ss)
	}
	return out
}

func (s *Server) shutdown() { s.stopOnce.Do(func() { close(s.stop) }) }
