package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/xdproce/xdproce/perftest"
	"github.com/xdproce/xdproce/verbs"
)

// perfUsage is perf's help before the tools' options (printPerfOptions).
const perfUsage = `xdproce perf TOOL -d IFACE [options] [SERVER]

TOOL is one of perftest's RC tools: ib_send_bw ib_send_lat ib_write_bw
ib_write_lat ib_read_bw ib_read_lat ib_atomic_bw ib_atomic_lat. Without
SERVER it is the server; with it, the client of SERVER. Either side may be
stock perftest (4.5 and later) on another RNIC: the out-of-band exchange on
TCP port 18515, the QP attributes and the reports are perftest's. With -R
the QPs are connected with rdma_cm and the exchange runs over an rdma_cm
connection of its own, both to port 18515, as perftest -R does; -R also
runs ib_send_bw and ib_send_lat over UD (-c UD, found with SIDR).
TOOL ibv_rc_pingpong is rdma-core's example instead (xdproce perf
ibv_rc_pingpong -h lists its options).`

// printPerfOptions prints the tools' options, perftest's: they follow TOOL
// on the command line, so they are not perf's own flags.
func printPerfOptions(w io.Writer) {
	fmt.Fprint(w, "\noptions (perftest's):\n")
	fs := perfFlags(&perfArgs{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// perfCommand declares perf's flags, none: everything after TOOL is the
// tool's, its -h included.
func perfCommand(*flag.FlagSet) action { return runPerf }

// runPerf is `xdproce perf`: perftest's tools on an xdproce device.
func runPerf(ctx context.Context, std stdio, args []string) error {
	stdout := std.out
	if len(args) == 0 {
		return fmt.Errorf("%w: xdproce perf TOOL -d IFACE [options] [SERVER]", errUsage)
	}
	if args[0] == "ibv_rc_pingpong" {
		return runRCPingPong(ctx, args[1:], stdout)
	}
	tool, err := perftest.ParseTool(args[0])
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	cfg, local, err := parsePerfArgs(tool, args[1:], stdout)
	if err != nil {
		return err
	}
	dev, err := openPerfDevice(ctx, local.iface, verbs.Options{BusyPoll: !cfg.Passive(), RxCoalesce: local.rxCoalesce, FastPath: local.fastPath})
	if err != nil {
		return err
	}
	_, runErr := perftest.Run(ctx, dev, cfg, stdout)
	if local.counters {
		if c, err := dev.Counters(); err == nil {
			printCounters(stdout, c)
		}
		printStalls(stdout, dev)
	}
	return errors.Join(runErr, dev.Close())
}

// printCounters prints the device's transport counters under rxe's
// hw_counters names, as `rdma statistic show link rxe0/1` does.
func printCounters(w io.Writer, c verbs.Counters) {
	var b strings.Builder
	b.WriteString("counters:")
	for _, n := range c.Named() {
		fmt.Fprintf(&b, " %s %d", n.Name, n.Value)
	}
	fmt.Fprintln(w, b.String())
}

// stallTimeouts is how many transport timer expiries without progress make
// `perf --counters` report a QP as stalled.
const stallTimeouts = 3

// printStalls names the QPs still retrying without progress, with the
// PSNs each side is at: why a run that hung did.
func printStalls(w io.Writer, dev *verbs.Device) {
	stalled, err := dev.StalledQPs(stallTimeouts)
	if err != nil {
		return
	}
	for _, s := range stalled {
		fmt.Fprintf(w, "stalled: %s\n", s)
	}
}

// openPerfDevice opens the device the tools run on. perftest and
// ibv_rc_pingpong spin on their completion queues, and so does xdproce perf;
// where it does (polls), the engine must spin too (BusyPoll): a goroutine
// that spins starves Go's network poller, which would wake a parked engine
// only when the runtime's monitor polls, up to 10 ms later. A passive side
// (perftest.Config.Passive) only waits, so its engine sleeps when idle
// instead of taking a CPU from the kernel work that carries its packets,
// which in a 1-vCPU guest cost the WRITE and READ servers bandwidth
// (docs/performance.md, "The passive side sleeps"; figures in
// docs/results/2026-11-24-code-comment-figures.md).
func openPerfDevice(ctx context.Context, iface string, opts verbs.Options) (*verbs.Device, error) {
	opts.Logger = slog.New(slog.DiscardHandler)
	dev, err := verbs.Open(ctx, iface, opts)
	if err != nil {
		return nil, fmt.Errorf("opening xdproce on %s: %w", iface, err)
	}
	return dev, nil
}

// perfArgs holds the flags before they become a perftest.Config.
type perfArgs struct {
	iface, mtu, atomic                  string
	port, size, iters, qps, tx, rx, cq  int
	outReads, gid, inline, ibPort, secs int
	all, gbits, verify, rdmaCM, version bool
	ownMemory, deviceMemory, fastPath   bool
	counters                            bool
	connType                            string
	timeout                             time.Duration
	rxCoalesce                          time.Duration
}

func perfFlags(a *perfArgs) *flag.FlagSet {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.iface, "d", "", "network interface xdproce runs on (perftest: the IB device)")
	fs.IntVar(&a.port, "p", perftest.DefaultPort, "port of the out-of-band exchange: TCP, or with -R the rdma_cm port of every connection")
	fs.IntVar(&a.size, "s", 0, "message size in bytes (default 65536 for bw, 2 for lat, 8 for atomics)")
	fs.IntVar(&a.iters, "n", 0, "iterations (default 5000 for ib_write_bw, else 1000)")
	fs.IntVar(&a.secs, "D", 0, "run for this many seconds instead of -n iterations")
	fs.StringVar(&a.mtu, "m", "", "path MTU to offer: 256..4096 (default: the port's active MTU)")
	fs.BoolVar(&a.all, "a", false, "run every size from 2 B to 8 MiB")
	fs.IntVar(&a.qps, "q", 1, "number of QPs")
	fs.IntVar(&a.tx, "t", 0, "send queue depth (default 128 for bw, 1 for lat)")
	fs.IntVar(&a.rx, "r", 0, "receive queue depth of SEND tests (default 512)")
	fs.IntVar(&a.cq, "Q", 0, "signal one request in this many (default 100)")
	fs.IntVar(&a.outReads, "o", 0, "outstanding READs/atomics offered as responder (default: device maximum)")
	fs.IntVar(&a.gid, "x", -1, "local GID index (default: the IPv4-mapped GID)")
	fs.IntVar(&a.inline, "I", -1, "largest message sent inline")
	fs.StringVar(&a.atomic, "A", "FETCH_AND_ADD", "atomic operation: FETCH_AND_ADD or CMP_AND_SWAP")
	fs.BoolVar(&a.gbits, "report_gbits", false, "report bandwidth in Gb/s instead of MB/s")
	fs.BoolVar(&a.verify, "verify", false, "fill with a pattern and check every byte that arrives (both sides xdproce)")
	fs.BoolVar(&a.deviceMemory, "dm", false, "put the buffer (the peer's target, and what this side sends) in device memory the XDP program can write (ibv_alloc_dm, ibv_reg_dm_mr); through a daemon too (it allocates the memory, both map it); at most 256 KiB")
	fs.BoolVar(&a.fastPath, "fast-path", false, "the XDP program executes small in-order WRITEs into device memory and takes their ACKs itself (verbs.Options.FastPath, docs/fastpath.md); in-process only")
	fs.BoolVar(&a.ownMemory, "own-memory", false, "register memory this program allocated (as stock perftest does) instead of memory shared with the device; through a daemon, it is reached with process_vm_readv/writev")
	fs.BoolVar(&a.counters, "counters", false, "print the device's transport counters (rxe's names) at the end")
	fs.DurationVar(&a.timeout, "timeout", 2*time.Minute, "bound on each out-of-band exchange and each wait for the peer")
	fs.DurationVar(&a.rxCoalesce, "rx-coalesce", 0, rxCoalesceUsage)
	fs.IntVar(&a.ibPort, "i", 1, "port number (xdproce devices have port 1)")
	fs.StringVar(&a.connType, "c", "RC", "connection type: RC, or with -R and the SEND tools UD")
	fs.BoolVar(&a.rdmaCM, "R", false, "connect the QPs with rdma_cm and exchange over rdma_cm (perftest's --rdma_cm)")
	fs.BoolVar(&a.rdmaCM, "rdma_cm", false, "same as -R")
	fs.BoolVar(&a.version, "V", false, "print the perftest version spoken")
	fs.Bool("F", false, "accepted for compatibility (perftest: do not fail on CPU frequency)")
	fs.Bool("report-gbits", false, "same as --report_gbits")
	return fs
}

// rxCoalesceUsage is the help of perf's and up's --rx-coalesce.
var rxCoalesceUsage = fmt.Sprintf("longest a sleeping engine lets received frames gather (verbs.Options.RxCoalesce; 0: the default, %v on one CPU and off elsewhere; negative: never; busy-polling devices never coalesce)", verbs.DefaultRxCoalesce)

var spinMaxUsage = fmt.Sprintf("longest an idle engine that is not busy-polling keeps looking for work while the idle gaps it sees are that short (verbs.Options.SpinMax; 0: the default, %v; negative: never)", verbs.DefaultSpinMax)

// perfLocal is what the command line says of this side's device, beside
// the test's configuration.
type perfLocal struct {
	iface      string
	counters   bool          // print the transport counters at the end
	rxCoalesce time.Duration // verbs.Options.RxCoalesce
	fastPath   bool          // verbs.Options.FastPath
}

// parsePerfArgs parses perftest's command line. Like getopt, it accepts the
// server's address before, between or after the options.
func parsePerfArgs(tool perftest.Tool, args []string, stdout io.Writer) (cfg perftest.Config, local perfLocal, err error) {
	var a perfArgs
	fs := perfFlags(&a)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(stdout, "usage: %s\n", perfUsage)
				printPerfOptions(stdout)
				return perftest.Config{}, perfLocal{}, err
			}
			return perftest.Config{}, perfLocal{}, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if a.version {
		fmt.Fprintf(stdout, "Version: %s\n", perftest.Version)
		return perftest.Config{}, perfLocal{}, flag.ErrHelp
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "report-gbits" {
			a.gbits = true
		}
	})
	switch {
	case len(pos) > 1:
		return perftest.Config{}, perfLocal{}, fmt.Errorf("%w: one server address at most, got %q", errUsage, pos)
	case a.iface == "":
		return perftest.Config{}, perfLocal{}, fmt.Errorf("%w: -d IFACE names the interface xdproce runs on", errUsage)
	case a.ibPort != 1:
		return perftest.Config{}, perfLocal{}, fmt.Errorf("%w: -i %d: xdproce devices have one port, 1", errUsage, a.ibPort)
	}
	conn, err := parseConnType(a.connType, a.rdmaCM)
	if err != nil {
		return perftest.Config{}, perfLocal{}, err
	}
	cfg = perftest.Config{Tool: tool, Conn: conn, RDMACM: a.rdmaCM, Port: a.port, Size: a.size, Iters: a.iters, AllSizes: a.all, QPs: a.qps,
		TxDepth: a.tx, RxDepth: a.rx, CQMod: a.cq, OutReads: a.outReads, GIDIndex: a.gid, Inline: a.inline,
		ReportGbits: a.gbits, Verify: a.verify, OwnMemory: a.ownMemory, DeviceMemory: a.deviceMemory, Timeout: a.timeout, Duration: time.Duration(a.secs) * time.Second}
	if len(pos) == 1 {
		cfg.Server = pos[0]
	}
	if a.mtu != "" {
		if _, err := fmt.Sscanf(a.mtu, "%d", &cfg.MTU); err != nil {
			return perftest.Config{}, perfLocal{}, fmt.Errorf("%w: -m %q: %v", errUsage, a.mtu, err)
		}
	}
	if cfg.Atomic, err = perftest.ParseAtomicOp(a.atomic); err != nil {
		return perftest.Config{}, perfLocal{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := cfg.Normalize(); err != nil {
		return perftest.Config{}, perfLocal{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return cfg, perfLocal{iface: a.iface, counters: a.counters, rxCoalesce: a.rxCoalesce, fastPath: a.fastPath}, nil
}

// parseConnType reads -c as perftest does, with its refusals under -R.
func parseConnType(s string, rdmaCM bool) (perftest.ConnType, error) {
	switch t := strings.ToUpper(s); {
	case t == "RC":
		return perftest.RC, nil
	case t == "UD" && rdmaCM:
		return perftest.UD, nil
	case t == "UD":
		return 0, fmt.Errorf("%w: -c UD: xdproce perf runs UD with -R (rdma_cm) only", errUsage)
	case t == "UC" && rdmaCM:
		return 0, fmt.Errorf("%w: -c UC: UC is not supported in librdmacm", errUsage)
	case t == "XRC" && rdmaCM:
		return 0, fmt.Errorf("%w: -c XRC: XRC does not support RDMA_CM", errUsage)
	case (t == "DC" || t == "SRD") && rdmaCM:
		return 0, fmt.Errorf("%w: -c %s: %s does not support RDMA_CM", errUsage, t, t)
	}
	return 0, fmt.Errorf("%w: -c %s: xdproce perf runs RC (and with -R, UD)", errUsage, s)
}

// runRCPingPong is `xdproce perf ibv_rc_pingpong`, rdma-core's example.
func runRCPingPong(ctx context.Context, args []string, stdout io.Writer) error {
	var c perftest.PingPongConfig
	var iface string
	fs := flag.NewFlagSet("ibv_rc_pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&iface, "d", "", "network interface xdproce runs on")
	fs.IntVar(&c.Port, "p", perftest.DefaultPort, "TCP port of the address exchange")
	fs.IntVar(&c.Size, "s", 4096, "message size")
	fs.IntVar(&c.MTU, "m", 1024, "path MTU")
	fs.IntVar(&c.RxDepth, "r", 500, "receives posted at a time")
	fs.IntVar(&c.Iters, "n", 1000, "exchanges")
	fs.IntVar(&c.GIDIndex, "g", -1, "local GID index (RoCE needs one: 1 is the IPv4-mapped GID)")
	fs.BoolVar(&c.Validate, "c", false, "validate the buffer that came back")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Minute, "bound on the exchange and on each wait for the peer")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(stdout, "usage: xdproce perf ibv_rc_pingpong -d IFACE -g GIDX [options] [SERVER]")
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				return err
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if iface == "" || len(pos) > 1 {
		return fmt.Errorf("%w: xdproce perf ibv_rc_pingpong -d IFACE -g GIDX [options] [SERVER]", errUsage)
	}
	if len(pos) == 1 {
		c.Server = pos[0]
	}
	dev, err := openPerfDevice(ctx, iface, verbs.Options{BusyPoll: true})
	if err != nil {
		return err
	}
	return errors.Join(perftest.RunPingPong(ctx, dev, c, stdout), dev.Close())
}
