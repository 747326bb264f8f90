package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/xdproce/xdproce/bench"
	"github.com/xdproce/xdproce/bench/report"
)

// benchFlags declares `xdproce bench`'s flags; its action measures: tables on stdout, progress on stderr.
func benchFlags(fs *flag.FlagSet) action {
	quick := fs.Bool("quick", false, "short points: the whole run in under a minute")
	sizes := fs.String("sizes", "64,256,1K,4K,16K,64K,256K,1M", "bandwidth and CPU-per-GB message sizes")
	latSizes := fs.String("lat-sizes", "8,4K", "round-trip message sizes")
	qps := fs.String("qps", "1,2,4", "message rate: QP (and TCP connection) counts")
	msgSize := fs.String("msg-size", "64", "message rate: message size")
	dur := fs.Duration("time", 0, "measured time per point (default 2s, 400ms with --quick)")
	warmup := fs.Duration("warmup", 0, "unmeasured time before each point (default 300ms, 100ms with --quick)")
	depth := fs.Int("depth", 0, fmt.Sprintf("operations in flight per QP (default %d, perftest ib_write_bw's tx_depth)", bench.DefaultDepth))
	busy := busyFlag(bench.BusyPollRTT)
	fs.Var(&busy, "busy-poll", "where engines and applications spin instead of sleeping (verbs.Options.BusyPoll): rtt (round trips only), off, or on (bare --busy-poll)")
	spinMax := fs.Duration("spin-max", 0, "how long an idle engine spins before sleeping while idle gaps are that short (verbs.Options.SpinMax; 0: the default, negative: never)")
	ackHold := fs.Duration("ack-hold", 0, "how long a device holds lone ACKs for a reply to leave with them (verbs.Options.AckHold; 0: the default, negative: never)")
	mtu := fs.Int("mtu", 0, "MTU of the veth pair (default 4200: RoCE path MTU 4096)")
	queues := fs.Int("queues", 1, "RX/TX queues of the veth pair; the devices serve them all and spread QPs over them by UDP source port")
	ifaces := fs.String("ifaces", "", "measure between two existing interfaces NETNS/IFNAME,NETNS/IFNAME instead of a fresh veth pair")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	plotOut := fs.String("plot", "", "draw bandwidth against message size into this file (.svg or .png)")
	loss := fs.String("loss", "", "instead: the loss sweep, RoCEv2 packets dropped at these rates both ways on a bridge between the hosts (e.g. 0.1%,1%,5%), each against the same path at 0%; --sizes defaults to 4K,64K there, --plot draws goodput against loss rate")
	lossOps := fs.String("loss-ops", "", "the loss sweep's operations (default all: "+strings.Join(bench.LossOps, ",")+"); send_rtt and write_rtt are 4 KiB round trips")
	viaDaemon := fs.Bool("daemon", true, "also measure WRITE 64 KiB and the 8 B WRITE round trip through each host's daemon (xdproce up)")
	loopback := fs.Bool("loopback", true, "also measure WRITE 64 KiB and the 8 B WRITE round trip with both ends on one device (looped back inside it)")
	dm := fs.Bool("dm", false, "also measure the 8 B WRITE round trip and the WRITE message rate (one QP) into device memory, with the XDP fast path and without (issue 34)")
	stockRounds := fs.Int("stock-rounds", 0, "rounds of the stock perftest comparison, each contender once per round, alternating which goes first (default 3, 2 with --quick); the figures are the medians")
	stock := fs.Bool("stock", true, "also compare stock perftest over xdproce's libibverbs (xdproce run) with xdproce perf, ib_write_lat 8 B and ib_write_bw 64 KiB, both through an xdproce up started on each host (issue 15); skipped, with a note, when perftest or the library is missing")
	daemonModes := fs.Bool("daemon-modes", false, "also compare stock ib_write_lat 8 B through daemons with their defaults against busy-polling daemons (--stock-rounds rounds, alternating), and measure an idle default daemon's CPU (issue 34; about 30 s more; needs what --stock needs)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (both engines and applications) to this file, for go tool pprof")
	return func(ctx context.Context, std stdio, args []string) error {
		stdout := std.out
		stderr := std.err
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		// A profile covers the loss sweep too.
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		if *loss != "" {
			explicit := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
			return runLossSweep(ctx, *loss, lossFlags{sizes: *sizes, sizesSet: explicit["sizes"], ops: *lossOps, dur: *dur, warmup: *warmup, depth: *depth, mtu: *mtu, json: *jsonOut, plot: *plotOut}, stdout, stderr)
		}
		cfg := bench.Default()
		if *quick {
			cfg = bench.Quick()
		}
		var err error
		if cfg.Sizes, err = bench.ParseSizes(*sizes); err != nil {
			return fmt.Errorf("%w: --sizes: %v", errUsage, err)
		}
		if cfg.LatSizes, err = bench.ParseSizes(*latSizes); err != nil {
			return fmt.Errorf("%w: --lat-sizes: %v", errUsage, err)
		}
		if cfg.QPs, err = bench.ParseCounts(*qps); err != nil {
			return fmt.Errorf("%w: --qps: %v", errUsage, err)
		}
		ms, err := bench.ParseSizes(*msgSize)
		if err != nil || len(ms) != 1 {
			return fmt.Errorf("%w: --msg-size %q: one size", errUsage, *msgSize)
		}
		cfg.MsgRateSize = ms[0]
		setIf := func(v *time.Duration, d time.Duration) {
			if d != 0 {
				*v = d
			}
		}
		setIf(&cfg.Duration, *dur)
		setIf(&cfg.Warmup, *warmup)
		if *depth != 0 {
			cfg.Depth = *depth
		}
		if *mtu != 0 {
			cfg.MTU = *mtu
		}
		if *queues < 1 {
			return fmt.Errorf("%w: --queues %d: at least 1", errUsage, *queues)
		}
		cfg.Queues = *queues
		cfg.BusyPoll = bench.BusyPoll(busy)
		cfg.AckHold = *ackHold
		cfg.SpinMax = *spinMax
		cfg.Daemon = *viaDaemon
		cfg.Loopback = *loopback
		cfg.DeviceMemory = *dm
		if *stockRounds < 0 {
			return fmt.Errorf("%w: --stock-rounds %d: at least 1", errUsage, *stockRounds)
		}
		if *daemonModes && !*stock {
			return fmt.Errorf("%w: --daemon-modes runs stock perftest: not with --stock=false", errUsage)
		}
		if *stock {
			s, why := findStock(os.Executable, exec.LookPath, os.Getenv("XDPROCE_LIBDIR"))
			if s == nil {
				fmt.Fprintf(stderr, "bench: stock perftest over libibverbs vs xdproce perf skipped: %s\n", why)
			} else if *stockRounds > 0 {
				s.Rounds = *stockRounds
			} else if *quick {
				s.Rounds = 2 // each contender first once
			}
			if s != nil {
				s.DaemonModes = *daemonModes
			}
			cfg.Stock = s
		}
		if *ifaces != "" {
			cfg.Ifaces = strings.Split(*ifaces, ",")
		}
		if *plotOut != "" {
			if err := report.CheckPlotFile(*plotOut); err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
		}
		cfg.Progress = stderr

		start := time.Now()
		results, runErr := bench.Run(ctx, cfg)
		if len(results) > 0 {
			if err := report.WriteTables(stdout, results); err != nil {
				return err
			}
			if err := report.WriteTargets(stdout, results, cfg.BusyPoll != bench.BusyPollNever); err != nil {
				return err
			}
		}
		if runErr != nil {
			return runErr
		}
		fmt.Fprintf(stderr, "bench: %d figures in %v\n", len(results), time.Since(start).Round(time.Second))
		if *jsonOut != "" {
			if err := writeFile(*jsonOut, func(w io.Writer) error { return report.WriteJSON(w, results) }); err != nil {
				return err
			}
		}
		if *plotOut != "" {
			if err := report.Plot(*plotOut, results); err != nil {
				return err
			}
		}
		return nil
	}
}

