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
	"runtime/trace"
	"slices"
	"strings"
	"syscall"
)

// A command is one subcommand of the CLI, declared in one place: its name,
// its line in `xdproce help`, its usage and its flags.
type command struct {
	name    string
	summary string // its line in `xdproce help`
	usage   string // what follows "usage: " in its help: the synopsis, then any prose
	// flags declares the command's flags on fs and returns the command
	// itself, which runs once they are parsed, with the arguments left.
	flags func(fs *flag.FlagSet) action
	// more, if set, prints help beyond its flags' (perf: its tools' options).
	more func(w io.Writer)
	// own, if set, says how many of the arguments are the command's to
	// parse; the rest belong to the program it runs (run: from --) and
	// reach the action untouched, their --help included.
	own func(args []string) int
}

// An action runs a command whose flags have been parsed, with the
// arguments they left.
type action func(ctx context.Context, std stdio, args []string) error

// stdio is where a command reads and writes.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// commands is every subcommand, rn running `xdproce run`.
func commands(rn runner) []command {
	return []command{
		{name: "bench", summary: "measure xdproce against kernel TCP between two network namespaces",
			usage: "xdproce bench [flags]", flags: benchFlags},
		{name: "devinfo", summary: "show a device like ibv_devinfo -v",
			usage: "xdproce devinfo --dev IFACE [flags]", flags: devinfoFlags},
		{name: "down", summary: "stop the daemon of an interface",
			usage: "xdproce down -d IFACE [flags]", flags: downFlags},
		{name: "impair", summary: "drop, duplicate, corrupt or reorder RoCEv2 packets on a forwarding port",
			usage: "xdproce impair --dev IFACE [flags]", flags: impairFlags},
		{name: "list", summary: "the daemons' devices, attached clients and QPs, like rdma resource show",
			usage: "xdproce list [-d IFACE]", flags: listFlags},
		{name: "perf", summary: "perftest's ib_{send,write,read,atomic}_{bw,lat}, wire-compatible with stock perftest",
			usage: perfUsage, flags: perfCommand, more: printPerfOptions},
		{name: "run", summary: "run a stock RDMA program (perftest, ibverbs-utils, …) on xdproce's libibverbs",
			usage: runUsage, flags: rn.flags, own: beforeDashes},
		{name: "spoof", summary: "forge RoCEv2 frames against one RC connection, as an attacker on its link would",
			usage: "xdproce spoof --dev IFACE --victim IP --victim-mac MAC --as IP --as-mac MAC [flags]", flags: spoofFlags},
		{name: "stats", summary: "a daemon's counters (rxe's names, the XDP program's), and a QP's state",
			usage: "xdproce stats [-d IFACE] [--qp QPN] [--watch INTERVAL]", flags: statsFlags},
		{name: "up", summary: "run the device on an interface for every process of the namespace (the daemon)",
			usage: "xdproce up -d IFACE [flags]", flags: upFlags},
		{name: "version", summary: "print the version",
			usage: "xdproce version", flags: versionFlags},
	}
}

// errUsage marks a command-line mistake: the caller prints usage and exits 2.
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) > 1 && os.Args[1] == discoveryHelper { // xdproce run's, in CMD's mount namespace
		err := enterDiscovery(os.Args[2:])
		fmt.Fprintf(os.Stderr, "xdproce run: %v\n", err)
		os.Exit(127)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(profiled(func() int { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) }))
}

// profiled runs fn under a CPU profile written to $XDPROCE_CPUPROFILE, if
// set: any command (xdproce perf in a guest, say) can be profiled so.
func profiled(fn func() int) int {
	path := os.Getenv("XDPROCE_CPUPROFILE")
	if path == "" {
		return traced(fn)
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "xdproce: XDPROCE_CPUPROFILE: %v\n", err)
		return 1
	}
	code := traced(fn)
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "xdproce: XDPROCE_CPUPROFILE: %v\n", err)
	}
	return code
}

