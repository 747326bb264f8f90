package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xdproce/xdproce/test/interop/integrity"
	"github.com/xdproce/xdproce/test/interop/proc"
)

// side is what one endpoint of a cell did.
type side struct {
	Endpoint string `json:"endpoint"`
	Cmd      string `json:"cmd"`
	Exit     int    `json:"exit"`
	Error    string `json:"error,omitempty"`
	Output   string `json:"output"`
	// Stopped: a server that never exits by itself (rping -P, qperf) was
	// still serving after its client, and the harness stopped it.
	Stopped bool `json:"stopped,omitempty"`
}

// result is the outcome of one cell, as printed and written to --json.
type result struct {
	ID        string `json:"id"`
	Tool      string `json:"tool"`
	Options   string `json:"options,omitempty"` // what sets the cell apart: its options, the lib side's after "lib:"
	Direction string `json:"direction"`
	MTU       int    `json:"mtu"`
	Sizes     string `json:"sizes"`
	QPs       int    `json:"qps"`
	Loss      string `json:"loss,omitempty"`
	// Reference cells run stock rxe against itself: figures to compare
	// with, not a check of xdproce, so their failures do not fail the run.
	Reference bool    `json:"reference,omitempty"`
	Status    string  `json:"status"` // pass, fail, skipped
	Reason    string  `json:"reason,omitempty"`
	BWGbps    float64 `json:"bw_avg_gbps,omitempty"`  // BW average of the largest size
	TypicalUs float64 `json:"t_typical_us,omitempty"` // latency tests and ping-pong
	Seconds   float64 `json:"seconds"`
	Figure    string  `json:"figure,omitempty"` // the tool cells' count: pings, cycles, connections

	BWRows   []bwRow           `json:"bw_rows,omitempty"`
	LatRows  []latRow          `json:"lat_rows,omitempty"`
	Pingpong *pingpongResult   `json:"pingpong,omitempty"`
	Checks   []integrity.Check `json:"checks,omitempty"` // integrity cells
	Server   *side             `json:"server,omitempty"`
	Client   *side             `json:"client,omitempty"`
}

const (
	statusPass    = "pass"
	statusFail    = "fail"
	statusSkipped = "skipped"
)

func newResult(c cell) result {
	sizes := c.Size
	switch {
	case sizes == allSizes:
		sizes = "2..8388608"
	case c.Tool == integrity.IntegrityTool:
		sizes = fmt.Sprintf("8..%d", integrity.BigLen)
	case c.cmTool() && sizes == "":
		sizes = "default"
	}
	return result{ID: c.ID(), Tool: c.Tool, Options: c.options(), Direction: c.Direction(), MTU: c.MTU, Sizes: sizes, QPs: c.QPs, Loss: c.Loss,
		Reference: !c.hasXDP()}
}

// options are the options that set the cell apart from its tool's plain
// run, for the table: Opts (a tool cell's tag), then the lib side's LibOpts.
func (c cell) options() string {
	o := proc.ShellJoin(c.Opts)
	if o == "" && c.cmTool() {
		// The tool cells' kinds (rping verify/cycles, rstream
		// blocking/async, fi_pingpong msg/rdm) differ in their tag.
		o = c.Tag
	}
	if len(c.LibOpts) > 0 {
		o = strings.TrimSpace(o + " lib:" + proc.ShellJoin(c.LibOpts))
	}
	return o
}

