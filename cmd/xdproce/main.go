// Command xdproce runs and inspects xdproce software RoCEv2 devices.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"syscall"
)

// command is one subcommand of the CLI.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands(stderr io.Writer, rn runner) map[string]command {
	return map[string]command{
		"bench": {"measure xdproce against kernel TCP between two network namespaces", func(ctx context.Context, args []string, stdout io.Writer) error {
			return runBench(ctx, args, stdout, stderr)
		}},
		"version": {"print the version", runVersion},
		"devinfo": {"show a device like ibv_devinfo -v", runDevinfo},
		"impair":  {"drop, duplicate, corrupt or reorder RoCEv2 packets on a forwarding port", runImpair},
		"spoof":   {"forge RoCEv2 frames against one RC connection, as an attacker on its link would", runSpoof},
		"up":      {"run the device on an interface for every process of the namespace (the daemon)", runUp},
		"down":    {"stop the daemon of an interface", runDown},
		"stats":   {"a daemon's counters (rxe's names, the XDP program's), and a QP's state", runStats},
		"list":    {"the daemons' devices, attached clients and QPs, like rdma resource show", runList},
		"perf":    {"perftest's ib_{send,write,read,atomic}_{bw,lat}, wire-compatible with stock perftest", runPerf},
		"run": {"run a stock RDMA program (perftest, ibverbs-utils, …) on xdproce's libibverbs", func(ctx context.Context, args []string, stdout io.Writer) error {
			return rn.run(ctx, args, os.Stdin, stdout, stderr)
		}},
	}
}

// errUsage marks a command-line mistake: the caller prints usage and exits 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(profiled(func() int { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) }))
}

// profiled runs fn under a CPU profile written to $XDPROCE_CPUPROFILE, if
// set: any command (xdproce perf in a guest, say) can be profiled so.
func profiled(fn func() int) int {
	path := os.Getenv("XDPROCE_CPUPROFILE")
	if path == "" {
		return fn()
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "xdproce: XDPROCE_CPUPROFILE: %v\n", err)
		return 1
	}
	code := fn()
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "xdproce: XDPROCE_CPUPROFILE: %v\n", err)
	}
	return code
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdout, stderr, newRunner())
}

// runWith is run with rn for `xdproce run` (tests give it fakes).
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, rn runner) int {
	cmds := commands(stderr, rn)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "xdproce: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := cmd.run(ctx, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		// The program xdproce run ran has spoken for itself: only its status is left.
		var exit *exitError
		if errors.As(err, &exit) {
			return exit.code
		}
		fmt.Fprintf(stderr, "xdproce %s: %v\n", args[0], err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: xdproce <command> [flags]")
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise the module build info is used.
var version = ""

func runVersion(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	v := version
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	fmt.Fprintf(stdout, "xdproce %s", v)
	if rev != "" {
		fmt.Fprintf(stdout, " (%s)", rev)
	}
	fmt.Fprintln(stdout)
	return nil
}
