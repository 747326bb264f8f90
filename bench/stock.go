package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/bench/report"
	"github.com/xdproce/xdproce/daemon"
)

// Stock is the comparison of issue 15: Debian's stock perftest binaries on
// xdproce's drop-in libibverbs.so.1 (`xdproce run -- ib_write_lat …`)
// against xdproce perf, perftest's tools in Go on the verbs API (`xdproce
// perf ib_write_lat …`). Both are separate processes attached to a daemon
// (`xdproce up`) in each host's namespace, so that the only difference
// between them is the application side: the C library's posts and polls
// against the Go client's.
type Stock struct {
	// Exe is the xdproce executable whose up, run and perf commands the
	// comparison runs (os.Executable of `xdproce bench`).
	Exe string
	// LibDir holds xdproce's libibverbs.so.1 ($XDPROCE_LIBDIR of xdproce run).
	LibDir string
	// Rounds is how many times each point runs with each contender, the
	// two alternating (default 3); the figures are the medians.
	Rounds int
	// LatIters is ib_write_lat -n (default 2500 per second of
	// Config.Duration, at least 1000: the spread between runs, not the
	// samples of one, bounds how well a median is known).
	LatIters int
	// BWSeconds is ib_write_bw -D (default Config.Duration in whole
	// seconds, at least 1).
	BWSeconds int
	// Port is the out-of-band TCP port of the first run; each run takes
	// the next, so that no run meets its predecessor's sockets (default 19515).
	Port int
	// DaemonModes adds issue 34's comparison: stock ib_write_lat through
	// daemons with their defaults against busy-polling daemons, Rounds
	// rounds alternating, a fresh pair of daemons each; and the CPU an
	// idle default daemon takes. It is not part of the default run, whose
	// length it would take past its budget (about 30 s more).
	DaemonModes bool
	// IdleWindow is how long the first round of that comparison leaves its
	// freshly started default daemons alone to measure the CPU they take
	// idle (default 3 s; negative: not measured).
	IdleWindow time.Duration
}

// StockTools are the perftest binaries the comparison needs on the PATH
// (Debian's perftest package).
var StockTools = []string{report.StockLatTool, report.StockBWTool}

// withDefaults fills in what s leaves zero, for a run of cfg.
func (s Stock) withDefaults(cfg Config) Stock {
	if s.Rounds <= 0 {
		s.Rounds = 3
	}
	if s.LatIters <= 0 {
		s.LatIters = max(1000, int(cfg.Duration.Seconds()*2500))
	}
	if s.BWSeconds <= 0 {
		s.BWSeconds = max(1, int(cfg.Duration.Round(time.Second)/time.Second))
	}
	if s.Port <= 0 {
		s.Port = 19515
	}
	if s.IdleWindow == 0 {
		s.IdleWindow = 3 * time.Second
	}
	return s
}

