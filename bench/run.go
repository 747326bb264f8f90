// Package bench measures xdproce against kernel TCP on the same link: RC
// WRITE/SEND/READ bandwidth, round-trip latency, message rate and CPU per
// byte, the figures of `xdproce bench`. It uses xdproce only through the
// public verbs API, as an application would.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/xdproce/xdproce/bench/report"
	"github.com/xdproce/xdproce/verbs"
)

// Config says what a run measures.
type Config struct {
	Sizes       []int         // bandwidth and CPU-per-GB message sizes
	LatSizes    []int         // round-trip message sizes
	QPs         []int         // message rate: QP (and TCP connection) counts
	MsgRateSize int           // message rate: message size
	Depth       int           // operations in flight per QP in bandwidth and message-rate runs
	Duration    time.Duration // measured time per point
	Warmup      time.Duration // unmeasured time before each point
	BusyPoll    BusyPoll      // where engines spin (verbs.Options.BusyPoll) and applications spin on their CQs
	MTU         int           // of the veth pair the run creates
	// Queues is the RX/TX queue count of the veth pair the run creates
	// (default 1); the devices serve every queue, QPs spread over them.
	Queues  int
	AckHold time.Duration // verbs.Options.AckHold of both devices (0: the default)
	SpinMax time.Duration // verbs.Options.SpinMax of both devices (0: the default, negative: never)
	// Ifaces, if set, are two existing interfaces ("NETNS/IFNAME") to measure
	// between instead of a veth pair in fresh namespaces.
	Ifaces []string
	// Progress receives one line per measured point; nil discards them.
	Progress io.Writer
	// Daemon adds the WRITE bandwidth at 64 KiB and the 8 B WRITE round
	// trip through each host's daemon (xdproce up), beside in-process.
	Daemon bool
	// Loopback adds the WRITE bandwidth at 64 KiB and the 8 B WRITE round
	// trip with both ends on one device (frames looped back inside it),
	// beside the same over the link.
	Loopback bool
	// DeviceMemory adds the 8 B WRITE round trip and the WRITE message
	// rate over one QP into device memory, with the XDP fast path and
	// without (dm.go), after the AF_XDP floor. Off by default: the four
	// points do not fit the default run's three minutes.
	DeviceMemory bool
	// Stock, if set, adds issue 15's comparison of stock perftest over
	// xdproce's libibverbs with xdproce perf (stock.go): ib_write_lat at
	// 8 B if LatSizes has 8, ib_write_bw at 64 KiB if Sizes has 64 KiB.
	Stock *Stock
}

// BusyPoll says which points run with busy-polling devices and applications.
type BusyPoll int

const (
	BusyPollRTT    BusyPoll = iota // round-trip points only (the default): latency is what spinning buys
	BusyPollNever                  // engines sleep between packets, applications wait on CQ events
	BusyPollAlways                 // every point
)

// ParseBusyPoll reads "rtt", "off" or "on" ("false" and "true" as the last two).
func ParseBusyPoll(s string) (BusyPoll, error) {
	switch s {
	case "rtt":
		return BusyPollRTT, nil
	case "off", "false", "never":
		return BusyPollNever, nil
	case "on", "true", "always":
		return BusyPollAlways, nil
	}
	return 0, fmt.Errorf("bench: busy-poll %q: want rtt, off or on", s)
}

func (b BusyPoll) String() string {
	switch b {
	case BusyPollRTT:
		return "rtt"
	case BusyPollNever:
		return "off"
	case BusyPollAlways:
		return "on"
	}
	return fmt.Sprintf("BusyPoll(%d)", int(b))
}

// busy reports whether a group of points (round trips or not) busy-polls.
func (b BusyPoll) busy(rtt bool) bool {
	return b == BusyPollAlways || b == BusyPollRTT && rtt
}

// DefaultDepth is the operations a stream keeps in flight per QP: perftest's
// ib_write_bw default (its tx_depth, DEF_TX_BW), so that a message rate is
// the one a stock tool would see. The AF_XDP floor keeps up to 2 048 frames
// in flight (floorStream).
const DefaultDepth = 128

