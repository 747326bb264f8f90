package main

// The rdma_cm tool cells: Debian's rdmacm-utils (rping, ucmatose, udaddy)
// and qperf -cm1, run stock on the host over xdproce's drop-in
// librdmacm.so.1 and libibverbs.so.1 (the lib endpoint, through xdproce
// run) against the same tool on rxe in VM 1, both roles, and rxe↔rxe
// between the VMs as the reference that validates the harness. Unlike
// perftest they print no result table: each is judged from its exit
// status and what it prints (judgeTool).

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/xdproce/xdproce/test/interop/proc"
)

// The rdma_cm tools, as cell.Tool (each is the program's name, which
// libTools looks for on the host).
const (
	rpingTool    = "rping"
	ucmatoseTool = "ucmatose"
	udaddyTool   = "udaddy"
	qperfTool    = "qperf"
	mckeyTool    = "mckey"
)

const (
	// rpingSize is rping's default ping size (-S): "rdma-ping-N: "
	// followed by letters, NUL-terminated.
	rpingSize = 64
	// rpingCycles and rpingPings: the connect/disconnect cycles of the
	// cycles cells and the pings of the verify cells (issue 16's -C 1000);
	// the smoke's verify cells ping rpingSmokePings times.
	rpingCycles     = 1000
	rpingPings      = 1000
	rpingSmokePings = 100
	// cmConnections is ucmatose's and udaddy's -c: a few connections (or
	// SIDR lookups) at once.
	cmConnections = 4
	// udaddyPort is udaddy's port, which it has no option for (its -p is
	// the port space).
	udaddyPort = 7174
	// cycleTimeout bounds one rping of the cycles loop.
	cycleTimeout = 30 * time.Second
	// persistentSettle is how long a server that never exits by itself
	// (rping -P, qperf) is given after its client, for the last
	// disconnection to reach it (rping), before the harness stops it.
	persistentSettle = 3 * time.Second
	qperfSettle      = time.Second
)

// qperfUDXFail is why qperf's UD tests fail, on rxe↔rxe too: Debian's
// qperf 0.4.11 connects only RC with the CM, and without it its UD address
// handle has no GRH, which RoCE refuses.
const qperfUDXFail = `qperf 0.4.11 ignores -cm1 for UD ("-cm1 set but not used in test") and makes its UD address handle without a GRH, ` +
	`which RoCE refuses ("failed to create address handle: Invalid argument"): fails rxe<->rxe too`

// isCMTool: one of the rdma_cm tool cells' programs.
func isCMTool(tool string) bool {
	switch tool {
	case rpingTool, ucmatoseTool, udaddyTool, qperfTool, mckeyTool:
		return true
	}
	return isRsocketTool(tool) || isFabricTool(tool)
}

func (c cell) cmTool() bool { return isCMTool(c.Tool) }

// cmListener: the cell's server listens with rdma_cm, on no TCP port
// (perftest -R and the rdmacm-utils; qperf and fi_pingpong have their own
// TCP control port, which they listen on first).
func (c cell) cmListener() bool {
	return c.rdmaCM() || c.cmTool() && c.Tool != qperfTool && c.Tool != mckeyTool && !isFabricTool(c.Tool)
}

// needsRDMACM: a lib cell of this kind loads librdmacm.so.1.
func (c cell) needsRDMACM() bool { return c.rdmaCM() || c.cmTool() }

// persistent: the server serves client after client and never exits by
// itself; the harness stops it after its client (rping -P, qperf).
func (c cell) persistent() bool {
	return c.Tool == qperfTool || c.Tool == rpingTool && c.Tag == "cycles"
}

// settle is how long a persistent server gets after its client before it
// is stopped: the last disconnection must reach rping's; qperf's client
// reports what its server saw.
func (c cell) settle() time.Duration {
	if c.Tool == qperfTool {
		return qperfSettle
	}
	return persistentSettle
}