// findStock sets up the comparison of stock perftest over xdproce's
// libibverbs with xdproce perf: this executable (for xdproce up, run and
// perf), the library as xdproce run finds it, and perftest's binaries on
// the PATH. Without one of them it returns nil and why.
func findStock(executable func() (string, error), lookPath func(string) (string, error), libEnv string) (*bench.Stock, string) {
	exe, err := executable()
	if err != nil {
		return nil, fmt.Sprintf("no path to this executable: %v", err)
	}
	lib, err := findLibDir(libEnv, exe)
	if err != nil {
		return nil, err.Error()
	}
	for _, tool := range bench.StockTools {
		if _, err := lookPath(tool); err != nil {
			return nil, fmt.Sprintf("%s is not installed (apt-get install perftest): %v", tool, err)
		}
	}
	return &bench.Stock{Exe: exe, LibDir: lib}, ""
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return f.Close()
}

// busyFlag is --busy-poll: a mode, or on when given bare.
type busyFlag bench.BusyPoll

func (b *busyFlag) String() string   { return bench.BusyPoll(*b).String() }
func (b *busyFlag) IsBoolFlag() bool { return true }
func (b *busyFlag) Set(s string) error {
	m, err := bench.ParseBusyPoll(s)
	*b = busyFlag(m)
	return err
}