// Default is `xdproce bench` without flags: every size from 64 B to 1 MiB,
// about two minutes on a 2-core machine.
func Default() Config {
	return Config{
		Sizes:       PowersOf4(64, 1<<20),
		LatSizes:    []int{8, 4096},
		QPs:         []int{1, 2, 4},
		MsgRateSize: 64,
		Depth:       DefaultDepth,
		Duration:    2 * time.Second,
		Warmup:      300 * time.Millisecond,
		MTU:         4200,
		Queues:      1,
		Daemon:      true,
		Loopback:    true,
	}
}

// Quick is Default with short points: under a minute.
func Quick() Config {
	c := Default()
	c.Duration, c.Warmup = 400*time.Millisecond, 100*time.Millisecond
	return c
}

func (c Config) validate() error {
	if len(c.Sizes) == 0 && len(c.LatSizes) == 0 && len(c.QPs) == 0 {
		return errors.New("bench: nothing to measure")
	}
	for _, s := range slices.Concat(c.Sizes, c.LatSizes, []int{c.MsgRateSize}) {
		if s <= 0 || s > 1<<30 {
			return fmt.Errorf("bench: message size %d out of range", s)
		}
	}
	for _, s := range c.LatSizes {
		if s < 4 {
			return fmt.Errorf("bench: round-trip size %d: at least 4 bytes (the last one carries the round's value)", s)
		}
	}
	if c.Depth < 1 || c.Depth > 4096 {
		return fmt.Errorf("bench: depth %d not in 1..4096", c.Depth)
	}
	if c.Duration <= 0 || c.Warmup < 0 {
		return errors.New("bench: duration must be positive and warm-up not negative")
	}
	if len(c.Ifaces) != 0 && len(c.Ifaces) != 2 {
		return fmt.Errorf("bench: --ifaces takes two interfaces, got %d", len(c.Ifaces))
	}
	return nil
}

// step is one measured point; attached steps run while both xdproce devices
// are open (XDP program attached), plain ones while they are closed.
type step struct {
	what string
	run  func(ctx context.Context, p *rnicPair) ([]report.Result, string, error)
}

// group is a set of points measured together: TCP without XDP on one side of
// the device's lifetime, xdproce and TCP with XDP during it.
type group struct {
	plain, attached []step
	rtt             bool // round-trip points
	daemon          bool // attached steps run through each host's daemon
	ownMemory       bool // daemon: regions of the application's own memory (process_vm_readv/writev)
	loopback        bool // attached steps run with both ends on one device (openLoopbackPair)
	dm, fast        bool // attached steps run on regions of device memory (openDMPair), with the XDP fast path
	// stock, if set, runs the plain steps as processes through real
	// daemons (xdproce up) it starts in the hosts' namespaces for the
	// group, and each figure of the group is the median of its rounds.
	stock *stockRunner
	// ownDaemons says the stock group's steps start and stop their own
	// daemons (issue 34's comparison of daemon modes).
	ownDaemons bool
	// est is how long each of the group's points takes, if not
	// Config.Warmup+Duration.
	est time.Duration
}

