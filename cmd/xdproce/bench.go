package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/xdproce/xdproce/bench"
)

// runBench is `xdproce bench`: tables on stdout, progress on stderr.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "short points: the whole run in under a minute")
	sizes := fs.String("sizes", "64,256,1K,4K,16K,64K,256K,1M", "bandwidth and CPU-per-GB message sizes")
	latSizes := fs.String("lat-sizes", "8,4K", "round-trip message sizes")
	qps := fs.String("qps", "1,2,4", "message rate: QP (and TCP connection) counts")
	msgSize := fs.String("msg-size", "64", "message rate: message size")
	dur := fs.Duration("time", 0, "measured time per point (default 2s, 400ms with --quick)")
	warmup := fs.Duration("warmup", 0, "unmeasured time before each point (default 300ms, 100ms with --quick)")
	depth := fs.Int("depth", 0, "operations in flight per QP (default 32)")
	busy := busyFlag(bench.BusyPollRTT)
	fs.Var(&busy, "busy-poll", "where engines and applications spin instead of sleeping (verbs.Options.BusyPoll): rtt (round trips only), off, or on (bare --busy-poll)")
	ackHold := fs.Duration("ack-hold", 0, "how long a device holds lone ACKs for a reply to leave with them (verbs.Options.AckHold; 0: the default, negative: never)")
	mtu := fs.Int("mtu", 0, "MTU of the veth pair (default 4200: RoCE path MTU 4096)")
	ifaces := fs.String("ifaces", "", "measure between two existing interfaces NETNS/IFNAME,NETNS/IFNAME instead of a fresh veth pair")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	plotOut := fs.String("plot", "", "draw bandwidth against message size into this file (.svg or .png)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (both engines and applications) to this file, for go tool pprof")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
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
	cfg.BusyPoll = bench.BusyPoll(busy)
	cfg.AckHold = *ackHold
	if *ifaces != "" {
		cfg.Ifaces = strings.Split(*ifaces, ",")
	}
	if *plotOut != "" {
		if err := bench.CheckPlotFile(*plotOut); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	cfg.Progress = stderr
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

	start := time.Now()
	results, runErr := bench.Run(ctx, cfg)
	if len(results) > 0 {
		if err := bench.WriteTables(stdout, results); err != nil {
			return err
		}
		if err := bench.WriteTargets(stdout, results, cfg.BusyPoll != bench.BusyPollNever); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	fmt.Fprintf(stderr, "bench: %d figures in %v\n", len(results), time.Since(start).Round(time.Second))
	if *jsonOut != "" {
		if err := writeFile(*jsonOut, func(w io.Writer) error { return bench.WriteJSON(w, results) }); err != nil {
			return err
		}
	}
	if *plotOut != "" {
		if err := bench.Plot(*plotOut, results); err != nil {
			return err
		}
	}
	return nil
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