// listenPort is the port the server listens on: the cell's, except for
// udaddy's fixed one.
func (c cell) listenPort() int {
	if c.Tool == udaddyTool {
		return udaddyPort
	}
	return c.Port
}

// cmToolCells are the rdmacm-utils and qperf cells: for each, rxe↔rxe
// (VM 2 serves VM 1) first, then stock on xdproce's libraries on the host
// as the server and as the client of rxe in VM 1.
func cmToolCells() []cell {
	kinds := []cell{
		// rping -v -V -C 100: each ping is an RDMA READ by the server of
		// the client's buffer and an RDMA WRITE back, which the client
		// compares (-V); both sides' printed data is checked too.
		{Tool: rpingTool, Size: strconv.Itoa(rpingSize), Iters: rpingPings, Tag: "verify"},
		// 1000 connections and disconnections, one ping each, against a
		// persistent server (rping -P).
		{Tool: rpingTool, Size: strconv.Itoa(rpingSize), Iters: rpingCycles, Tag: "cycles"},
		{Tool: ucmatoseTool, QPs: cmConnections, Tag: fmt.Sprintf("c%d", cmConnections)},
		{Tool: udaddyTool, QPs: cmConnections, Tag: fmt.Sprintf("c%d", cmConnections)},
	}
	// mckey: the server joins the group and receives mckey's ten
	// datagrams, the client joins and sends them (mckeyArgs).
	kinds = append(kinds, cell{Tool: mckeyTool, Iters: mckeyMessages, Tag: "join"})
	for _, t := range []string{"rc_bw", "rc_lat", "ud_bw", "ud_lat"} {
		k := cell{Tool: qperfTool, Tag: t}
		if strings.HasPrefix(t, "ud_") {
			k.XFail = qperfUDXFail
		}
		kinds = append(kinds, k)
	}
	kinds = append(kinds, rsocketKinds()...)
	kinds = append(kinds, fabricKinds()...)
	var cells []cell
	for _, k := range kinds {
		for _, d := range [][2]endpoint{{vm2, vm1}, {lib, vm1}, {vm1, lib}} { // {server, client}
			c := k
			// The path MTU rdma_cm picks from both netdevs (9000): the
			// tools take no MTU option.
			c.Server, c.Client, c.MTU = d[0], d[1], 4096
			cells = append(cells, c)
		}
	}
	return cells
}

// toolArgs is the command line of one side of a tool cell (addr is empty
// for the server), without the endpoint's wrapping (stdbuf, xdproce run).
func (c cell) toolArgs(addr string) []string {
	if isRsocketTool(c.Tool) {
		return c.rsocketArgs(addr)
	}
	if isFabricTool(c.Tool) {
		return c.fabricArgs(addr)
	}
	port := strconv.Itoa(c.Port)
	server := addr == ""
	switch c.Tool {
	case rpingTool:
		switch {
		case c.Tag == "cycles" && server:
			return []string{"rping", "-s", "-P", "-p", port}
		case c.Tag == "cycles":
			return []string{"sh", "-c", rpingCyclesScript(addr, c.Port, c.Iters)}
		case server:
			return []string{"rping", "-s", "-v", "-p", port}
		}
		return []string{"rping", "-c", "-a", addr, "-p", port, "-v", "-V", "-C", strconv.Itoa(c.Iters)}
	case ucmatoseTool, udaddyTool:
		a := []string{c.Tool}
		if !server {
			a = append(a, "-s", addr)
		}
		if c.Tool == ucmatoseTool {
			a = append(a, "-p", port)
		}
		return append(a, "-c", strconv.Itoa(c.QPs))
	case mckeyTool:
		// The cell's own address is the endpoint's (argv): listed as SELF.
		return c.mckeyArgs("SELF", server)
	case qperfTool:
		if server {
			return []string{"qperf", "-lp", port}
		}
		return []string{"qperf", "-lp", port, "-cm1", addr, c.Tag}
	}
	return nil
}