// Run measures everything cfg asks for and returns the figures in order.
func Run(ctx context.Context, cfg Config) ([]report.Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	var hosts [2]*Host
	var closeHosts func() error
	var err error
	if len(cfg.Ifaces) == 2 {
		hosts, closeHosts, err = existingHosts(cfg.Ifaces[0], cfg.Ifaces[1])
	} else {
		hosts, closeHosts, err = buildHosts(cfg.MTU, cfg.Queues)
	}
	if err != nil {
		return nil, err
	}
	defer closeHosts()
	fmt.Fprintf(progress, "bench: %s %s (%s) <-> %s %s (%s), MTU %d, %d queue(s), %v per point after %v warm-up, depth %d, busy-poll %v\n",
		hosts[0].Name, hosts[0].Link, hosts[0].Addr, hosts[1].Name, hosts[1].Link, hosts[1].Addr, hosts[0].MTU, max(cfg.Queues, 1),
		cfg.Duration, cfg.Warmup, cfg.Depth, cfg.BusyPoll)

	groups := plan(cfg, hosts)
	total := 0
	for _, g := range groups {
		total += len(g.plain) + len(g.attached)
	}
	maxSize := slices.Max(slices.Concat(cfg.Sizes, cfg.LatSizes, []int{cfg.MsgRateSize}))
	var results []report.Result
	done := 0
	runSteps := func(steps []step, p *rnicPair) error {
		for _, s := range steps {
			done++
			rs, summary, err := s.run(ctx, p)
			if err != nil {
				return fmt.Errorf("bench: %s: %w", s.what, err)
			}
			fmt.Fprintf(progress, "bench: [%d/%d] %s: %s\n", done, total, s.what, summary)
			results = append(results, rs...)
		}
		return nil
	}
	runAttached := func(g group, busy bool) error {
		steps := g.attached
		if len(steps) == 0 {
			return nil
		}
		open := openPair
		if g.loopback {
			open = openLoopbackPair
		}
		if g.daemon {
			open = func(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options) (*rnicPair, error) {
				return openDaemonPair(ctx, hosts, maxSize, opts, g.ownMemory)
			}
		}
		size := maxSize
		if g.dm {
			open, size = openDMPair, max(8, cfg.MsgRateSize) // device memory is small: the sizes its points use
		}
		p, err := open(ctx, hosts, size, verbs.Options{BusyPoll: busy, AckHold: cfg.AckHold, SpinMax: cfg.SpinMax, FastPath: g.fast})
		if err != nil {
			return err
		}
		return errors.Join(runSteps(steps, p), p.Close())
	}
	runStock := func(g group) error {
		if g.ownDaemons {
			n := len(results)
			err := runSteps(g.plain, nil)
			var trips []report.Result
			for _, r := range results[n:] {
				if r.Measure == report.RTT {
					trips = append(trips, r)
				}
			}
			for _, l := range roundsSummary(trips) {
				fmt.Fprintf(progress, "bench: %s\n", l)
			}
			results = append(results[:n], medianOfRounds(results[n:])...)
			return err
		}
		// The daemons busy-poll only if every point does (--busy-poll=on):
		// a spinning engine in each daemon beside a spinning program in
		// each host is four spinning processes on a 2-core machine, and a
		// round trip then waits for the kernel's time slices (ms).
		busy := cfg.BusyPoll == BusyPollAlways
		stop, err := g.stock.daemons(ctx, busy)
		if err != nil {
			return fmt.Errorf("bench: starting the daemons of the stock comparison: %w", err)
		}
		how := "sleeping when idle"
		if busy {
			how = "busy-polling"
		}
		fmt.Fprintf(progress, "bench: xdproce up on %s and %s (%s) for stock perftest and xdproce perf\n", hosts[0].Link, hosts[1].Link, how)
		n := len(results)
		err = runSteps(g.plain, nil)
		for _, l := range roundsSummary(results[n:]) {
			fmt.Fprintf(progress, "bench: %s\n", l)
		}
		results = append(results[:n], medianOfRounds(results[n:])...)
		if serr := stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("bench: stopping the daemons of the stock comparison: %w", serr))
		}
		return err
	}
	for i, g := range groups {
		if g.stock != nil {
			if err := runStock(g); err != nil {
				return results, err
			}
			continue
		}
		// Alternate which contender goes first so that drift hits both.
		first, second := func() error { return runSteps(g.plain, nil) }, func() error { return runAttached(g, cfg.BusyPoll.busy(g.rtt)) }
		if i%2 == 1 {
			first, second = second, first
		}
		if err := first(); err != nil {
			return results, err
		}
		if err := second(); err != nil {
			return results, err
		}
	}
	return results, nil
}

