package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/daemon"
)

// The provider library every stock RDMA program loads; the stubs for
// libmlx5 and libefa come with it (make provider).
const verbsLib = "libibverbs.so.1"

// A runner runs `xdproce run` with what it takes from its surroundings
// (tests give fakes): the daemons of the network namespace, the executable
// started as a daemon, and how long a daemon may take to listen and to
// stop.
type runner struct {
	running                   func() ([]string, error)
	executable                func() (string, error)
	startTimeout, stopTimeout time.Duration
	// discovery, if set, is the executable that gives CMD the discovery
	// tree (discoveryHelper): xdproce itself.
	discovery func() (string, error)
}

func newRunner() runner {
	return runner{running: daemon.Running, executable: os.Executable, discovery: os.Executable,
		startTimeout: 10 * time.Second, stopTimeout: 10 * time.Second}
}

// plainCommand runs argv as it is.
func plainCommand(ctx context.Context, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	return cmd
}

// command is how argv runs: with the discovery tree of the daemons running
// now when the caller may make mount namespaces (root), else as it is.
func (rn runner) command(ctx context.Context, argv []string, stderr io.Writer) (*exec.Cmd, error) {
	if rn.discovery == nil || os.Geteuid() != 0 {
		return plainCommand(ctx, argv), nil
	}
	exe, err := rn.discovery()
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	names, err := rn.running()
	if err != nil {
		return nil, err
	}
	return discoveryCommand(ctx, exe, discoverDevices(ctx, names, stderr), argv)
}

// exitError carries the exit status of the program `xdproce run` ran, for
// main to exit with: the program has said what went wrong itself.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// runUsage is run's synopsis.
const runUsage = "xdproce run [-d IFACE] -- CMD [ARGS]"

// beforeDashes is how many of run's arguments are its own: those before
// --, for CMD's flags (--help too) must never be taken for run's.
func beforeDashes(args []string) int {
	if i := slices.Index(args, "--"); i >= 0 {
		return i
	}
	return len(args)
}

// flags declares run's flags; its action runs a stock RDMA program
// (perftest, ibverbs-utils, …) with xdproce's libibverbs first on its
// library path, with a daemon serving -d IFACE for as long as it runs.
func (rn runner) flags(fs *flag.FlagSet) action {
	dev := fs.String("d", "", "interface whose daemon CMD uses; started for CMD's lifetime if none serves it")
	fs.StringVar(dev, "dev", "", "same as -d")
	return func(ctx context.Context, std stdio, args []string) error {
		// args are what run's flags left, then -- and CMD (beforeDashes).
		sep := slices.Index(args, "--")
		switch {
		case sep > 0:
			return fmt.Errorf("%w: unexpected arguments %q before --", errUsage, args[:sep])
		case sep < 0 && len(args) > 0:
			return fmt.Errorf("%w: unexpected arguments %q before --", errUsage, args)
		case sep < 0:
			return fmt.Errorf("%w: want %s: no --", errUsage, runUsage)
		case sep == len(args)-1:
			return fmt.Errorf("%w: want %s: no command after --", errUsage, runUsage)
		}
		return rn.run(ctx, *dev, args[sep+1:], std.in, std.out, std.err)
	}
}

// run runs argv with xdproce's libibverbs, through the daemon of dev (one
// started for argv's lifetime if none runs), or without dev through
// whichever daemon runs.
func (rn runner) run(ctx context.Context, dev string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {

	lib, err := rn.libDir()
	if err != nil {
		return err
	}
	if _, err := exec.LookPath(argv[0]); err != nil { // not found: say so before starting a daemon for nothing
		return err
	}
	running, err := rn.running()
	if err != nil {
		return err
	}
	var started *daemonProc
	if dev == "" {
		if len(running) == 0 {
			return errors.New("no xdproce daemon runs in this network namespace: pass -d IFACE, or start one with xdproce up -d IFACE")
		}
	} else if !slices.Contains(running, dev) {
		// The daemon's Pdeathsig fires when the thread that started it
		// exits, not the process: keep this goroutine on its thread until
		// the daemon has been stopped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if started, err = rn.startDaemon(ctx, dev, stderr); err != nil {
			return err
		}
	}

	cmd, err := rn.command(ctx, argv, stderr)
	if err != nil {
		return errors.Join(err, started.stopIfStarted())
	}
	path := lib
	if prev := os.Getenv("LD_LIBRARY_PATH"); prev != "" {
		path += ":" + prev
	}
	prepare := func(cmd *exec.Cmd) {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+path) // the last value wins
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		// Interrupted, CMD gets the chance to clean up (its QPs, its daemon
		// connection) that a SIGKILL would deny it; SIGKILL only if it lingers.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
	}
	prepare(cmd)
	err = cmd.Run()
	if cmd.ProcessState == nil && errors.Is(err, syscall.EPERM) && slices.Contains(cmd.Args, discoveryHelper) {
		// No mount namespace for this root (a container without
		// CAP_SYS_ADMIN): CMD runs as it would outside xdproce run.
		fmt.Fprintf(stderr, "xdproce run: %s runs without /sys/class/infiniband: %v\n", argv[0], err)
		cmd = plainCommand(ctx, argv)
		prepare(cmd)
		err = cmd.Run()
	}
	if st := cmd.ProcessState; st != nil && !st.Success() {
		err = &exitError{code: exitCode(st)}
	} else if err != nil {
		err = fmt.Errorf("running %s: %w", argv[0], err)
	}
	// A daemon this run started stops with CMD, however CMD ended; one
	// that was running already is left alone.
	if started != nil {
		if serr := started.stop(); serr != nil {
			if err == nil {
				return serr
			}
			fmt.Fprintf(stderr, "xdproce run: %v\n", serr) // CMD's exit status still decides ours
		}
	}
	return err
}