// lossFlags are the bench flags the loss sweep reads.
type lossFlags struct {
	sizes      string
	sizesSet   bool
	ops        string
	dur        time.Duration
	warmup     time.Duration
	depth, mtu int
	json, plot string
}

// runLossSweep is `xdproce bench --loss RATES`.
func runLossSweep(ctx context.Context, rates string, f lossFlags, stdout, stderr io.Writer) error {
	cfg := bench.DefaultLoss()
	cfg.Rates = nil
	for _, r := range strings.Split(rates, ",") {
		v, err := parseRate(r)
		if err != nil {
			return fmt.Errorf("%w: --loss: %v", errUsage, err)
		}
		cfg.Rates = append(cfg.Rates, v)
	}
	if f.sizesSet {
		var err error
		if cfg.Sizes, err = bench.ParseSizes(f.sizes); err != nil {
			return fmt.Errorf("%w: --sizes: %v", errUsage, err)
		}
	}
	if f.ops != "" {
		cfg.Ops = strings.Split(f.ops, ",")
	}
	if f.plot != "" {
		if err := report.CheckPlotFile(f.plot); err != nil {
			return fmt.Errorf("%w: --plot: %v", errUsage, err)
		}
	}
	if f.dur != 0 {
		cfg.Duration = f.dur
	}
	if f.warmup != 0 {
		cfg.Warmup = f.warmup
	}
	if f.depth != 0 {
		cfg.Depth = f.depth
	}
	if f.mtu != 0 {
		cfg.MTU = f.mtu
	}
	cfg.Progress = stderr
	results, runErr := bench.RunLoss(ctx, cfg)
	if len(results) > 0 {
		if err := bench.WriteLossTable(stdout, results); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	if f.plot != "" {
		if err := report.PlotLoss(f.plot, results); err != nil {
			return err
		}
	}
	if f.json != "" {
		return writeFile(f.json, func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(struct {
				Loss []report.LossResult `json:"loss"`
			}{results})
		})
	}
	return nil
}

// parseRate reads a loss rate as a fraction (0.01) or a percentage (1%).
func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	scale := 1.0
	if t, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = t, 0.01
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v*scale >= 1 {
		return 0, fmt.Errorf("loss rate %q: a fraction in [0, 1) or a percentage", s)
	}
	return v * scale, nil
}