// plan lists the groups of a run: one per bandwidth size, one per round-trip
// size, one for message rate.
func plan(cfg Config, hosts [2]*Host) []group {
	var groups []group
	daemonBW, daemonRTT := daemonGroups(cfg)
	loopBW, loopRTT := loopbackGroups(cfg)
	w, d := cfg.Warmup, cfg.Duration
	tcpBW := func(size int, attached bool) step {
		name := "TCP"
		if attached {
			name = "TCP+XDP"
		}
		return step{fmt.Sprintf("%s stream %s", name, report.FormatSize(size)), func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
			win, err := tcpStream(ctx, hosts, w, d, size, 1)
			if err != nil {
				return nil, "", err
			}
			return []report.Result{
				{Contender: report.TCP, XDPAttached: attached, Measure: report.Bandwidth, Op: report.OpStream, Size: size, GbitS: win.gbitPerSec()},
				{Contender: report.TCP, XDPAttached: attached, Measure: report.CPUPerGB, Op: report.OpStream, Size: size, CPUSPerGB: win.cpuPerGB()},
			}, bwSummary(win), nil
		}}
	}
	for _, size := range cfg.Sizes {
		g := group{plain: []step{tcpBW(size, false)}}
		for _, op := range []string{report.OpWrite, report.OpSend, report.OpRead} {
			g.attached = append(g.attached, step{fmt.Sprintf("xdproce %s %s", report.OpName(op), report.FormatSize(size)), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
				win, err := p.stream(ctx, w, d, op, size, 1, cfg.Depth)
				if err != nil {
					return nil, "", err
				}
				return []report.Result{
					{Contender: report.Xdproce, Measure: report.Bandwidth, Op: op, Size: size, GbitS: win.gbitPerSec()},
					{Contender: report.Xdproce, Measure: report.CPUPerGB, Op: op, Size: size, CPUSPerGB: win.cpuPerGB()},
				}, bwSummary(win), nil
			}})
			if op == report.OpWrite {
				g.attached = append(g.attached, tcpBW(size, true))
			}
		}
		groups = append(groups, g)
		if cfg.Daemon && size == 64<<10 {
			groups = append(groups, daemonBW...)
		}
		if cfg.Loopback && size == 64<<10 {
			groups = append(groups, loopBW)
		}
	}
	tcpRTT := func(size int, attached bool) step {
		name := "TCP"
		if attached {
			name = "TCP+XDP"
		}
		return step{fmt.Sprintf("%s ping-pong %s", name, report.FormatSize(size)), func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
			lat, err := tcpPingPong(ctx, hosts, w, d, size)
			if err != nil {
				return nil, "", err
			}
			return []report.Result{rttResult(report.TCP, attached, report.OpPingPong, size, lat)}, latSummary(lat), nil
		}}
	}
	for _, size := range cfg.LatSizes {
		g := group{plain: []step{tcpRTT(size, false)}, rtt: true}
		for _, op := range []string{report.OpWrite, report.OpSend} {
			g.attached = append(g.attached, step{fmt.Sprintf("xdproce %s ping-pong %s", report.OpName(op), report.FormatSize(size)), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
				measure := p.writeLatency
				if op == report.OpSend {
					measure = p.sendLatency
				}
				lat, err := measure(ctx, w, d, size)
				if err != nil {
					return nil, "", fmt.Errorf("xdproce %s ping-pong: %w", op, err)
				}
				return []report.Result{rttResult(report.Xdproce, false, op, size, lat)}, latSummary(lat), nil
			}})
			if op == report.OpWrite {
				g.attached = append(g.attached, tcpRTT(size, true))
			}
		}
		groups = append(groups, g)
		if cfg.Daemon && size == 8 {
			groups = append(groups, daemonRTT...)
		}
		if cfg.Loopback && size == 8 {
			groups = append(groups, loopRTT)
		}
	}
	groups = append(groups, floorGroup(cfg, hosts))
	if cfg.DeviceMemory {
		groups = append(groups, dmGroups(cfg)...)
	}
	if len(cfg.QPs) > 0 {
		var g group
		size := cfg.MsgRateSize
		for _, n := range cfg.QPs {
			g.plain = append(g.plain, step{fmt.Sprintf("TCP %s message rate, %d connection(s)", report.FormatSize(size), n), func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
				win, err := tcpStream(ctx, hosts, w, d, size, n)
				if err != nil {
					return nil, "", err
				}
				return []report.Result{{Contender: report.TCP, Measure: report.MsgRate, Op: report.OpStream, Size: size, QPs: n, MmsgS: win.mmsgPerSec()}}, rateSummary(win), nil
			}})
			g.attached = append(g.attached, step{fmt.Sprintf("xdproce WRITE %s message rate, %d QP(s)", report.FormatSize(size), n), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
				win, err := p.stream(ctx, w, d, report.OpWrite, size, n, cfg.Depth)
				if err != nil {
					return nil, "", err
				}
				return []report.Result{{Contender: report.Xdproce, Measure: report.MsgRate, Op: report.OpWrite, Size: size, QPs: n, MmsgS: win.mmsgPerSec()}}, rateSummary(win), nil
			}})
		}
		groups = append(groups, g)
	}
	// Last, so that a stock program that fails costs none of the figures above.
	return append(groups, stockGroups(cfg, hosts)...)
}