// rpingRace is what Debian's rping (rdma-core 44) prints when its CM
// thread, still blocked in rdma_get_cm_event, finds the event channel
// closed under it by main's teardown; it then exits 255 (exit(-1)), after
// a run that went well. rxe<->rxe shows it about once in 15 runs. Newer
// rping wakes the thread with an eventfd first.
const rpingRace = "rdma_get_cm_event: Bad file descriptor"

// rpingCyclesScript connects and disconnects n times, one ping each (-C 1),
// and stops at the first cycle that fails: its exit status, a missing ping
// line (rping also exits 0 when the server disconnects first) or a timeout.
// A cycle whose ping went through and whose rping then exited 255 in its
// teardown race (rpingRace) is good, and counted apart. The last line
// counts the good cycles and those races.
func rpingCyclesScript(addr string, port, n int) string {
	return fmt.Sprintf(`n=0; r=0
while [ $n -lt %[3]d ]; do
  out=$(timeout -k 5 %[4]d rping -c -a %[1]s -p %[2]d -C 1 -v -V 2>&1)
  rc=$?
  case "$rc:$out" in
  0:*"ping data: rdma-ping-0: "*) n=$((n+1)) ;;
  255:*"%[5]s"*"ping data: rdma-ping-0: "*|255:*"ping data: rdma-ping-0: "*"%[5]s"*) n=$((n+1)); r=$((r+1)) ;;
  *) printf '%%s\n' "$out"; echo "rping: cycle $((n+1)) failed (exit $rc)"; echo "rping: $n/%[3]d cycles, $r teardown races"; exit 1 ;;
  esac
done
echo "rping: $n/%[3]d cycles, $r teardown races"`, addr, port, n, int(cycleTimeout.Seconds()), rpingRace)
}

// toolListArgs shows a tool cell's two command lines in --list.
func (c cell) toolListArgs() string {
	cli := proc.ShellJoin(c.toolArgs("SERVER"))
	if c.Tag == "cycles" {
		cli = fmt.Sprintf("%d x rping -c -a SERVER -p %d -C 1 -v -V", c.Iters, c.Port)
	}
	return "server: " + proc.ShellJoin(c.toolArgs("")) + "  client: " + cli
}

// toolTimeout bounds each side of a tool cell.
func (c cell) toolTimeout() time.Duration {
	switch {
	case isRsocketTool(c.Tool):
		return c.rsocketTimeout()
	case isFabricTool(c.Tool):
		return c.fabricTimeout()
	case c.Tag == "cycles":
		// About 0.2 s a cycle rxe<->rxe under emulation; allow 1 s.
		return 60*time.Second + time.Duration(c.Iters)*time.Second
	case c.Tool == rpingTool:
		return 60*time.Second + time.Duration(c.Iters)*100*time.Millisecond
	}
	// qperf runs 2 s a test, with 5 s timeouts on its exchanges.
	return 90 * time.Second
}

// rpingPayload is what rping's client puts in its buffer for ping i of
// size bytes (rping_test_client): "rdma-ping-i: ", then letters from 'A'+i
// (mod 58) cycling through 'A'..'z', and a NUL in the last byte.
func rpingPayload(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	for ch := 65 + i%58; len(b) < size-1; ch++ {
		if ch > 122 {
			ch = 65
		}
		b = append(b, byte(ch))
	}
	return string(b[:size-1])
}

// rpingLines are the data lines rping printed with -v, after prefix
// ("ping data: " on the client, "server ping data: " on the server).
func rpingLines(out, prefix string) []string {
	var data []string
	for l := range strings.Lines(out) {
		if d, ok := strings.CutPrefix(strings.TrimRight(l, "\r\n"), prefix); ok {
			data = append(data, d)
		}
	}
	return data
}

// checkPings checks that side printed want pings, each with its payload.
func checkPings(out, prefix string, want int) error {
	got := rpingLines(out, prefix)
	for i, d := range got {
		if i < want && d != rpingPayload(i, rpingSize) {
			return fmt.Errorf("ping %d data %q, want %q", i, d, rpingPayload(i, rpingSize))
		}
	}
	if len(got) != want {
		return fmt.Errorf("%d %q lines, want %d", len(got), strings.TrimSpace(prefix), want)
	}
	return nil
}