// runCell runs the server, waits until it listens, runs the client, then
// collects both sides and judges the outputs.
func (h *harness) runCell(ctx context.Context, n int, c cell) (r result) {
	r = newResult(c)
	start := time.Now()
	defer func() { r.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds() }()

	timeout := c.timeout()
	srv := &side{Endpoint: c.Server.String()}
	cli := &side{Endpoint: c.Client.String()}
	r.Server, r.Client = srv, cli

	// Server.
	var (
		vmSrv  *vmServer
		xdpSrv *proc.Background
		err    error
	)
	if c.Tag == fastPathTag {
		detach, err := passOnBridgePort()
		if err != nil {
			r.Status, r.Reason = statusFail, err.Error()
			return r
		}
		defer func() {
			if err := detach(); err != nil {
				r.Status, r.Reason = statusFail, strings.TrimPrefix(r.Reason+"; detaching the XDP pass program: "+err.Error(), "; ")
			}
		}()
	}
	srvArgv := h.argv(c, c.Server, "")
	srv.Cmd = proc.ShellJoin(srvArgv)
	if c.Server.onHost() {
		h.logf("$ ip netns exec %s %s &", netns, srv.Cmd)
		xdpSrv, err = proc.Start(ctx, timeout+30*time.Second, "ip", append([]string{"netns", "exec", netns}, srvArgv...)...)
		switch {
		case err == nil && c.Tool == mckeyTool:
			// The server is ready once its group is joined.
			err = h.waitLibJoined(ctx, xdpSrv, c.mckeyGroup(), 60*time.Second)
		case err == nil && c.Server == lib && c.cmListener():
			// Its rdma_cm listener, as the daemon lists it.
			err = h.waitLibCMListen(ctx, xdpSrv, c.listenPort(), 60*time.Second)
		case err == nil && c.rdmaCM():
			err = h.waitXDPBanner(ctx, xdpSrv, 60*time.Second)
		case err == nil:
			err = h.waitXDPReady(ctx, xdpSrv, c.listenPort(), 60*time.Second)
		}
	} else {
		vmSrv, err = startVMServer(ctx, h.peer, c.Server.vm(), n, c.listenPort(), srvArgv, timeout)
		switch {
		case err == nil && c.Tool == mckeyTool:
			err = vmSrv.waitJoined(ctx, c.mckeyGroup(), 90*time.Second)
		case err == nil && c.cmListener():
			// A stock client takes a refusal for an answer: wait for the
			// listener itself, as rdma_rxe lists it.
			err = vmSrv.waitCMListen(ctx, 90*time.Second)
		case err == nil:
			err = vmSrv.waitReady(ctx, 90*time.Second)
		}
	}
	serverUp := err == nil
	if err != nil {
		srv.Error = err.Error()
	}

	// Client, only once the server listens.
	clientOK := false
	if serverUp {
		cliArgv := h.argv(c, c.Client, serverAddr(c.Server))
		cli.Cmd = proc.ShellJoin(cliArgv)
		var out string
		if c.Client.onHost() {
			h.logf("$ ip netns exec %s %s", netns, cli.Cmd)
			out, err = proc.Run(ctx, timeout, "ip", append([]string{"netns", "exec", netns}, cliArgv...)...)
		} else {
			out, err = h.peer.exec(ctx, timeout, c.Client.vm(), cli.Cmd)
		}
		cli.Output, cli.Exit = out, proc.ExitCode(err)
		if err != nil {
			cli.Error = err.Error()
		}
		clientOK = err == nil
	} else {
		cli.Exit = -1
		cli.Error = "not started: server not ready"
	}

	// Collect the server. A server whose client failed may wait forever for
	// a peer that is gone, so it gets a short grace only.
	grace := 60 * time.Second
	switch {
	case c.persistent():
		// It serves until stopped: time for the last disconnection only.
		grace = c.settle()
	case !clientOK:
		grace = 10 * time.Second
	}
	// Collecting must happen even after Ctrl-C, to leave nothing running.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+2*time.Minute)
	defer cancel()
	switch {
	case xdpSrv != nil:
		out, err := xdpSrv.Finish(grace)
		srv.Output, srv.Exit = out, proc.ExitCode(err)
		srv.Stopped = c.persistent() && xdpSrv.Stopped
		if err != nil && srv.Error == "" && !srv.Stopped {
			srv.Error = err.Error()
		}
	case vmSrv != nil:
		out, code, err := vmSrv.finish(cctx, grace)
		srv.Output, srv.Exit = out, code
		srv.Stopped = c.persistent() && vmSrv.killed
		if err != nil && srv.Error == "" && !srv.Stopped {
			srv.Error = err.Error()
		}
	default:
		srv.Exit = -1
	}

	// xdproce run stops the daemon it started before it exits: one left
	// behind would serve the next cells instead of their own devices.
	var leftover error
	if c.libCell() {
		leftover = h.reapDaemon(cctx)
	}

	if ctx.Err() != nil {
		r.Status, r.Reason = statusFail, "interrupted"
		return r
	}
	judge(c, &r)
	if leftover != nil {
		r.Status = statusFail
		r.Reason = strings.TrimPrefix(r.Reason+"; "+leftover.Error(), "; ")
	}
	return r
}