// daemonGroups measure xdproce through its daemon: WRITE 64 KiB streaming
// (from and into memory both sides map, and from and into the application's
// own memory, which the daemon reaches with process_vm_readv/writev) and the
// 8 B WRITE round trip. plan puts each right after the same point
// in-process, so that the machine's drift does not come between them.
func daemonGroups(cfg Config) (bandwidth, roundTrip []group) {
	w, d := cfg.Warmup, cfg.Duration
	const big = 64 << 10
	bw := func(contender string) step {
		return step{fmt.Sprintf("%s WRITE %s", contender, report.FormatSize(big)), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
			win, err := p.stream(ctx, w, d, report.OpWrite, big, 1, cfg.Depth)
			if err != nil {
				return nil, "", err
			}
			return []report.Result{{Contender: contender, Measure: report.Bandwidth, Op: report.OpWrite, Size: big, GbitS: win.gbitPerSec()}}, bwSummary(win), nil
		}}
	}
	rtt := func(contender string) step {
		return step{fmt.Sprintf("%s WRITE ping-pong 8 B", contender), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
			lat, err := p.writeLatency(ctx, w, d, 8)
			if err != nil {
				return nil, "", err
			}
			return []report.Result{rttResult(contender, false, report.OpWrite, 8, lat)}, latSummary(lat), nil
		}}
	}
	return []group{{daemon: true, attached: []step{bw(report.XdproceDaemon)}},
			{daemon: true, ownMemory: true, attached: []step{bw(report.XdproceDaemonOwnMemory)}}},
		[]group{{daemon: true, rtt: true, attached: []step{rtt(report.XdproceDaemon)}}}
}

// loopbackGroups measure xdproce with both ends on one device: WRITE
// 64 KiB streaming and the 8 B WRITE round trip, each right after the same
// point over the link (plan), so that the ratio between them is of one
// moment of the machine.
func loopbackGroups(cfg Config) (bandwidth, roundTrip group) {
	w, d := cfg.Warmup, cfg.Duration
	const big = 64 << 10
	bw := step{fmt.Sprintf("xdproce loopback WRITE %s", report.FormatSize(big)), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
		win, err := p.stream(ctx, w, d, report.OpWrite, big, 1, cfg.Depth)
		if err != nil {
			return nil, "", err
		}
		return []report.Result{{Contender: report.XdproceLoopback, Measure: report.Bandwidth, Op: report.OpWrite, Size: big, GbitS: win.gbitPerSec()}}, bwSummary(win), nil
	}}
	rtt := step{"xdproce loopback WRITE ping-pong 8 B", func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
		lat, err := p.writeLatency(ctx, w, d, 8)
		if err != nil {
			return nil, "", err
		}
		return []report.Result{rttResult(report.XdproceLoopback, false, report.OpWrite, 8, lat)}, latSummary(lat), nil
	}}
	return group{loopback: true, attached: []step{bw}}, group{loopback: true, rtt: true, attached: []step{rtt}}
}

