// Command interop checks that "xdproce perf" interoperates with stock
// perftest 4.5 on Linux Soft-RoCE (rdma_rxe): it boots rxe-peer VMs, runs
// every test with xdproce as the server and as the client, plus an rxe↔rxe
// reference and data-integrity cells (integrity.go), and prints a pass/fail
// matrix with the figures. The lib cells (lib.go) run stock perftest and
// rdma-core's ping-pong examples on the host over xdproce's libibverbs
// (xdproce run) against the same tools on rxe.
//
//	sudo go run ./test/interop [--smoke | --loss-sweep] [--only REGEX] [--json FILE] [--keep]
//
// It needs root (network namespaces, XDP, QEMU). See test/interop/rxe-peer.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/test/interop/integrity"
	"github.com/xdproce/xdproce/test/interop/proc"
)

type options struct {
	smoke    bool
	sweep    bool
	keep     bool
	list     bool
	verbose  bool
	only     *regexp.Regexp
	jsonPath string
	xdproce  string
	rxePeer  string
	bwIters  int
	latIters int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "interop:", err)
		return 2
	}
	cells := selectCells(buildMatrix(matrixConfig{Smoke: opts.smoke, LossSweep: opts.sweep, BWIters: opts.bwIters, LatIters: opts.latIters}), opts.only)
	if opts.list {
		for _, c := range cells {
			a := proc.ShellJoin(c.args())
			if c.cmTool() {
				a = c.toolListArgs()
			}
			if len(c.LibOpts) > 0 {
				a += "  (lib side: " + proc.ShellJoin(c.LibOpts) + ")"
			}
			fmt.Fprintf(stdout, "%-50s %s\n", c.ID(), a)
		}
		return 0
	}
	if len(cells) == 0 {
		fmt.Fprintln(stderr, "interop: no cell matches --only")
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "interop: must run as root (network namespaces, XDP, QEMU); try sudo or make interop")
		return 2
	}
	h := newHarness(opts, stdout)
	results, err := h.runAll(ctx, cells)
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		printTable(stdout, results)
		printGuestTable(stdout, results, h.datapath)
	}
	if opts.jsonPath != "" {
		if werr := writeJSON(opts.jsonPath, results); werr != nil {
			fmt.Fprintln(stderr, "interop:", werr)
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "interop:", err)
		return 1
	}
	// The summary is the plain "N passed, N failed" line that test runners
	// and CI read.
	var failed, refFailed int
	for _, r := range results {
		switch {
		case r.Status == statusFail && r.Reference:
			refFailed++
		case r.Status == statusFail:
			failed++
		}
	}
	if refFailed > 0 {
		fmt.Fprintf(stdout, "\n%d rxe<->rxe reference cells failed: stock rxe against itself, not counted\n", refFailed)
	}
	fmt.Fprintf(stdout, "\ninterop: %d passed, %d failed, %d skipped\n",
		countStatus(results, statusPass), failed, countStatus(results, statusSkipped))
	if failed > 0 {
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var only string
	fs := flag.NewFlagSet("interop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.smoke, "smoke", false, "only ib_write_bw and ib_send_lat, both directions, MTU 4096, with xdproce perf and with stock perftest on xdproce's libibverbs, and one guest cell (CI)")
	fs.BoolVar(&o.sweep, "loss-sweep", false, "instead: send/write/read/atomic bandwidth at 4 KiB and 64 KiB under 0, 0.1%, 1% and 5% netem loss, xdproce both roles and rxe<->rxe (issue 17)")
	fs.StringVar(&only, "only", "", "run only the cells whose ID matches this regexp (see --list)")
	fs.StringVar(&o.jsonPath, "json", "", "write the results to this file")
	fs.BoolVar(&o.keep, "keep", false, "leave the VMs and the netns up at the end (debugging)")
	fs.BoolVar(&o.list, "list", false, "print the selected cells and exit")
	fs.BoolVar(&o.verbose, "v", false, "trace every command")
	fs.StringVar(&o.xdproce, "xdproce", "", "xdproce binary (default bin/xdproce of the repository, built if missing)")
	fs.StringVar(&o.rxePeer, "rxe-peer", "", "rxe-peer script (default test/interop/rxe-peer/rxe-peer of the repository)")
	fs.IntVar(&o.bwIters, "iters", 0, "-n of the bandwidth tests (default 25, smoke 20)")
	fs.IntVar(&o.latIters, "lat-iters", 0, "-n of the latency tests (default 200, smoke 100)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return o, fmt.Errorf("--only: %w", err)
		}
		o.only = re
	}
	// Small -n keeps a sweep within minutes under emulation.
	if o.bwIters == 0 {
		o.bwIters = 25
		if o.smoke {
			o.bwIters = 20
		}
	}
	if o.latIters == 0 {
		o.latIters = 200
		if o.smoke {
			o.latIters = 100
		}
	}
	if o.bwIters < 1 || o.latIters < 1 {
		return o, errors.New("--iters and --lat-iters must be positive")
	}
	return o, nil
}