// rpingErrors are what rping prints when something failed that its exit
// status may not show (a persistent server's connection thread only prints).
var rpingErrors = []string{"cq completion failed", "error", "failed", "cma event ", "bogus", "mismatch", "unhandled event", "Unknown CQ", "device removal", "wait for CONNECT"}

// rpingProblem is the first rping error line in out, if any; the daemon's
// log lines (slog's time=...) are not rping's.
func rpingProblem(out string) string {
	for l := range strings.Lines(out) {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "time=") {
			continue
		}
		for _, e := range rpingErrors {
			if strings.Contains(l, e) {
				return l
			}
		}
	}
	return ""
}

var rpingCyclesRE = regexp.MustCompile(`(?m)^rping: (\d+)/(\d+) cycles, (\d+) teardown races$`)

// rpingCyclesDone reads the cycles script's count of good cycles and of
// those among them that ended in rping's teardown race.
func rpingCyclesDone(out string) (done, races int, ok bool) {
	m := rpingCyclesRE.FindAllStringSubmatch(out, -1)
	if m == nil {
		return 0, 0, false
	}
	done, _ = strconv.Atoi(m[len(m)-1][1])
	races, _ = strconv.Atoi(m[len(m)-1][3])
	return done, races, true
}

// rpingRaced: a side that exited 255 after printing rpingRace, which the
// rping checks then judge by its output alone.
func rpingRaced(sd *side) bool { return sd.Exit == 255 && strings.Contains(sd.Output, rpingRace) }

// qperfValue is one "name = value unit" line of qperf's output.
type qperfValue struct {
	Value float64
	Unit  string
}

var qperfLineRE = regexp.MustCompile(`^\s*([a-z_]+)\s*=\s*([\d.,]+)\s+(\S+)\s*$`)

// parseQperf reads the figures qperf printed under its test's header
// ("rc_bw:", then "    bw  =  62.8 MB/sec"); ok is false without the header.
func parseQperf(out, test string) (map[string]qperfValue, bool) {
	vals := map[string]qperfValue{}
	seen := false
	for l := range strings.Lines(out) {
		l = strings.TrimRight(l, "\r\n")
		if strings.TrimSpace(l) == test+":" {
			seen = true
			continue
		}
		m := qperfLineRE.FindStringSubmatch(l)
		if !seen || m == nil {
			continue
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(m[2], ",", ""), 64)
		if err == nil {
			vals[m[1]] = qperfValue{v, m[3]}
		}
	}
	return vals, seen
}

// gbps converts a qperf bandwidth to Gb/s (qperf's units are decimal;
// with -ub they are bits).
func (v qperfValue) gbps() (float64, bool) {
	scale := map[string]float64{"bytes/sec": 8, "KB/sec": 8e3, "MB/sec": 8e6, "GB/sec": 8e9, "TB/sec": 8e12,
		"bits/sec": 1, "Kb/sec": 1e3, "Mb/sec": 1e6, "Gb/sec": 1e9, "Tb/sec": 1e12}[v.Unit]
	return v.Value * scale / 1e9, scale > 0
}

// micros converts a qperf latency to µs.
func (v qperfValue) micros() (float64, bool) {
	scale := map[string]float64{"ns": 1e-3, "us": 1, "ms": 1e3, "sec": 1e6}[v.Unit]
	return v.Value * scale, scale > 0
}