// traced runs fn under an execution trace written to $XDPROCE_TRACE, if
// set: where a daemon's goroutines wait (go tool trace -pprof=sched) is what
// a CPU profile of a round trip cannot show.
func traced(fn func() int) int {
	path := os.Getenv("XDPROCE_TRACE")
	if path == "" {
		return fn()
	}
	f, err := os.Create(path)
	if err == nil {
		err = trace.Start(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "xdproce: XDPROCE_TRACE: %v\n", err)
		return 1
	}
	code := fn()
	trace.Stop()
	if err := f.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "xdproce: XDPROCE_TRACE: %v\n", err)
	}
	return code
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdout, stderr, newRunner())
}

// runWith is run with rn for `xdproce run` (tests give it fakes).
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, rn runner) int {
	cmds := commands(rn)
	if len(args) == 0 {
		listCommands(stderr, cmds)
		return 2
	}
	name, args := args[0], args[1:]
	if name == "-h" || name == "--help" || name == "-help" || name == "help" {
		if name != "help" || len(args) == 0 {
			listCommands(stdout, cmds)
			return 0
		}
		// xdproce help CMD is xdproce CMD --help.
		name, args = args[0], []string{"--help"}
	}
	i := slices.IndexFunc(cmds, func(c command) bool { return c.name == name })
	if i < 0 {
		fmt.Fprintf(stderr, "xdproce: unknown command %q\n", name)
		listCommands(stderr, cmds)
		return 2
	}
	c := cmds[i]
	err := c.exec(ctx, stdio{in: os.Stdin, out: stdout, err: stderr}, args)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0 // the help asked for is printed
	}
	// The program xdproce run ran has spoken for itself: only its status is left.
	var exit *exitError
	if errors.As(err, &exit) {
		return exit.code
	}
	fmt.Fprintf(stderr, "xdproce %s: %v\n", name, err)
	var perr *parseError
	switch {
	case errors.As(err, &perr):
		c.help(stderr, perr.fs)
		return 2
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "usage: %s\n(xdproce %s --help for more)\n", firstLine(c.usage), name)
		return 2
	}
	return 1
}

// parseError is a command line its flags did not parse; it is a usage
// error, answered with the command's whole help.
type parseError struct {
	fs  *flag.FlagSet
	err error
}

func (e *parseError) Error() string { return fmt.Sprintf("%v: %v", errUsage, e.err) }
func (e *parseError) Unwrap() error { return errUsage }

// exec parses the command's flags from args and runs it; --help (or -h)
// prints its help to std.out and returns flag.ErrHelp.
func (c command) exec(ctx context.Context, std stdio, args []string) error {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by runWith, with the usage
	act := c.flags(fs)
	ours, theirs := args, []string(nil)
	if c.own != nil {
		n := c.own(args)
		ours, theirs = args[:n], args[n:]
	}
	if err := fs.Parse(ours); errors.Is(err, flag.ErrHelp) {
		c.help(std.out, fs)
		return err
	} else if err != nil {
		return &parseError{fs: fs, err: err}
	}
	return act(ctx, std, append(fs.Args(), theirs...))
}

// help prints the command's usage, its flags (fs's), and any more it has.
func (c command) help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n", c.usage)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if c.more != nil {
		c.more(w)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// listCommands is `xdproce help`: every command, with one line each.
func listCommands(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "usage: xdproce <command> [flags]")
	fmt.Fprintln(w, "commands:")
	cmds = slices.Clone(cmds)
	slices.SortFunc(cmds, func(a, b command) int { return strings.Compare(a.name, b.name) })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "xdproce <command> --help (or xdproce help <command>) prints a command's usage and flags.")
}

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise the module build info is used.
var version = ""

func versionFlags(*flag.FlagSet) action { return runVersion }

func runVersion(_ context.Context, std stdio, _ []string) error {
	stdout := std.out
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