func selectCells(cells []cell, only *regexp.Regexp) []cell {
	if only == nil {
		return cells
	}
	var sel []cell
	for _, c := range cells {
		if only.MatchString(c.ID()) {
			sel = append(sel, c)
		}
	}
	return sel
}

// harness holds what the cells share: the tools and the output.
type harness struct {
	opts     options
	out      io.Writer
	root     string
	xdproce  string
	peer     *rxePeer
	xdpErr   error // why xdproce cannot run, if it cannot
	libErr   error // why the lib cells cannot run (xdproce run, libibverbs.so.1, the stock tools)
	cmLibErr error // why the rdma_cm lib cells cannot run (librdmacm.so.1)
	// fabricErr: why the libfabric cells cannot run (libfabric in the VMs).
	fabricErr error
	perfCM    bool // xdproce perf has an rdma_cm mode (-R)
	pingpong  bool // xdproce perf has an rc_pingpong mode
	// guests: VMs switched from rxe to xdproce (true) or back (false);
	// absent: rxe, as booted. datapath: what xdproce ran with in each.
	guests   map[int]bool
	datapath map[int]string
}

func newHarness(opts options, out io.Writer) *harness {
	h := &harness{opts: opts, out: out, root: repoRoot(), guests: map[int]bool{}, datapath: map[int]string{}}
	h.xdproce = opts.xdproce
	if h.xdproce == "" {
		h.xdproce = filepath.Join(h.root, "bin", "xdproce")
	}
	script := opts.rxePeer
	if script == "" {
		script = filepath.Join(h.root, "test", "interop", "rxe-peer", "rxe-peer")
	}
	h.peer = &rxePeer{script: script, logf: h.logf}
	return h
}

// logf prints a trace line with -v.
func (h *harness) logf(format string, args ...any) {
	if h.opts.verbose {
		// One line per command: the VM-side scripts span several.
		msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ⏎ ")
		fmt.Fprintf(h.out, "    %s\n", msg)
	}
}