// perftest's result rows (REPORT_FMT and REPORT_FMT_LAT), as both stock
// perftest and xdproce perf print them: bandwidth rows are #bytes,
// #iterations, BW peak, BW average (MB/s, 2^20 bytes) and MsgRate;
// latency rows #bytes, #iterations, t_min, t_max, t_typical, t_avg,
// t_stdev, 99% and 99.9% percentiles (µs, half round trips for WRITE).
// Stock perftest prints t_stdev as -nan when its variance, summed in
// floating point, comes out negative (one huge sample among small ones).
var (
	perftestBWRow  = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
	perftestLatRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+|-?nan)\s+([\d.]+)\s+([\d.]+)\s*$`)
)

// perftestLat is a latency row: microseconds as printed, which for
// ib_write_lat are halves of round trips (perftest divides the time
// between consecutive posts by two).
type perftestLat struct {
	iters              int
	typical, p99, p999 float64
}

// roundTrip is the row as a round-trip figure: perftest's halves doubled.
func (l perftestLat) roundTrip(contender string, size int) report.Result {
	return report.Result{Contender: contender, Measure: report.RTT, Op: report.OpWrite, Size: size, P50us: 2 * l.typical, P99us: 2 * l.p99, P999us: 2 * l.p999}
}

// parsePerftestLat reads the latency row of size from a perftest client's
// output.
func parsePerftestLat(out string, size int) (perftestLat, error) {
	row, err := perftestRow(out, perftestLatRow, size)
	if err != nil {
		return perftestLat{}, err
	}
	l := perftestLat{iters: int(row[1]), typical: row[4], p99: row[7], p999: row[8]}
	if l.typical <= 0 || l.p99 < l.typical || l.p999 < l.p99 {
		return l, fmt.Errorf("bench: latency row with t_typical %v, 99%% %v, 99.9%% %v", l.typical, l.p99, l.p999)
	}
	return l, nil
}

// parsePerftestBW reads the BW average of size from a perftest client's
// output, in Gbit/s.
func parsePerftestBW(out string, size int) (gbit float64, iters int, err error) {
	row, err := perftestRow(out, perftestBWRow, size)
	if err != nil {
		return 0, 0, err
	}
	if row[3] <= 0 {
		return 0, 0, fmt.Errorf("bench: bandwidth row with BW average %v", row[3])
	}
	return row[3] * (1 << 20) * 8 / 1e9, int(row[1]), nil
}

// perftestRow finds the last row of pattern for size in out and returns
// its numbers.
func perftestRow(out string, pattern *regexp.Regexp, size int) ([]float64, error) {
	rows := pattern.FindAllStringSubmatch(out, -1)
	for i := len(rows) - 1; i >= 0; i-- {
		vals := make([]float64, len(rows[i])-1)
		for j, s := range rows[i][1:] {
			if s == "-nan" {
				s = "nan" // printf's NaN with its sign bit set
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("bench: perftest row %q: %w", strings.TrimSpace(rows[i][0]), err)
			}
			vals[j] = v
		}
		if int(vals[0]) != size {
			continue
		}
		if vals[1] <= 0 {
			return nil, fmt.Errorf("bench: perftest row %q: no iterations", strings.TrimSpace(rows[i][0]))
		}
		return vals, nil
	}
	return nil, fmt.Errorf("bench: no perftest result row for %d bytes in:\n%s", size, tail(out, 2000))
}

// stockArgv is the command line of one side of a perftest exchange:
// through `xdproce run` with the stock binary (whose -d names the device),
// or `xdproce perf` (whose -d names the interface). Without -d, xdproce run
// uses the daemon already running. server is "" on the server's side.
func stockArgv(exe, contender, tool, link string, port int, args []string, server string) []string {
	var argv []string
	switch contender {
	case report.PerftestLibibverbs:
		argv = []string{exe, "run", "--", tool, "-d", "xdp_" + link}
	default:
		// Memory of its own, as stock perftest's: both sides then take the
		// daemon's process_vm_readv/writev path, and what differs is the
		// library's posts and polls.
		argv = []string{exe, "perf", tool, "-d", link, "--own-memory"}
	}
	// GID 1 is the interface's IPv4 address; -F: do not fail on the CPU
	// frequency check (stock perftest reads /proc/cpuinfo, xdproce perf
	// accepts it).
	argv = append(argv, "-x", "1", "-F", "-p", strconv.Itoa(port))
	argv = append(argv, args...)
	if server != "" {
		argv = append(argv, server)
	}
	return argv
}

// stockRunner runs the comparison's processes in the hosts' namespaces.
type stockRunner struct {
	s     Stock
	hosts [2]*Host
	port  int     // the next run's out-of-band port
	ups   []*proc // the daemons (xdproce up) while they run
	// runTimeout bounds one exchange; serverTimeout how long a server may
	// take to listen, and to finish once its client has.
	runTimeout, serverTimeout time.Duration
}

func newStockRunner(s Stock, hosts [2]*Host) *stockRunner {
	return &stockRunner{s: s, hosts: hosts, port: s.Port, runTimeout: 2 * time.Minute, serverTimeout: 15 * time.Second}
}

// exchange runs tool with args as server in host B and client in host A,
// with contender's program, and returns the client's output.
func (r *stockRunner) exchange(ctx context.Context, contender, tool string, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.runTimeout)
	defer cancel()
	port := r.port
	r.port++
	name := contender + " " + tool
	// Without its daemon, xdproce perf would open a device of its own and
	// measure something else: check before and after.
	if err := r.daemonsAlive(); err != nil {
		return "", err
	}
	out, err := r.exchangeOnce(ctx, name, contender, tool, port, args)
	return out, errors.Join(err, r.daemonsAlive())
}

// daemonsAlive fails if a daemon has exited.
func (r *stockRunner) daemonsAlive() error {
	for _, p := range r.ups {
		select {
		case <-p.done:
			return fmt.Errorf("bench: %s has exited: %v\n%s", p.what, p.exit(), tail(p.out.String(), 2000))
		default:
		}
	}
	return nil
}

func (r *stockRunner) exchangeOnce(ctx context.Context, name, contender, tool string, port int, args []string) (string, error) {
	a, b := r.hosts[0], r.hosts[1]
	srv, err := startProc(b, name+" server", stockArgv(r.s.Exe, contender, tool, b.Link, port, args, ""), r.env())
	if err != nil {
		return "", err
	}
	defer srv.stop(r.serverTimeout) // a no-op once it has exited
	if err := srv.waitListening(ctx, port, r.serverTimeout); err != nil {
		return "", errors.Join(err, srv.stop(r.serverTimeout))
	}
	cli, err := startProc(a, name+" client", stockArgv(r.s.Exe, contender, tool, a.Link, port, args, b.Addr.String()), r.env())
	if err != nil {
		return "", errors.Join(err, srv.stop(r.serverTimeout))
	}
	cerr := cli.wait(ctx, r.serverTimeout)
	var serr error
	if cerr == nil {
		// The server prints its own table once the client's last message
		// has arrived, then exits.
		wctx, wcancel := context.WithTimeout(ctx, r.serverTimeout)
		serr = srv.wait(wctx, r.serverTimeout)
		wcancel()
	} else {
		serr = srv.stop(r.serverTimeout)
	}
	if cerr != nil || serr != nil {
		return "", fmt.Errorf("%s: client %v, server %v\nclient:\n%s\nserver:\n%s", name, cerr, serr,
			tail(cli.out.String(), 2000), tail(srv.out.String(), 2000))
	}
	return cli.out.String(), nil
}

// env is the environment of the comparison's processes: xdproce run finds
// the library in LibDir.
func (r *stockRunner) env() []string {
	return append(os.Environ(), "XDPROCE_LIBDIR="+r.s.LibDir)
}

// daemons starts `xdproce up -d LINK` in each host's namespace, with
// --busy-poll if busy, and waits until both listen. The returned function
// stops them (SIGTERM, then SIGKILL after a bounded wait); on error nothing
// is left running.
func (r *stockRunner) daemons(ctx context.Context, busy bool) (stop func() error, err error) {
	var procs []*proc
	stop = func() error {
		r.ups = nil
		var errs []error
		for _, p := range procs {
			select {
			case <-p.done: // before it was asked to: someone else stopped it, or it failed
				errs = append(errs, fmt.Errorf("bench: %s had exited: %v\n%s", p.what, p.exit(), tail(p.out.String(), 2000)))
				continue
			default:
			}
			if err := p.stop(10 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w\n%s", p.what, err, tail(p.out.String(), 2000)))
			}
		}
		return errors.Join(errs...)
	}
	for _, h := range r.hosts {
		if up, err := daemonListening(h); err != nil || up {
			if err == nil {
				err = fmt.Errorf("bench: a daemon already serves %s in %s: the comparison starts its own", h.Link, h.Name)
			}
			return nil, errors.Join(err, stop())
		}
		argv := []string{r.s.Exe, "up", "-d", h.Link, "--log-level", "warn"}
		if busy {
			argv = append(argv, "--busy-poll")
		}
		p, err := startProc(h, "xdproce up -d "+h.Link, argv, os.Environ())
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		procs = append(procs, p)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i, h := range r.hosts {
		p := procs[i]
		for {
			up, err := daemonListening(h)
			if err != nil {
				return nil, errors.Join(err, stop())
			}
			if up {
				break
			}
			select {
			case <-p.done:
				return nil, errors.Join(fmt.Errorf("bench: %s exited before it listened: %v\n%s", p.what, p.exit(), tail(p.out.String(), 2000)), stop())
			case <-ctx.Done():
				return nil, errors.Join(ctx.Err(), stop())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return nil, errors.Join(fmt.Errorf("bench: %s does not listen after 20 s\n%s", p.what, tail(p.out.String(), 2000)), stop())
			}
		}
	}
	r.ups = procs
	return stop, nil
}

// daemonListening reports whether a daemon listens for h's interface in
// h's namespace (daemon.Running reads the calling thread's table).
func daemonListening(h *Host) (bool, error) {
	var up bool
	err := h.Do(func() error {
		running, err := daemon.Running()
		up = slices.Contains(running, h.Link)
		return err
	})
	return up, err
}

// proc is a process the comparison started in a host's namespace, in its
// own process group (it and what it starts, such as the program xdproce
// run runs, are stopped together).
type proc struct {
	what string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed when it has exited; then err is its exit
	err  error
	once sync.Once
	serr error
}

func startProc(h *Host, what string, argv []string, env []string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out := &tailBuffer{max: 1 << 16}
	cmd.Stdout, cmd.Stderr = out, out
	// SIGTERM if the bench dies: xdproce run passes it on to its program,
	// and a daemon lets go of the interface.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// Output pipes a leftover child would hold open do not hold up Wait.
	cmd.WaitDelay = 5 * time.Second
	if err := h.Do(cmd.Start); err != nil { // forked in the namespace
		return nil, fmt.Errorf("bench: starting %s in %s: %w", what, h.Name, err)
	}
	p := &proc{what: what, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exit describes how the process ended; it has.
func (p *proc) exit() error {
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// wait waits for the process to exit and returns its exit error; if ctx
// ends first it stops the process and says so.
func (p *proc) wait(ctx context.Context, grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return errors.Join(fmt.Errorf("%s: %w", p.what, ctx.Err()), p.stop(grace))
	}
}

// stop ends the process group: SIGTERM, then SIGKILL if the process has
// not exited within grace. Stopping a process that had exited by itself
// is no error (its exit is wait's business).
func (p *proc) stop(grace time.Duration) error {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		pg := -p.cmd.Process.Pid
		if err := syscall.Kill(pg, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			p.serr = fmt.Errorf("stopping %s: %w", p.what, err)
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			if p.err != nil && !terminated(p.err) {
				p.serr = fmt.Errorf("%s: %w", p.what, p.err)
			}
		case <-t.C:
			_ = syscall.Kill(pg, syscall.SIGKILL)
			<-p.done
			p.serr = fmt.Errorf("%s did not stop within %v: killed", p.what, grace)
		}
	})
	return p.serr
}

// terminated reports whether err is the exit of a process that SIGTERM
// ended: killed by it, or exiting with 128+SIGTERM as a shell does.
func terminated(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && (ws.Signaled() && ws.Signal() == syscall.SIGTERM || ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGTERM))
}

// waitListening waits until a TCP socket of the process's namespace
// listens on port: perftest's server is ready for its client. (Connecting
// to find out would make the probe the server's one client.)
func (p *proc) waitListening(ctx context.Context, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if listening(p.cmd.Process.Pid, port) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("bench: %s exited before it listened: %v\n%s", p.what, p.exit(), tail(p.out.String(), 2000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s does not listen on TCP port %d after %v\n%s", p.what, port, timeout, tail(p.out.String(), 2000))
		}
	}
}

// listening reports whether /proc/PID/net/tcp or tcp6 — the sockets of
// PID's network namespace — has a listener on port.
func listening(pid, port int) bool {
	for _, f := range []string{"tcp", "tcp6"} {
		file, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", f))
		if err != nil {
			continue
		}
		found := listenerOn(bufio.NewScanner(file), port)
		file.Close()
		if found {
			return true
		}
	}
	return false
}

// listenerOn scans a /proc/net/tcp table for a socket in state LISTEN
// (0A) whose local port is port.
func listenerOn(sc *bufio.Scanner, port int) bool {
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
			return true
		}
	}
	return false
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// stockGroups are the comparison's two groups: ib_write_lat -s 8 (with
// busy-polling daemons where the run busy-polls its round trips) and
// ib_write_bw -s 64 KiB, each point Rounds times per contender, the
// contenders alternating which goes first; Run takes the medians.
func stockGroups(cfg Config, hosts [2]*Host) []group {
	if cfg.Stock == nil {
		return nil
	}
	s := cfg.Stock.withDefaults(cfg)
	r := newStockRunner(s, hosts)
	latArgs := []string{"-s", strconv.Itoa(report.StockLatSize), "-n", strconv.Itoa(s.LatIters)}
	bwArgs := []string{"-s", strconv.Itoa(report.StockBWSize), "-D", strconv.Itoa(s.BWSeconds)}
	// For the estimate of a run's length: what a run costs besides its
	// measured part (starting two processes, each attaching to its daemon,
	// perftest's exchange; stock perftest's -D runs take about a second
	// longer than asked), and the mean round trip through two daemons that
	// sleep when idle on a 2-core VM.
	const overhead, meanRTT = 800 * time.Millisecond, 250 * time.Microsecond
	lat := func(contender string, round int) step {
		return step{what: fmt.Sprintf("%s %s %s, round %d of %d", stockName(contender), report.StockLatTool, report.FormatSize(report.StockLatSize), round, s.Rounds),
			run: func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
				out, err := r.exchange(ctx, contender, report.StockLatTool, latArgs)
				if err != nil {
					return nil, "", err
				}
				l, err := parsePerftestLat(out, report.StockLatSize)
				if err != nil {
					return nil, "", err
				}
				res := l.roundTrip(contender, report.StockLatSize)
				return []report.Result{res}, fmt.Sprintf("t_typical %.2f µs, round trip %.2f µs (%d iterations)", l.typical, res.P50us, l.iters), nil
			}}
	}
	bw := func(contender string, round int) step {
		return step{what: fmt.Sprintf("%s %s %s, round %d of %d", stockName(contender), report.StockBWTool, report.FormatSize(report.StockBWSize), round, s.Rounds),
			run: func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
				out, err := r.exchange(ctx, contender, report.StockBWTool, bwArgs)
				if err != nil {
					return nil, "", err
				}
				g, iters, err := parsePerftestBW(out, report.StockBWSize)
				if err != nil {
					return nil, "", err
				}
				return []report.Result{{Contender: contender, Measure: report.Bandwidth, Op: report.OpWrite, Size: report.StockBWSize, GbitS: g}},
					fmt.Sprintf("%.2f Gbit/s (%d iterations in %d s)", g, iters, s.BWSeconds), nil
			}}
	}
	alternate := func(mk func(string, int) step) []step {
		var steps []step
		for i := range s.Rounds {
			pair := []string{report.XdprocePerf, report.PerftestLibibverbs}
			if i%2 == 1 {
				pair[0], pair[1] = pair[1], pair[0]
			}
			for _, c := range pair {
				steps = append(steps, mk(c, i+1))
			}
		}
		return steps
	}
	var groups []group
	if slices.Contains(cfg.LatSizes, report.StockLatSize) {
		groups = append(groups, group{stock: r, rtt: true, plain: alternate(lat), est: overhead + time.Duration(s.LatIters)*meanRTT})
	}
	if s.DaemonModes && slices.Contains(cfg.LatSizes, report.StockLatSize) {
		// Issue 34: the same tool through daemons with their defaults and
		// through busy-polling daemons, alternating; each step starts its
		// own pair, the first default pair measured idle first.
		var steps []step
		for i := range s.Rounds {
			modes := []bool{false, true}
			if i%2 == 1 {
				modes[0], modes[1] = true, false
			}
			for _, busy := range modes {
				idle := time.Duration(0)
				if i == 0 && !busy && s.IdleWindow > 0 {
					idle = s.IdleWindow
				}
				steps = append(steps, r.daemonLatStep(busy, i+1, latArgs, idle))
			}
		}
		// Each point also starts two daemons, and one waits IdleWindow.
		groups = append(groups, group{stock: r, rtt: true, ownDaemons: true, plain: steps,
			est: overhead + 2*time.Second + time.Duration(s.LatIters)*meanRTT + max(s.IdleWindow, 0)/time.Duration(len(steps))})
	}
	if slices.Contains(cfg.Sizes, report.StockBWSize) {
		groups = append(groups, group{stock: r, plain: alternate(bw), est: overhead + time.Duration(s.BWSeconds)*time.Second})
	}
	return groups
}

// daemonLatStep is one round of issue 34's comparison: stock ib_write_lat
// through a pair of daemons it starts, busy-polling (--busy-poll) or with
// their defaults, and stops. With idle, it first leaves the fresh daemons
// alone that long and reports the CPU they took (XdproceDaemon's IdleCPU).
func (r *stockRunner) daemonLatStep(busy bool, round int, latArgs []string, idle time.Duration) step {
	contender, how := report.PerftestDefaultDaemons, "default"
	if busy {
		contender, how = report.PerftestBusyDaemons, "busy-polling"
	}
	return step{what: fmt.Sprintf("stock perftest over libibverbs: %s %s through %s daemons, round %d of %d", report.StockLatTool, report.FormatSize(report.StockLatSize), how, round, r.s.Rounds),
		run: func(ctx context.Context, _ *rnicPair) ([]report.Result, string, error) {
			stop, err := r.daemons(ctx, busy)
			if err != nil {
				return nil, "", err
			}
			var res []report.Result
			note := ""
			if idle > 0 {
				pct, err := r.idleCPU(ctx, idle)
				if err != nil {
					return nil, "", errors.Join(err, stop())
				}
				res = append(res, report.Result{Contender: report.XdproceDaemon, Measure: report.IdleCPU, Op: report.OpIdle, CPUPct: pct})
				note = fmt.Sprintf("; before it, each idle daemon took %.2f%% of a CPU over %v", pct, idle)
			}
			out, err := r.exchange(ctx, report.PerftestLibibverbs, report.StockLatTool, latArgs)
			if err = errors.Join(err, stop()); err != nil {
				return nil, "", err
			}
			l, err := parsePerftestLat(out, report.StockLatSize)
			if err != nil {
				return nil, "", err
			}
			rt := l.roundTrip(contender, report.StockLatSize)
			return append(res, rt), fmt.Sprintf("t_typical %.2f µs, round trip %.2f µs (%d iterations)%s", l.typical, rt.P50us, l.iters, note), nil
		}}
}

// idleCPU leaves the running daemons alone for window and returns the CPU
// each took meanwhile, on average, in percent of one CPU: user+system time
// from /proc/PID/stat, every thread's.
func (r *stockRunner) idleCPU(ctx context.Context, window time.Duration) (float64, error) {
	if len(r.ups) == 0 {
		return 0, errors.New("bench: no daemons to measure idle")
	}
	sample := func() (time.Duration, error) {
		var sum time.Duration
		for _, p := range r.ups {
			t, err := procCPU(p.cmd.Process.Pid)
			if err != nil {
				return 0, err
			}
			sum += t
		}
		return sum, nil
	}
	before, err := sample()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(window):
	}
	after, err := sample()
	if err != nil {
		return 0, err
	}
	if err := r.daemonsAlive(); err != nil {
		return 0, err
	}
	return 100 * float64(after-before) / float64(time.Since(start)) / float64(len(r.ups)), nil
}

// procCPU is the CPU time process pid's threads have taken, from each
// one's /proc/PID/task/TID/schedstat (ns, where /proc/PID/stat counts
// 10 ms ticks: a daemon at 1% of a CPU takes 30 of them in 3 s).
func procCPU(pid int) (time.Duration, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread has exited
		}
		if err != nil {
			return 0, fmt.Errorf("bench: %w", err)
		}
		d, err := parseSchedstat(b)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// parseSchedstat reads the time on CPU, the first of a schedstat line's
// three numbers (ns on CPU, ns waiting on a run queue, time slices).
func parseSchedstat(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, fmt.Errorf("bench: schedstat %q: want 3 numbers", strings.TrimSpace(string(b)))
	}
	ns, err := strconv.ParseUint(f[0], 10, 63)
	if err != nil {
		return 0, fmt.Errorf("bench: schedstat: %w", err)
	}
	return time.Duration(ns), nil
}

// stockName is a contender as the progress lines name it.
func stockName(contender string) string {
	switch contender {
	case report.PerftestLibibverbs:
		return "stock perftest over libibverbs:"
	case report.PerftestDefaultDaemons:
		return "stock perftest through default daemons:"
	case report.PerftestBusyDaemons:
		return "stock perftest through busy-polling daemons:"
	}
	return "xdproce perf:"
}

// medianOfRounds replaces the figures of each key in rs by one whose every
// value is the median of theirs, in the order the keys first appear.
func medianOfRounds(rs []report.Result) []report.Result {
	var keys []report.Key
	byKey := map[report.Key][]report.Result{}
	for _, r := range rs {
		k := report.KeyOf(r)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	out := make([]report.Result, 0, len(keys))
	for _, k := range keys {
		group := byKey[k]
		m := group[0]
		med := func(field func(report.Result) float64) float64 {
			v := make([]float64, len(group))
			for i, r := range group {
				v[i] = field(r)
			}
			return median(v)
		}
		m.GbitS = med(func(r report.Result) float64 { return r.GbitS })
		m.P50us = med(func(r report.Result) float64 { return r.P50us })
		m.P99us = med(func(r report.Result) float64 { return r.P99us })
		m.P999us = med(func(r report.Result) float64 { return r.P999us })
		m.MmsgS = med(func(r report.Result) float64 { return r.MmsgS })
		m.CPUSPerGB = med(func(r report.Result) float64 { return r.CPUSPerGB })
		m.CPUPct = med(func(r report.Result) float64 { return r.CPUPct })
		out = append(out, m)
	}
	return out
}

// roundsSummary describes the spread of each figure of a stock group over
// its rounds, one line per contender and point: what a difference of
// medians is worth on a noisy machine.
func roundsSummary(rs []report.Result) []string {
	var out []string
	for _, m := range medianOfRounds(rs) {
		var v []float64
		for _, r := range rs {
			if report.KeyOf(r) == report.KeyOf(m) {
				if r.Measure == report.RTT {
					v = append(v, r.P50us)
				} else {
					v = append(v, r.GbitS)
				}
			}
		}
		lo, hi := slices.Min(v), slices.Max(v)
		tool, what, unit, mid := report.StockBWTool, "BW average", "Gbit/s", m.GbitS
		if m.Measure == report.RTT {
			tool, what, unit, mid = report.StockLatTool, "round trip", "µs", m.P50us
		}
		out = append(out, fmt.Sprintf("%s %s %s %s from %s to %s %s over %d rounds, median %s",
			stockName(m.Contender), tool, report.FormatSize(m.Size), what, report.FormatValue(lo, true), report.FormatValue(hi, true), unit, len(v), report.FormatValue(mid, true)))
	}
	return out
}

// median of v (sorted in place): the middle value, or the mean of the two
// middle ones.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