// argv is the command line of one endpoint; addr is empty for a server.
func (h *harness) argv(c cell, e endpoint, addr string) []string {
	if c.cmTool() {
		// rdma_cm finds the device from the address: no -d.
		a := c.toolArgs(addr)
		if c.Tool == mckeyTool {
			a = c.mckeyArgs(serverAddr(e), addr == "")
		}
		if a[0] != "sh" {
			a = append([]string{"stdbuf", "-oL"}, a...)
		}
		if e == lib {
			a = append([]string{h.xdproce, "run", "-d", hostIface, "--"}, a...)
		}
		return a
	}
	var a []string
	switch {
	case e == xdp:
		a = append([]string{h.xdproce, "perf", c.Tool, "-d", hostIface}, c.XDPOpts...)
	case e == lib:
		// What a user types: xdproce run starts a daemon for the
		// interface (none runs between cells) and stops it when the tool
		// ends. stdbuf as on the VMs, for the lines before a timeout.
		a = []string{h.xdproce, "run", "-d", hostIface, "--", "stdbuf", "-oL", c.Tool, "-d", libDevice}
		a = append(a, c.args()...)
		a = append(a, c.LibOpts...)
		if addr != "" {
			a = append(a, addr)
		}
		return a
	case e.guest():
		a = []string{guestBinary, "perf", c.Tool, "-d", guestIface}
	default:
		// Line-buffered: perftest's stdout is a pipe, and a tool killed by
		// its timeout would otherwise lose exactly the lines that explain why.
		a = []string{"stdbuf", "-oL", c.Tool, "-d", vmDevice}
	}
	a = append(a, c.args()...)
	if addr != "" {
		a = append(a, addr)
	}
	return a
}

func serverAddr(e endpoint) string {
	if e.onHost() {
		return hostAddr
	}
	return vmAddr(e.vm())
}

// waitXDPReady polls until a host-side server (xdproce perf, or a stock
// tool under xdproce run) listens on its OOB port in the netns; it fails
// early when the server exits.
func (h *harness) waitXDPReady(ctx context.Context, p *proc.Background, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			return errors.New("server exited before listening")
		}
		out, err := proc.Run(ctx, 10*time.Second, "ip", "netns", "exec", netns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port))
		if err != nil {
			return fmt.Errorf("probe port %d: %w", port, err)
		}
		if strings.TrimSpace(out) != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not listening on port %d after %v", port, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// waitingBanner is what a perftest server prints before its client comes.
// With -R nothing listens on a TCP port: xdproce perf -R prints it once its
// rdma_cm listener exists; stock perftest just before it listens, and
// xdproce's client tries again while a server does not listen yet.
const waitingBanner = "Waiting for client to connect"