// floorGroup measures the floor (floor.go) with no xdproce device open: a
// frame round trip at each round-trip size that fits one frame, the frame
// rate at the message-rate size, and 4 KiB frames streaming one way.
func floorGroup(cfg Config, hosts [2]*Host) group {
	w, d := cfg.Warmup, cfg.Duration
	mtu := cfg.MTU
	if hosts[0] != nil {
		mtu = hosts[0].MTU
	}
	maxPayload := min(4096, mtu-(20+8+12+4)) // IPv4, UDP, BTH, ICRC
	var g group
	withFloor := func(ctx context.Context, fn func(f *floorPair) ([]report.Result, string, error)) ([]report.Result, string, error) {
		f, err := openFloor(ctx, hosts)
		if err != nil {
			return nil, "", err
		}
		rs, summary, err := fn(f)
		return rs, summary, errors.Join(err, f.Close())
	}
	for _, size := range cfg.LatSizes {
		if size > maxPayload {
			continue
		}
		g.plain = append(g.plain, step{fmt.Sprintf("AF_XDP frame ping-pong %s", report.FormatSize(size)), func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
			return withFloor(ctx, func(f *floorPair) ([]report.Result, string, error) {
				lat, err := f.floorPingPong(ctx, w, d, size)
				if err != nil {
					return nil, "", err
				}
				return []report.Result{rttResult(report.AFXDP, false, report.OpFrame, size, lat)}, latSummary(lat), nil
			})
		}})
	}
	stream := func(size int, measures ...string) step {
		return step{fmt.Sprintf("AF_XDP %s frames one way", report.FormatSize(size)), func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
			return withFloor(ctx, func(f *floorPair) ([]report.Result, string, error) {
				win, err := f.floorStream(ctx, w, d, size)
				if err != nil {
					return nil, "", err
				}
				var rs []report.Result
				for _, m := range measures {
					r := report.Result{Contender: report.AFXDP, Measure: m, Op: report.OpFrame, Size: size}
					switch m {
					case report.Bandwidth:
						r.GbitS = win.gbitPerSec()
					case report.CPUPerGB:
						r.CPUSPerGB = win.cpuPerGB()
					case report.MsgRate:
						r.QPs, r.MmsgS = 1, win.mmsgPerSec()
					}
					rs = append(rs, r)
				}
				return rs, fmt.Sprintf("%s, %s", bwSummary(win), rateSummary(win)), nil
			})
		}}
	}
	if len(cfg.QPs) > 0 && cfg.MsgRateSize <= maxPayload {
		g.plain = append(g.plain, stream(cfg.MsgRateSize, report.MsgRate))
	}
	if len(cfg.Sizes) > 0 {
		g.plain = append(g.plain, stream(maxPayload, report.Bandwidth, report.CPUPerGB))
	}
	return g
}

func rttResult(contender string, attached bool, op string, size int, lat Latencies) report.Result {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return report.Result{Contender: contender, XDPAttached: attached, Measure: report.RTT, Op: op, Size: size,
		P50us: us(lat.P50), P99us: us(lat.P99), P999us: us(lat.P999)}
}

func bwSummary(w window) string {
	return fmt.Sprintf("%.2f Gbit/s, %.2f CPU s/GB", w.gbitPerSec(), w.cpuPerGB())
}

func rateSummary(w window) string { return fmt.Sprintf("%.3f Mmsg/s", w.mmsgPerSec()) }

func latSummary(l Latencies) string {
	return fmt.Sprintf("median %v, p99 %v, p99.9 %v (%d round trips)", l.P50, l.P99, l.P999, l.N)
}