// judgeTool sets the status, reason and figure of a tool cell.
func judgeTool(c cell, r *result) {
	if isRsocketTool(c.Tool) {
		judgeRsocket(c, r)
		return
	}
	if isFabricTool(c.Tool) {
		judgeFabric(c, r)
		return
	}
	srv, cli := r.Server, r.Client
	var notes []string
	// excused: a side whose exit status is not the verdict. A persistent
	// server was stopped as planned; rping's teardown race is its own, and
	// the pings decide.
	excused := func(sd *side) bool {
		return c.persistent() && sd == srv && sd.Stopped || c.Tool == rpingTool && rpingRaced(sd)
	}
	ran := func(sd *side) bool { return sd.Exit == 0 || excused(sd) }
	for _, s := range []struct {
		name string
		sd   *side
	}{{"server", srv}, {"client", cli}} {
		if c.Tool == rpingTool && rpingRaced(s.sd) {
			notes = append(notes, fmt.Sprintf("%s: rping's teardown race (%s, exit 255)", s.name, rpingRace))
		}
	}
	problems := exitProblems(r, excused)
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if c.persistent() && !srv.Stopped && srv.Exit == 0 {
		// It should have been serving until the harness stopped it.
		fail("server (%s) exited by itself before it was stopped", srv.Endpoint)
	}
	srvOK := ran(srv)
	switch {
	case c.Tool == rpingTool && c.Tag == "cycles":
		done, races, ok := rpingCyclesDone(cli.Output)
		switch {
		case !ok:
			fail("client: no cycle count")
		case done != c.Iters:
			fail("client: %d/%d cycles", done, c.Iters)
		}
		if races > 0 {
			notes = append(notes, fmt.Sprintf("%d cycles ended in rping's teardown race (%s, exit 255) after their ping", races, rpingRace))
		}
		r.Figure = fmt.Sprintf("%d/%d cycles", done, c.Iters)
		if srvOK {
			if n := strings.Count(srv.Output, "server DISCONNECT EVENT"); ok && done == c.Iters && n != done {
				fail("server: %d disconnections for %d cycles", n, done)
			}
			if p := rpingProblem(srv.Output); p != "" {
				fail("server: %s", p)
			}
		}
	case c.Tool == rpingTool:
		if ran(cli) {
			if err := checkPings(cli.Output, "ping data: ", c.Iters); err != nil {
				fail("client: %v", err)
			}
		}
		if srvOK {
			if err := checkPings(srv.Output, "server ping data: ", c.Iters); err != nil {
				fail("server: %v", err)
			}
		}
		r.Figure = fmt.Sprintf("%d/%d pings", min(len(rpingLines(cli.Output, "ping data: ")), c.Iters), c.Iters)
	case c.Tool == ucmatoseTool || c.Tool == udaddyTool:
		before := len(problems)
		for _, s := range []struct {
			name string
			sd   *side
		}{{"server", srv}, {"client", cli}} {
			if !ran(s.sd) {
				continue
			}
			for _, want := range []string{"data transfers complete", "return status 0"} {
				if !strings.Contains(s.sd.Output, want) {
					fail("%s: no %q", s.name, want)
				}
			}
		}
		if len(problems) == before && ran(srv) && ran(cli) {
			r.Figure = fmt.Sprintf("%d connections", c.QPs)
		}
	case c.Tool == mckeyTool:
		before := len(problems)
		for _, s := range []struct {
			name string
			sd   *side
		}{{"server", srv}, {"client", cli}} {
			if !ran(s.sd) {
				continue
			}
			for _, want := range []string{"joined dgid: ::ffff:" + c.mckeyGroup(), "data transfers complete", "return status 0"} {
				if !strings.Contains(s.sd.Output, want) {
					fail("%s: no %q", s.name, want)
				}
			}
		}
		if len(problems) == before && ran(srv) && ran(cli) {
			r.Figure = fmt.Sprintf("%d datagrams to %s", c.Iters, c.mckeyGroup())
		}
	case c.Tool == qperfTool:
		if !ran(cli) {
			break
		}
		vals, seen := parseQperf(cli.Output, c.Tag)
		if !seen {
			fail("client: no %q header", c.Tag+":")
			break
		}
		if strings.HasSuffix(c.Tag, "_lat") {
			v, ok := vals["latency"]
			us, known := v.micros()
			if !ok || !known || us <= 0 {
				fail("client: no latency (%v)", vals)
			}
			r.TypicalUs = us
			break
		}
		name := "bw"
		if strings.HasPrefix(c.Tag, "ud_") {
			name = "recv_bw" // UD counts what arrived
		}
		v, ok := vals[name]
		g, known := v.gbps()
		if !ok || !known || g <= 0 {
			fail("client: no %s (%v)", name, vals)
		}
		r.BWGbps = g
	}
	r.Status, r.Reason = statusPass, strings.Join(notes, "; ")
	if len(problems) > 0 {
		r.Status, r.Reason = statusFail, strings.Join(append(problems, notes...), "; ")
	}
}

