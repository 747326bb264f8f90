package verbs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/xdproce/xdproce/internal/nsenter"
	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/nic"
)

// Options tune Open.
type Options struct {
	// XDPMode forces native or generic XDP; the default tries native first.
	XDPMode loader.Mode
	// Queues limits the RX queues served; 0 serves all of the link's.
	Queues int
	// OneChunk keeps each frame in one UMEM chunk, as on a kernel without
	// AF_XDP multi-buffer: the active MTU is capped to 2048 (nic.Config).
	OneChunk bool
	// BusyPoll keeps the engine spinning on the rings instead of sleeping;
	// see DeviceConfig.BusyPoll.
	BusyPoll bool
	// AckHold: see DeviceConfig.AckHold.
	AckHold time.Duration
	// SpinMax: see DeviceConfig.SpinMax.
	SpinMax time.Duration
	// RxCoalesce is the longest a sleeping engine lets a stream of
	// received frames gather before it wakes for them
	// (nic.FrameLink.SetRxCoalesce). Zero means DefaultRxCoalesce on one
	// CPU, where engines sleep rather than spin and each wakeup takes the
	// processor from the kernel moving the frames, and off elsewhere;
	// negative, off. A busy-polling device never coalesces: its engines
	// never sleep.
	RxCoalesce time.Duration
	// ThreadWait has a sleeping engine block its own thread in its wait
	// set rather than park in Go's network poller
	// (nic.FrameLink.SetThreadWait): a wakeup then readies one thread, not
	// the poller's and, through it, the engine's and the runtime's
	// monitor. For a process whose only data path is its engines (the
	// daemon: xdproce up sets it); an application sharing the processors
	// with them would wait for the processor a blocked thread holds. Only
	// where Go has more processors (GOMAXPROCS) than the device engines.
	ThreadWait bool
	// Logger receives setup notes. Default slog.Default().
	Logger *slog.Logger
	// Embedded runs the device in this process even when a daemon serves
	// the interface (the daemon itself opens its device so).
	Embedded bool
	// FastPath lets the XDP program execute and acknowledge small
	// in-order RDMA WRITEs into device memory itself (docs/fastpath.md).
	// Off by default; where the kernel cannot share the state it needs,
	// the device opens without it and says so in a log line.
	FastPath bool
}

// Open starts a device on the network interface ifname of the calling OS
// thread's network namespace: it attaches the XDP steering program, opens
// one AF_XDP socket per RX queue, and runs the transport on them. Close
// undoes all of it.
//
// When an xdproce daemon serves ifname (xdproce up), Open attaches to it
// instead (Dial) and the options but Embedded are the daemon's business.
func Open(ctx context.Context, ifname string, opts Options) (*Device, error) {
	if !opts.Embedded {
		d, err := Dial(ctx, ifname)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return d, err
		}
	}
	port, err := nic.Open(ctx, nic.Config{Ifname: ifname, XDPMode: opts.XDPMode, Queues: opts.Queues, OneChunk: opts.OneChunk, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("verbs: current network namespace: %w", err), port.Close())
	}
	gids := make([]netip.Addr, len(port.GIDs()))
	for i, g := range port.GIDs() {
		gids[i] = netip.AddrFrom16(g)
	}
	// One link and engine per queue: each queue's frames are handled on
	// their own goroutine, so QPs on different queues use different cores.
	queues, err := nic.NewQueueLinks(port)
	if err != nil {
		return nil, errors.Join(err, port.Close(), ns.Close())
	}
	links := make([]Link, len(queues))
	for i, q := range queues {
		links[i] = q
	}
	closeLinks := func() error {
		var errs []error
		for _, q := range queues {
			errs = append(errs, q.Close())
		}
		return errors.Join(errs...)
	}
	dataPath := port.Features().String()
	// A blocked engine keeps its processor (P) until the runtime's monitor
	// takes it back, up to 10 ms later: with no P left over, the rest of
	// the process (a daemon's sessions) would wait that long.
	if opts.ThreadWait && !opts.BusyPoll && runtime.GOMAXPROCS(0) > len(queues) {
		for _, q := range queues {
			q.SetThreadWait(true)
		}
	}
	if co := RxCoalesceFor(opts.RxCoalesce); co > 0 && !opts.BusyPoll {
		for _, q := range queues {
			if err := q.SetRxCoalesce(co); err != nil {
				return nil, errors.Join(err, closeLinks(), port.Close(), ns.Close())
			}
		}
		dataPath += DescribeRxCoalesce(co)
	}
	var fast *loader.FastPath
	if opts.FastPath {
		if fast, err = port.FastPath(); err != nil {
			logger := opts.Logger
			if logger == nil {
				logger = slog.Default()
			}
			logger.Warn("verbs: XDP fast path off", "link", ifname, "err", err)
		} else {
			dataPath += ", XDP fast path for small WRITEs to device memory"
		}
	}
	cfg := DeviceConfig{
		fast: fast,
		MAC:  port.Link().MAC, GIDs: gids, ActiveMTU: port.ActiveMTU(), DataPath: dataPath,
		BusyPoll: opts.BusyPoll, AckHold: opts.AckHold, SpinMax: opts.SpinMax,
		PortCounters: func() ([]NamedCounter, error) {
			c, err := port.Counters()
			var out []NamedCounter
			for _, n := range c.Named() {
				out = append(out, NamedCounter(n))
			}
			return out, err
		},
		// The memberships are the namespace's: the sockets holding them
		// are made there.
		Groups: func(addr netip.Addr, join bool) error {
			if !join {
				return port.LeaveGroup(addr)
			}
			return nsenter.Do(ns, func() error { return port.JoinGroup(addr) })
		},
		Resolve: func(ctx context.Context, ip netip.Addr) (mac net.HardwareAddr, err error) {
			err = nsenter.Do(ns, func() error {
				mac, err = nic.ResolveNeighbor(ctx, ifname, ip)
				return err
			})
			return mac, err
		},
	}
	d, err := NewMultiQueueDevice(links, cfg)
	if err != nil {
		return nil, errors.Join(err, closeLinks(), port.Close(), ns.Close())
	}
	d.onClose = func() error { return errors.Join(closeLinks(), port.Close(), ns.Close()) } // the links check their frames before the sockets go
	return d, nil
}

// DefaultRxCoalesce is the RxCoalesce of a device on one CPU that does not
// set one. There the engine, the kernel moving the frames and the
// application share the one CPU, and waking for every few frames costs
// more than the frames (docs/performance.md; the measurements in
// docs/results/2026-11-25-small-guest.md). The sleeps are sized to the
// arrival rate (about 48 frames each), so a fast link gets short ones.
const DefaultRxCoalesce = 2 * time.Millisecond

// RxCoalesceFor is the receive coalescing a device opened on this machine
// with Options.RxCoalesce o gets, 0 for none.
func RxCoalesceFor(o time.Duration) time.Duration {
	switch {
	case o < 0:
		return 0
	case o == 0 && runtime.GOMAXPROCS(0) == 1:
		return DefaultRxCoalesce
	}
	return o
}

// DescribeRxCoalesce is what a port's data path description adds for
// receive coalescing of up to co.
func DescribeRxCoalesce(co time.Duration) string {
	if co <= 0 {
		return ""
	}
	return fmt.Sprintf(", receive wakeups coalesced up to %v", co)
}
