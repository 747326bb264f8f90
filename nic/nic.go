// Package nic is the RoCE port on one network interface. Open attaches the
// XDP steering program, reserves UDP port 4791 in the kernel (BindGuard),
// opens one AF_XDP socket per RX queue and registers each in the program's
// XSKMAP, with the best features the kernel offers; FrameLink moves frames
// over those sockets. The port's facts are rxe's: the GID table, the
// active MTU, routes and neighbour (ARP/ND) resolution.
//
// Open, Route and ResolveNeighbor act in the network namespace of the
// calling OS thread; everything Open creates keeps that namespace.
package nic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/ring"
	"github.com/xdproce/xdproce/wire"
)

// Config says which interface to open and how.
type Config struct {
	// Ifname is the network interface (required).
	Ifname string
	// XDPMode forces native or generic XDP; the default tries native first.
	XDPMode loader.Mode
	// Queues limits the RX queues opened to the first Queues; 0 opens all.
	Queues int
	// Ring sizes each queue's socket and UMEM. MultiBuffer is turned on by
	// Open when the link MTU needs frames longer than one UMEM chunk and
	// the kernel has it (see Features).
	Ring ring.Config
	// OneChunk keeps every frame in one UMEM chunk even where multi-buffer
	// would work: the active MTU is capped as on a kernel without it.
	OneChunk bool
	// BusyPoll asks the kernel to busy-poll each queue in its socket's
	// kicks and waits (ring.Socket.SetBusyPoll), for an engine that spins
	// on a NIC with interrupts to avoid. veth has no interrupts to avoid,
	// and there it lengthened round trips
	// (docs/results/2026-11-24-code-comment-figures.md), so verbs.Open
	// leaves it off and only probes it.
	BusyPoll bool
	// NoGuard skips binding the kernel UDP 4791 guard sockets (for hosts
	// where another program, such as rdma_rxe, already holds the port).
	NoGuard bool
	// Logger receives the XDP mode line and ring notes. Default slog.Default().
	Logger *slog.Logger
}

// Port is an interface opened for RoCEv2: XDP program, guard sockets and one
// AF_XDP socket per queue.
type Port struct {
	link    loader.Link
	gids    []GID
	xdp     *loader.XDP
	guard   io.Closer
	sockets []*ring.Socket
	feat    Features

	// groups are the multicast groups the port joined, each with the
	// socket holding its membership (mcast.go).
	groupsMu sync.Mutex
	groups   map[netip.Addr]int
}

// ethOverhead is the Ethernet header plus one VLAN tag a frame may carry on top of the MTU.
const ethOverhead = 14 + 4

