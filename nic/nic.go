// Package nic opens xdproce's data path on one network interface: it attaches
// the XDP steering program, reserves UDP port 4791 in the kernel, opens one
// AF_XDP socket per RX queue and registers each in the program's XSKMAP.
//
// A Port is what a device's engines run on: each engine owns one queue's
// Socket. Open acts in the network namespace of the calling OS thread (see
// package loader); everything it creates keeps that namespace.
package nic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/ring"
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
	// Open when the link MTU needs frames longer than one UMEM chunk.
	Ring ring.Config
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
	gids    []loader.GID
	xdp     *loader.XDP
	guard   io.Closer
	sockets []*ring.Socket
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
	if p.gids, err = loader.GIDTable(cfg.Ifname); err != nil {
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
		if p.guard, err = loader.BindGuard(); err != nil {
			return nil, fmt.Errorf("nic: reserving UDP %d: %w", loader.RoCEv2Port, err)
		}
	}
	if p.xdp, err = loader.Attach(cfg.Ifname, loader.Options{Mode: cfg.XDPMode, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("nic: %w", err)
	}
	rc := cfg.Ring
	if rc.Logger == nil {
		rc.Logger = cfg.Logger
	}
	chunk := rc.ChunkSize
	if chunk == 0 {
		chunk = ring.MaxChunkSize
	}
	if p.link.MTU+ethOverhead > chunk-ring.KernelHeadroom-rc.Headroom {
		rc.MultiBuffer = true
		if need := p.link.MTU + ethOverhead; rc.TXFrameSize < need {
			rc.TXFrameSize = need
		}
	}
	ids := make([]int, queues)
	for i := range ids {
		ids[i] = i
	}
	if p.sockets, err = ring.OpenQueues(ctx, p.link.Index, ids, rc); err != nil {
		return nil, fmt.Errorf("nic: %s: %w", cfg.Ifname, err)
	}
	for _, s := range p.sockets {
		if err = p.xdp.RegisterSocket(s.Queue(), s.FD()); err != nil {
			return nil, fmt.Errorf("nic: %s queue %d: %w", cfg.Ifname, s.Queue(), err)
		}
	}
	return p, nil
}

// Link describes the interface as it was when the port was opened.
func (p *Port) Link() loader.Link { return p.link }

// GIDs is the port's RoCEv2 GID table, as rxe would build it.
func (p *Port) GIDs() []loader.GID { return p.gids }

// ActiveMTU is the IB MTU the port supports on this link (rxe's rule).
func (p *Port) ActiveMTU() int { return loader.ActiveMTU(p.link.MTU) }

// Sockets are the AF_XDP sockets, one per queue, in queue order. Each belongs
// to one goroutine at a time (see ring.Socket); Close closes them.
func (p *Port) Sockets() []*ring.Socket { return p.sockets }

// XDPMode is the mode the steering program was attached in.
func (p *Port) XDPMode() loader.Mode { return p.xdp.Mode() }

// Counters are the steering program's counters.
func (p *Port) Counters() (loader.Counters, error) { return p.xdp.Counters() }

// Close detaches the program and closes the sockets and guard. It must not run
// while an engine still uses a socket. It is idempotent.
func (p *Port) Close() error {
	var errs []error
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