// waitXDPBanner polls until a host-side -R server printed waitingBanner; it
// fails early when the server exits.
func (h *harness) waitXDPBanner(ctx context.Context, p *proc.Background, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Out.String(), waitingBanner) {
		if p.Exited() {
			return errors.New("server exited before listening")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not listening with rdma_cm after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// reports says whether an endpoint in role server/client prints the result
// table for tool (perftest 6.06 behaviour).
func reports(tool string, server bool) bool {
	switch {
	case isPingpong(tool):
		return true
	case strings.HasSuffix(tool, "_bw"):
		// SEND: the server counts receives; WRITE/READ/ATOMIC: the client
		// measures and sends the server its report.
		return true
	default:
		// Latency: read/atomic responders are passive.
		return !server || tool == "ib_send_lat" || tool == "ib_write_lat"
	}
}

// judge sets the status, the reason and the figures of r from both outputs.
func judge(c cell, r *result) {
	defer expectFailure(c, r)
	if c.cmTool() {
		judgeTool(c, r)
		return
	}
	problems := exitProblems(r, nil)
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, s := range []struct {
		server bool
		sd     *side
	}{{true, r.Server}, {false, r.Client}} {
		if !reports(c.Tool, s.server) || s.sd.Exit != 0 {
			continue
		}
		role := "client"
		if s.server {
			role = "server"
		}
		switch {
		case c.isPingpong():
			pp, ok := parsePingpong(s.sd.Output)
			if !ok {
				fail("%s: no \"iters in\" line", role)
				continue
			}
			if r.Pingpong == nil || !s.server {
				r.Pingpong = &pp
				r.TypicalUs = pp.UsecPerIt
			}
		case c.isBW():
			rows := parseBW(s.sd.Output)
			if want := c.expectedRows(s.server); len(rows) != want {
				fail("%s: %d bandwidth rows, want %d", role, len(rows), want)
				continue
			}
			for _, row := range rows {
				if row.AvgGbps <= 0 && row.MsgRateMpps <= 0 {
					fail("%s: zero bandwidth at %d bytes", role, row.Bytes)
				}
			}
			// The largest message is the headline: with small -n the
			// small-message rows are noise (a SEND server measured
			// 16 B at 1.28 Gb/s under TCG).
			lr := rows[len(rows)-1]
			last := lr.AvgGbps
			if last <= 0 {
				// Stock perftest prints small figures with 6 decimals, so
				// "0.00" next to a message rate is a formatting difference.
				fail("%s: BW average printed as 0 at %d bytes (msg rate %g Mpps)", role, lr.Bytes, lr.MsgRateMpps)
			}
			// The server's figures are the ones perftest reports for SEND.
			if r.BWRows == nil || s.server {
				r.BWRows, r.BWGbps = rows, last
			}
		default:
			rows := parseLat(s.sd.Output)
			if want := c.expectedRows(s.server); len(rows) != want {
				fail("%s: %d latency rows, want %d", role, len(rows), want)
				continue
			}
			if !s.server {
				r.LatRows, r.TypicalUs = rows, rows[0].Typical
			} else if r.LatRows == nil {
				r.LatRows, r.TypicalUs = rows, rows[0].Typical
			}
		}
	}
	r.Status = statusPass
	if len(problems) > 0 {
		r.Status, r.Reason = statusFail, strings.Join(problems, "; ")
	}
}

// exitProblems are the sides that did not exit 0, but for those excused
// (may be nil): a persistent server the harness stopped as planned, a
// tool's own known teardown race.
func exitProblems(r *result, excused func(*side) bool) []string {
	var problems []string
	for _, s := range []struct {
		name string
		sd   *side
	}{{"server", r.Server}, {"client", r.Client}} {
		if s.sd.Exit == 0 || excused != nil && excused(s.sd) {
			continue
		}
		// The status says it all for a tool that failed by itself; the
		// error explains timeouts and sides that never ran.
		msg := fmt.Sprintf("%s (%s) exit %d", s.name, s.sd.Endpoint, s.sd.Exit)
		switch {
		case strings.Contains(s.sd.Error, "timed out"):
			msg += " (timed out)"
		case s.sd.Exit < 0 && s.sd.Error != "":
			msg += ": " + firstLine(s.sd.Error)
		}
		problems = append(problems, msg)
	}
	return problems
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// calibrationWarning is what perftest prints when it cannot measure the CPU
// clock it times with (get_cpu_mhz's fit fails, as it sometimes does in an
// emulated guest); its figures are then meaningless, often 0.
const calibrationWarning = "Correlation coefficient r^2"

// miscalibrated says a failed cell's perftest could not time itself.
func miscalibrated(r result) bool {
	if r.Status != statusFail {
		return false
	}
	for _, s := range []*side{r.Server, r.Client} {
		if s != nil && strings.Contains(s.Output, calibrationWarning) {
			return true
		}
	}
	return false
}