// expectFailure turns the failure of a cell that fails rxe↔rxe too (its
// XFail) into a skip that says so; a pass says it was not expected.
func expectFailure(c cell, r *result) {
	switch {
	case c.XFail == "":
	case r.Status == statusFail:
		r.Status, r.Reason = statusSkipped, "expected failure: "+c.XFail+"; here: "+r.Reason
	case r.Status == statusPass:
		r.Reason = strings.TrimPrefix(r.Reason+"; passed, though expected to fail: "+c.XFail, "; ")
	}
}

// cmListening reports whether an rdma_cm ID listens on port in the output
// of `rdma resource show cm_id` (rxe: "link rxe0/- cm-idn 0 state LISTEN
// ps TCP pid 303 comm rping src-addr 0.0.0.0:7001") or of `xdproce list`
// ("cm_id link xdp_rxhost0/1 ... state LISTEN ps TCP ... src-addr
// 0.0.0.0:7001 dst-addr ...").
func cmListening(out string, port int) bool {
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		listen, src := false, ""
		for i := 0; i+1 < len(f); i++ {
			switch f[i] {
			case "state":
				listen = f[i+1] == "LISTEN"
			case "src-addr":
				src = f[i+1]
			}
		}
		if listen && strings.HasSuffix(src, ":"+strconv.Itoa(port)) {
			return true
		}
	}
	return false
}

// waitLibCMListen polls until a lib server's rdma_cm ID listens on port, as
// the daemon xdproce run started lists it (xdproce list); it fails early
// when the server exits. A daemon not up yet is not an error.
func (h *harness) waitLibCMListen(ctx context.Context, p *proc.Background, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			return errors.New("server exited before listening")
		}
		out, err := proc.Run(ctx, 10*time.Second, "ip", "netns", "exec", netns, h.xdproce, "list", "-d", hostIface)
		if err == nil && cmListening(out, port) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no rdma_cm listener on port %d after %v (xdproce list: %s)", port, timeout, lastLines(out, 3))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// mckeyMessages is mckey's default message count (-C), which the receiver
// waits for.
const mckeyMessages = 10

// mckeyGroup is the cell's multicast group, one per cell (from its port),
// so that no cell receives another's datagrams.
func (c cell) mckeyGroup() string { return fmt.Sprintf("239.77.%d.%d", c.Port>>8&0xff, c.Port&0xff) }

// mckeyArgs is mckey's command line on an endpoint whose address is own:
// the server receives (it joins, then waits for the messages), the client
// sends. Both bind their own address (-b), as rdma_cm needs to find the
// device of a multicast destination.
func (c cell) mckeyArgs(own string, server bool) []string {
	a := []string{"mckey", "-m", c.mckeyGroup(), "-b", own, "-C", strconv.Itoa(c.Iters)}
	if !server {
		a = append(a, "-s")
	}
	return a
}

// waitLibJoined polls until the host's interface is a member of group (the
// daemon xdproce run started joined it for the server's attached QP); it
// fails early when the server exits.
func (h *harness) waitLibJoined(ctx context.Context, p *proc.Background, group string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			return errors.New("server exited before joining")
		}
		out, err := proc.Run(ctx, 10*time.Second, "ip", "netns", "exec", netns, "ip", "maddr", "show", "dev", hostIface)
		if err == nil && strings.Contains(out, "inet  "+group+"\n") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not join %s after %v (ip maddr: %s)", hostIface, group, timeout, lastLines(out, 3))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}