// exitCode is a finished process's exit status as a shell reports it:
// 128+N when signal N killed it.
func exitCode(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// libDir finds xdproce's libibverbs.so.1: in $XDPROCE_LIBDIR if set, else
// in bin/lib beside bin/xdproce (a build in the repository), else in
// PREFIX/lib/xdproce (make install).
func (rn runner) libDir() (string, error) {
	exe, err := rn.executable()
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", verbsLib, err)
	}
	return findLibDir(os.Getenv("XDPROCE_LIBDIR"), exe)
}

// findLibDir is libDir for the value env of $XDPROCE_LIBDIR and the
// executable exe. The directory is absolute, for CMD may change its own.
func findLibDir(env, exe string) (string, error) {
	var dirs []string
	if env != "" {
		dirs = []string{env} // an explicit choice: no fallback behind the user's back
	} else {
		bin := filepath.Dir(exe)
		dirs = []string{filepath.Join(bin, "lib"), filepath.Join(bin, "..", "lib", "xdproce")}
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, verbsLib)); err == nil {
			return filepath.Abs(d)
		}
	}
	where := strings.Join(dirs, " or ")
	if env != "" {
		where += " ($XDPROCE_LIBDIR)"
	}
	return "", fmt.Errorf("no %s in %s: make provider builds it (into bin/lib; make install puts it into PREFIX/lib/xdproce)", verbsLib, where)
}

// A daemonProc is a daemon `xdproce run` started, and stops.
type daemonProc struct {
	ifname      string
	cmd         *exec.Cmd
	stopTimeout time.Duration
	done        chan struct{} // closed when it has exited; then err is its exit
	err         error
}

// startDaemon starts `xdproce up -d ifname` and waits until it listens.
func (rn runner) startDaemon(ctx context.Context, ifname string, stderr io.Writer) (*daemonProc, error) {
	exe, err := rn.executable()
	if err != nil {
		return nil, fmt.Errorf("starting a daemon for %s: %w", ifname, err)
	}
	cmd := exec.Command(exe, "up", "-d", ifname)
	// Its own process group keeps a ^C at the terminal from stopping it
	// under CMD, which still needs it to clean up; stop does it after CMD.
	// Pdeathsig stops it if xdproce itself dies without a word.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Stdout, cmd.Stderr = stderr, stderr // CMD's stdout is CMD's alone
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a daemon for %s: %w", ifname, err)
	}
	d := &daemonProc{ifname: ifname, cmd: cmd, stopTimeout: rn.stopTimeout, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()

	deadline := time.NewTimer(rn.startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		running, err := rn.running()
		if err != nil {
			return nil, errors.Join(err, d.stop())
		}
		if slices.Contains(running, ifname) {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("the daemon for %s exited before it listened: %v", ifname, d.exit())
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("waiting for the daemon for %s: %w", ifname, ctx.Err()), d.stop())
		case <-deadline.C:
			return nil, errors.Join(fmt.Errorf("the daemon for %s did not listen within %v", ifname, rn.startTimeout), d.stop())
		case <-tick.C:
		}
	}
}

// stopIfStarted stops d, if there is one.
func (d *daemonProc) stopIfStarted() error {
	if d == nil {
		return nil
	}
	return d.stop()
}

// exit describes how the daemon exited; it has.
func (d *daemonProc) exit() error {
	if d.err == nil {
		return errors.New("exit status 0")
	}
	return d.err
}

// stop sends the daemon SIGTERM and waits for it to exit, killing it if it
// takes longer than its stop timeout. A daemon that exited before it was
// asked to is an error, as is one that had to be killed.
func (d *daemonProc) stop() error {
	select {
	case <-d.done:
		return fmt.Errorf("the daemon for %s had exited: %v", d.ifname, d.exit())
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping the daemon for %s: %w", d.ifname, err)
	}
	t := time.NewTimer(d.stopTimeout)
	defer t.Stop()
	select {
	case <-d.done:
		if d.err != nil {
			return fmt.Errorf("the daemon for %s: %w", d.ifname, d.err)
		}
		return nil
	case <-t.C:
	}
	if err := d.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing the daemon for %s: %w", d.ifname, err)
	}
	<-d.done
	return fmt.Errorf("the daemon for %s did not stop within %v: killed", d.ifname, d.stopTimeout)
}