func (h *harness) progress(format string, args ...any) {
	fmt.Fprintf(h.out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// runAll sets up the peer, runs the cells and always tears down (unless
// --keep), also after an error, a panic or Ctrl-C.
func (h *harness) runAll(ctx context.Context, cells []cell) (results []result, err error) {
	release, err := acquireRunLock(ctx, runLockPath, h.progress)
	if err != nil {
		return nil, err
	}
	defer release()
	if !h.opts.keep {
		defer func() {
			if terr := h.teardown(); terr != nil {
				err = errors.Join(err, terr)
			}
		}()
	}
	vms, needXDP := 0, false
	for _, c := range cells {
		vms = max(vms, c.Server.vm(), c.Client.vm())
		needXDP = needXDP || c.hasXDP()
	}
	if err := h.setup(ctx, vms, needXDP, libTools(cells), libCM(cells)); err != nil {
		return nil, err
	}
	h.fabricErr = h.installFabric(ctx, fabricVMs(cells))
	if h.fabricErr != nil {
		h.progress("no libfabric in the VMs, the libfabric cells fail: %v", h.fabricErr)
	}

	netem := ""
	defer func() {
		if netem != "" {
			// Only matters with --keep; teardown discards the VMs anyway.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if _, nerr := h.peer.run(cctx, time.Minute, "netem", "1", "off"); nerr != nil {
				err = errors.Join(err, nerr)
			}
		}
	}()
	for i, c := range cells {
		if ctx.Err() != nil {
			return results, fmt.Errorf("interrupted before %s", c.ID())
		}
		if c.Loss != netem {
			var err error
			if c.Loss != "" {
				h.progress("netem on VM 1: loss %s", c.Loss)
				_, err = h.peer.run(ctx, time.Minute, "netem", "1", "loss", c.Loss)
			} else {
				h.progress("netem on VM 1: off")
				err = h.losslessQdisc(ctx, 1)
			}
			if err != nil {
				return results, err
			}
			netem = c.Loss
		}
		prefix := fmt.Sprintf("[%2d/%d] %-50s", i+1, len(cells), c.ID())
		var r result
		guestErr := h.prepareGuests(ctx, c)
		switch {
		case guestErr != nil:
			r = newResult(c)
			r.Status, r.Reason = statusFail, guestErr.Error()
		case c.Tool == integrity.IntegrityTool: // in-process: needs no xdproce binary
			h.progress("%s %s ...", prefix, c.Direction())
			r = h.runIntegrity(ctx, c)
		case c.hasXDP() && h.xdpErr != nil:
			r = newResult(c)
			r.Status, r.Reason = statusFail, h.xdpErr.Error()
		case c.libCell() && h.libErr != nil:
			r = newResult(c)
			r.Status, r.Reason = statusFail, h.libErr.Error()
		case c.libCell() && c.needsRDMACM() && h.cmLibErr != nil:
			r = newResult(c)
			r.Status, r.Reason = statusFail, h.cmLibErr.Error()
		case isFabricTool(c.Tool) && h.fabricErr != nil:
			r = newResult(c)
			r.Status, r.Reason = statusFail, h.fabricErr.Error()
		case c.hostXDP() && c.rdmaCM() && !h.perfCM:
			r = newResult(c)
			r.Status, r.Reason = statusSkipped, "skipped: xdproce perf has no rdma_cm mode (-R)"
		case c.hostXDP() && c.Tool == pingpong && !h.pingpong:
			r = newResult(c)
			r.Status, r.Reason = statusSkipped, "skipped: xdproce has no rc_pingpong mode"
		default:
			h.progress("%s %s ...", prefix, c.Direction())
			r = h.runCell(ctx, i+1, c)
			if miscalibrated(r) {
				// perftest measured nothing: its clock calibration failed
				// in the emulated guest. That says nothing about the
				// transport, so the cell runs once more.
				h.progress("%s perftest's clock calibration failed (%s); once more ...", prefix, calibrationWarning)
				r = h.runCell(ctx, i+1, c)
			}
			for try := 2; try <= listenRaceTries && perftestListenRace(c, r); try++ {
				// Stock perftest -R's own race (its data connection's request
				// before its server listens, then a crash in its retry path):
				// it says nothing about the transport either.
				h.progress("%s stock perftest's rdma_cm listen race; try %d ...", prefix, try)
				r = h.runCell(ctx, i+1, c)
				r.Reason = strings.TrimPrefix(r.Reason+fmt.Sprintf("; stock perftest's listen race, try %d", try), "; ")
			}
		}
		results = append(results, r)
		h.progress("%s %s", prefix, summary(r))
		if r.Status == statusFail && r.Server != nil {
			h.printSides(r)
		}
	}
	return results, nil
}

// listenRaceTries is how often a cell that lost stock perftest's listen
// race runs in all. A fast client (stock perftest on xdproce's libraries
// on the host, against rxe's server in a guest) loses about every other
// try of ib_write_lat -R, so three tries lost a whole run's verdict once.
const listenRaceTries = 8

// perftestListenRace reports whether a stock perftest -R client failed as
// Debian's perftest 4.5-0.17 does when its data connection's request (or
// SIDR lookup) reaches the server before the server listens: the server
// creates its data listener only after its side of a hand shake the client
// leaves at the same moment; the client then fails to handle the rejection
// or crashes in its retry path (with rxe on both ends as well, rarely: the
// emulated guests are slow to send it).
func perftestListenRace(c cell, r result) bool {
	if r.Status != statusFail || !c.rdmaCM() || c.hostXDP() && c.Client == xdp || r.Client == nil {
		return false
	}
	out := r.Client.Output
	return r.Client.Exit == 139 || strings.Contains(out, "Failed to handle RDMA CM event") ||
		strings.Contains(out, "RDMA_CM_EVENT_REJECTED; error: 8") || strings.Contains(out, "RDMA_CM_EVENT_UNREACHABLE; error: 1")
}

// losslessQdisc gives VM vm's eth0 a plain FIFO. The guest's default,
// fq_codel, drops the bursts an emulated CPU sends late (its 5 ms target):
// a READ response of 8 MiB at path MTU 1024 lost thousands of packets and
// every requester, rxe's too, then retransmits go-back-N. RoCE fabrics are
// lossless or ECN-marked, never CoDel-dropped; the loss cells add netem's
// loss on purpose instead.
func (h *harness) losslessQdisc(ctx context.Context, vm int) error {
	_, err := h.peer.exec(ctx, time.Minute, vm, "tc qdisc replace dev eth0 root pfifo limit 10000")
	if err != nil {
		return fmt.Errorf("VM %d: a FIFO qdisc on eth0: %w", vm, err)
	}
	return nil
}

const (
	// guestBinary is where xdproce is copied to in a guest.
	guestBinary = "/usr/local/bin/xdproce"
	// guestXDPMTU is the guest's link MTU while xdproce runs there: what
	// native XDP on virtio-net allows, with room for PMTU 2048.
	guestXDPMTU = 3000
	// vmMTU is the VMs' link MTU as booted (rxe-peer's default), for rxe.
	vmMTU = 9000
)

// prepareGuests puts each VM of the cell in the mode it needs: rxe for
// stock perftest, or rdma_rxe unloaded and xdproce copied in for xdproce
// in the guest (both want UDP 4791).
func (h *harness) prepareGuests(ctx context.Context, c cell) error {
	for _, e := range []endpoint{c.Server, c.Client} {
		vm := e.vm()
		if vm == 0 || h.guests[vm] == e.guest() {
			continue
		}
		if !e.guest() {
			h.progress("VM %d: rdma_rxe back", vm)
			if _, err := h.peer.exec(ctx, time.Minute, vm, fmt.Sprintf("ip link set eth0 mtu %d && modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0", vmMTU)); err != nil {
				return fmt.Errorf("VM %d: loading rxe again: %w", vm, err)
			}
			h.guests[vm] = false
			continue
		}
		if h.xdpErr != nil {
			return h.xdpErr
		}
		h.progress("VM %d: rdma_rxe unloaded, xdproce copied in", vm)
		if _, err := h.peer.run(ctx, 2*time.Minute, "cp", fmt.Sprint(vm), h.xdproce, ":"+guestBinary); err != nil {
			return fmt.Errorf("VM %d: copying xdproce: %w", vm, err)
		}
		// virtio-net on 6.1 takes native XDP only up to an MTU of about
		// 3500 (a frame per page); PMTU 2048 needs less. It then warns that
		// with one queue pair XDP_TX shares a locked queue: xdproce does
		// not use XDP_TX (its program redirects to AF_XDP or passes), and
		// with two queue pairs on a multi-queue tap some cells hung.
		if _, err := h.peer.exec(ctx, time.Minute, vm, fmt.Sprintf("rdma link delete rxe0; modprobe -r rdma_rxe && ip link set eth0 mtu %d", guestXDPMTU)); err != nil {
			return fmt.Errorf("VM %d: unloading rxe: %w", vm, err)
		}
		// Say which mode the guest's port runs in (devinfo probes it).
		out, err := h.peer.exec(ctx, time.Minute, vm, guestBinary+" devinfo --dev "+guestIface+" | sed -n 's/^[[:space:]]*datapath:[[:space:]]*//p'")
		if err != nil {
			return fmt.Errorf("VM %d: xdproce devinfo: %w", vm, err)
		}
		h.datapath[vm] = strings.TrimSpace(out)
		h.progress("VM %d: xdproce runs with %s", vm, h.datapath[vm])
		h.guests[vm] = true
	}
	return nil
}

// setup makes sure the image exists, boots the VMs, adds the veth and
// checks the xdproce binary, and for the lib cells (running libTools) its
// library and the host's stock tools.
func (h *harness) setup(ctx context.Context, vms int, needXDP bool, libTools []string, libCM bool) error {
	h.progress("rxe-peer build (reuses the cached image; a fresh build takes minutes)")
	if _, err := h.peer.run(ctx, 45*time.Minute, "build"); err != nil {
		return err
	}
	h.progress("rxe-peer up %d (about a minute per VM under emulation)", vms)
	if _, err := h.peer.run(ctx, 15*time.Minute, "up", fmt.Sprint(vms)); err != nil {
		return err
	}
	for vm := 1; vm <= vms; vm++ {
		if err := h.losslessQdisc(ctx, vm); err != nil {
			return err
		}
	}
	if !needXDP {
		return nil
	}
	if _, err := h.peer.run(ctx, time.Minute, "veth", hostIface, hostAddr+"/24"); err != nil {
		return err
	}
	h.xdpErr = h.checkXDP(ctx)
	if h.xdpErr != nil {
		h.progress("xdproce unusable, its cells fail: %v", h.xdpErr)
		h.libErr = h.xdpErr
		return nil
	}
	if len(libTools) > 0 {
		h.libErr = h.checkLib(ctx, libTools, libCM)
		if h.libErr != nil {
			h.progress("stock tools on xdproce's libibverbs unusable, the lib cells fail: %v", h.libErr)
		}
	}
	return nil
}

// checkXDP builds the default binary if it is missing and asks it for its
// perf modes.
func (h *harness) checkXDP(ctx context.Context) error {
	if _, err := os.Stat(h.xdproce); err != nil {
		if h.opts.xdproce != "" {
			return fmt.Errorf("--xdproce: %w", err)
		}
		h.progress("building %s", h.xdproce)
		cmd := []string{"go", "build", "-o", h.xdproce, "./cmd/xdproce"}
		out, err := proc.Run(ctx, 10*time.Minute, "sh", "-c", "cd "+proc.ShellQuote(h.root)+" && CGO_ENABLED=0 "+proc.ShellJoin(cmd))
		if err != nil {
			return fmt.Errorf("go build ./cmd/xdproce: %w\n%s", err, lastLines(out, 10))
		}
	}
	out, _ := proc.Run(ctx, 30*time.Second, h.xdproce, "perf", "--help")
	if strings.Contains(out, "unknown command") || !strings.Contains(out, "ib_write_bw") {
		return fmt.Errorf("%s has no perf command (perf --help: %s)", h.xdproce, firstLine(out))
	}
	h.pingpong = strings.Contains(out, "rc_pingpong")
	// The flags are listed under a tool's help.
	toolHelp, _ := proc.Run(ctx, 30*time.Second, h.xdproce, "perf", "ib_send_bw", "--help")
	h.perfCM = perfHasRDMACM(toolHelp)
	return nil
}

// perfHasRDMACM reads xdproce perf --help: its -R flag, unless that says
// it is not supported.
func perfHasRDMACM(help string) bool {
	lines := strings.Split(help, "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) == 0 || f[0] != "-R" {
			continue
		}
		text := l
		if i+1 < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "-") {
			text += lines[i+1] // the usage under the flag
		}
		return !strings.Contains(text, "not supported")
	}
	return false
}

// teardown runs rxe-peer down, bounded and immune to the cancelled context.
func (h *harness) teardown() error {
	h.progress("rxe-peer down")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := h.peer.run(ctx, 3*time.Minute, "down")
	return err
}

// printSides shows the end of both outputs of a failed cell.
func (h *harness) printSides(r result) {
	for _, s := range []struct {
		name string
		sd   *side
	}{{"server", r.Server}, {"client", r.Client}} {
		if s.sd == nil || (s.sd.Output == "" && s.sd.Cmd == "") {
			continue
		}
		fmt.Fprintf(h.out, "    %s (%s, exit %d): %s\n", s.name, s.sd.Endpoint, s.sd.Exit, s.sd.Cmd)
		if s.sd.Output != "" {
			for _, l := range strings.Split(lastLines(s.sd.Output, 8), "\n") {
				fmt.Fprintf(h.out, "      | %s\n", l)
			}
		}
	}
}

// repoRoot is the enclosing Go module's directory, or "." when there is none.
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func writeJSON(path string, results []result) error {
	b, err := json.MarshalIndent(struct {
		Time    time.Time `json:"time"`
		Results []result  `json:"results"`
	}{time.Now().UTC(), results}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}