// Open prepares the interface cfg.Ifname. On error nothing is left attached or open.
func Open(ctx context.Context, cfg Config) (_ *Port, err error) {
	if cfg.Ifname == "" {
		return nil, errors.New("nic: no interface name")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Port{}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	if p.link, err = loader.LinkInfo(cfg.Ifname); err != nil {
		return nil, fmt.Errorf("nic: %w", err)
	}
	if p.gids, err = GIDTable(p.link); err != nil {
		return nil, fmt.Errorf("nic: %w", err)
	}
	queues := p.link.NumRXQueues
	if queues < 1 {
		queues = 1
	}
	if cfg.Queues > 0 && cfg.Queues < queues {
		queues = cfg.Queues
	}
	if !cfg.NoGuard {
		if p.guard, err = BindGuard(); err != nil {
			return nil, fmt.Errorf("nic: reserving UDP %d: %w", wire.UDPPort, err)
		}
	}
	if p.xdp, err = loader.Attach(cfg.Ifname, loader.Options{Mode: cfg.XDPMode, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("nic: %w", err)
	}
	p.feat.XDPMode = p.xdp.Mode()
	if err := p.xdp.NativeError(); err != nil {
		p.feat.NativeXDP = err.Error()
	}
	if err = p.openSockets(ctx, cfg, queues); err != nil {
		return nil, fmt.Errorf("nic: %s: %w", cfg.Ifname, err)
	}
	for _, s := range p.sockets {
		if err = p.xdp.RegisterSocket(s.Queue(), s.FD()); err != nil {
			return nil, fmt.Errorf("nic: %s queue %d: %w", cfg.Ifname, s.Queue(), err)
		}
	}
	cfg.Logger.Info("nic: port ready", "link", cfg.Ifname, "features", p.feat.String())
	return p, nil
}

// openSockets opens one AF_XDP socket per queue, multi-buffer when the link
// MTU needs it and the kernel has it; without it, frames stay in one chunk
// and the active MTU shrinks to fit.
func (p *Port) openSockets(ctx context.Context, cfg Config, queues int) (err error) {
	rc := cfg.Ring
	if rc.Logger == nil {
		rc.Logger = cfg.Logger
	}
	ids := make([]int, queues)
	for i := range ids {
		ids[i] = i
	}
	room, need := frameRoom(rc), p.link.MTU+ethOverhead
	p.feat.MaxFrame = room
	if need > room {
		if cfg.OneChunk {
			p.feat.NoMultiBuffer = "not asked for (one chunk per frame)"
		} else {
			sg := rc
			sg.MultiBuffer, sg.TXFrameSize = true, max(rc.TXFrameSize, need)
			p.sockets, err = ring.OpenQueues(ctx, p.link.Index, ids, sg)
			switch {
			case err == nil:
				p.feat.MaxFrame = need
			case sgUnsupported(err):
				p.feat.NoMultiBuffer = "the kernel lacks AF_XDP XDP_USE_SG (Linux 6.6): " + err.Error()
			default:
				return err
			}
		}
	}
	if p.sockets == nil {
		if p.sockets, err = ring.OpenQueues(ctx, p.link.Index, ids, rc); err != nil {
			return err
		}
	}
	s := p.sockets[0]
	p.feat.MultiBuffer = s.MultiBuffer()
	p.feat.ZeroCopy = s.Mode() == ring.ModeZeroCopy
	if !p.feat.ZeroCopy {
		p.feat.NoZeroCopy = "not asked for"
		if zerr := s.ZeroCopyFallback(); zerr != nil {
			p.feat.NoZeroCopy = zerr.Error()
		}
	}
	p.feat.TXBudget = s.TXBudget()
	p.feat.SendBuffer = s.SendBuffer()
	p.busyPoll(cfg.BusyPoll)
	p.feat.Queues = len(p.sockets)
	p.feat.ActiveMTU = cappedMTU(p.link.MTU, p.feat.MaxFrame)
	return nil
}

// Socket busy-poll settings: how long a kick or wait polls the queue, and
// how many packets one poll takes (a batch of the engine's).
const (
	busyPollUsecs  = 20
	busyPollBudget = 64
)

// busyPoll turns socket busy-polling on where asked, or probes whether the
// kernel has it; either way the outcome is in Features. A failure costs
// latency, never the port.
func (p *Port) busyPoll(asked bool) {
	if !asked {
		p.feat.NoBusyPoll = "not asked for"
		if err := p.sockets[0].BusyPollAvailable(); err != nil {
			p.feat.NoBusyPoll = err.Error()
		}
		return
	}
	for _, s := range p.sockets {
		if err := s.SetBusyPoll(busyPollUsecs, busyPollBudget); err != nil {
			p.feat.NoBusyPoll = err.Error()
			return
		}
	}
	p.feat.BusyPoll = true
}

// Link describes the interface as it was when the port was opened.
func (p *Port) Link() loader.Link { return p.link }

// GIDs is the port's RoCEv2 GID table, as rxe would build it.
func (p *Port) GIDs() []GID { return p.gids }

// ActiveMTU is the IB MTU the port supports on this link: rxe's rule on the
// netdev MTU, capped by the longest frame the sockets receive whole.
func (p *Port) ActiveMTU() int { return p.feat.ActiveMTU }

// Features is what the port runs with and why (see Features).
func (p *Port) Features() Features { return p.feat }

// Sockets are the AF_XDP sockets, one per queue, in queue order. Each belongs
// to one goroutine at a time (see ring.Socket); Close closes them.
func (p *Port) Sockets() []*ring.Socket { return p.sockets }

// XDPMode is the mode the steering program was attached in.
func (p *Port) XDPMode() loader.Mode { return p.xdp.Mode() }

// Counters are the steering program's counters.
func (p *Port) Counters() (loader.Counters, error) { return p.xdp.Counters() }

// FastPath is the XDP program's responder fast path (docs/fastpath.md).
func (p *Port) FastPath() (*loader.FastPath, error) { return p.xdp.FastPath() }

// Close detaches the program and closes the sockets and guard. It must not run
// while an engine still uses a socket. It is idempotent.
func (p *Port) Close() error {
	errs := []error{p.leaveAll()}
	p.groupsMu.Lock() // JoinGroup sees the program gone
	defer p.groupsMu.Unlock()
	if p.xdp != nil {
		for _, s := range p.sockets {
			if err := p.xdp.UnregisterSocket(s.Queue()); err != nil && !errors.Is(err, loader.ErrClosed) {
				errs = append(errs, err)
			}
		}
		errs = append(errs, p.xdp.Close())
		p.xdp = nil
	}
	for _, s := range p.sockets {
		errs = append(errs, s.Close())
	}
	p.sockets = nil
	if p.guard != nil {
		errs = append(errs, p.guard.Close())
		p.guard = nil
	}
	return errors.Join(errs...)
}

// DeviceName is the name applications know the device on ifname by
// (ibv_devinfo's hca_id, ibv_get_device_list's), as rxe's rxe0.
func DeviceName(ifname string) string { return "xdp_" + ifname }
