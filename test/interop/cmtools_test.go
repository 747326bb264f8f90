package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/test/interop/proc"
)

// The rdmacm-utils and qperf cells: rxe<->rxe, then the lib endpoint in
// both roles, each tool as a user runs it (no -d: rdma_cm finds the device
// from the address), qperf's UD tests expected to fail.
func TestCMToolCells(t *testing.T) {
	cells := selectCells(buildMatrix(matrixConfig{BWIters: 25, LatIters: 200}), regexp.MustCompile(`^(rping|ucmatose|udaddy|qperf)/`))
	if len(cells) != 24 {
		t.Fatalf("%d tool cells, want 24", len(cells))
	}
	h := &harness{xdproce: "/x/xdproce"}
	byID := map[string]cell{}
	for _, c := range cells {
		byID[c.ID()] = c
		srv := proc.ShellJoin(h.argv(c, c.Server, ""))
		cli := proc.ShellJoin(h.argv(c, c.Client, serverAddr(c.Server)))
		if strings.Contains(strings.ReplaceAll(srv+" "+cli, "xdproce run -d rxhost0 --", ""), " -d ") {
			t.Errorf("%s: a device given: %q, %q", c.ID(), srv, cli)
		}
		for _, a := range []struct {
			e    endpoint
			argv string
		}{{c.Server, srv}, {c.Client, cli}} {
			if onLib := strings.HasPrefix(a.argv, "/x/xdproce run -d rxhost0 -- "); onLib != (a.e == lib) {
				t.Errorf("%s: %v side %q", c.ID(), a.e, a.argv)
			}
		}
		if !strings.Contains(cli, serverAddr(c.Server)) {
			t.Errorf("%s: client without the server's address: %q", c.ID(), cli)
		}
		if c.Tool != udaddyTool && (!strings.Contains(srv, " "+strconv.Itoa(c.Port)) || c.listenPort() != c.Port) {
			t.Errorf("%s: server not on the cell's port %d: %q", c.ID(), c.Port, srv)
		}
		if c.persistent() != (c.Tool == qperfTool || c.Tag == "cycles") || c.cmListener() == (c.Tool == qperfTool) || !c.needsRDMACM() {
			t.Errorf("%s: persistent %v, rdma_cm listener %v", c.ID(), c.persistent(), c.cmListener())
		}
		if (c.XFail != "") != (c.Tool == qperfTool && strings.HasPrefix(c.Tag, "ud_")) {
			t.Errorf("%s: XFail %q", c.ID(), c.XFail)
		}
		if c.timeout() < 60*1e9 {
			t.Errorf("%s: timeout %v", c.ID(), c.timeout())
		}
	}
	want := map[string][2]string{ // server, client
		"rping/lib-client/verify": {"stdbuf -oL rping -s -v -p PORT",
			"/x/xdproce run -d rxhost0 -- stdbuf -oL rping -c -a 198.18.0.11 -p PORT -v -V -C 100"},
		"rping/lib-server/cycles": {"/x/xdproce run -d rxhost0 -- stdbuf -oL rping -s -P -p PORT", "sh -c "},
		"rping/lib-client/cycles": {"stdbuf -oL rping -s -P -p PORT", "/x/xdproce run -d rxhost0 -- sh -c "},
		"ucmatose/rxe-rxe/c4":     {"stdbuf -oL ucmatose -p PORT -c 4", "stdbuf -oL ucmatose -s 198.18.0.12 -p PORT -c 4"},
		"udaddy/lib-server/c4":    {"/x/xdproce run -d rxhost0 -- stdbuf -oL udaddy -c 4", "stdbuf -oL udaddy -s 198.18.0.2 -c 4"},
		"qperf/lib-client/rc_lat": {"stdbuf -oL qperf -lp PORT", "/x/xdproce run -d rxhost0 -- stdbuf -oL qperf -lp PORT -cm1 198.18.0.11 rc_lat"},
	}
	for id, w := range want {
		c, ok := byID[id]
		if !ok {
			t.Errorf("no cell %s", id)
			continue
		}
		srv := proc.ShellJoin(h.argv(c, c.Server, ""))
		cli := proc.ShellJoin(h.argv(c, c.Client, serverAddr(c.Server)))
		if ws := strings.ReplaceAll(w[0], "PORT", strconv.Itoa(c.Port)); srv != ws {
			t.Errorf("%s: server %q, want %q", id, srv, ws)
		}
		if wc := strings.ReplaceAll(w[1], "PORT", strconv.Itoa(c.Port)); !strings.HasPrefix(cli, wc) {
			t.Errorf("%s: client %q, want %q", id, cli, wc)
		}
	}
	if c := byID["udaddy/rxe-rxe/c4"]; c.listenPort() != udaddyPort {
		t.Errorf("udaddy listens on %d", c.listenPort())
	}
}

func TestRpingPayload(t *testing.T) {
	for _, tc := range []struct {
		i    int
		want string
	}{
		{0, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"},
		{1, "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs"},
		{57, "rdma-ping-57: zABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnop"},
		{58, "rdma-ping-58: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopq"},
	} {
		if got := rpingPayload(tc.i, rpingSize); got != tc.want {
			t.Errorf("ping %d: %q, want %q", tc.i, got, tc.want)
		}
	}
}

// rpingOutput is what rping prints with -v for n pings, after prefix.
func rpingOutput(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%s\n", prefix, rpingPayload(i, rpingSize))
	}
	return b.String()
}

func toolCell(t *testing.T, id string) cell {
	t.Helper()
	for _, c := range buildMatrix(matrixConfig{BWIters: 25, LatIters: 200}) {
		if c.ID() == id {
			return c
		}
	}
	t.Fatalf("no cell %s", id)
	return cell{}
}

func judged(c cell, srv, cli side) result {
	r := newResult(c)
	r.Server, r.Client = &srv, &cli
	judge(c, &r)
	return r
}

func TestJudgeTool(t *testing.T) {
	verify := toolCell(t, "rping/lib-server/verify")
	verify.Iters = 100 // judged as the full -C 1000, on a shorter output
	srvOut := "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" + rpingOutput("server ping data: ", 100)
	cliOut := "client DISCONNECT EVENT...\n" + rpingOutput("ping data: ", 100)
	cycles := toolCell(t, "rping/lib-client/cycles")
	stopped := side{Exit: -1, Stopped: true, Output: strings.Repeat("server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n", 1000)}
	ucm := toolCell(t, "ucmatose/lib-client/c4")
	ucmSrv := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	ucmCli := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	bw, lat, ud := toolCell(t, "qperf/lib-server/rc_bw"), toolCell(t, "qperf/rxe-rxe/rc_lat"), toolCell(t, "qperf/rxe-rxe/ud_bw")
	for _, tc := range []struct {
		name     string
		c        cell
		srv, cli side
		status   string
		reason   string // in the reason
		figure   string
	}{
		{"rping verified", verify, side{Output: srvOut}, side{Output: cliOut}, statusPass, "", "100/100 pings"},
		{"rping short", verify, side{Output: srvOut}, side{Output: "client DISCONNECT EVENT...\n" + rpingOutput("ping data: ", 40)},
			statusFail, `client: 40 "ping data:" lines, want 100`, "40/100 pings"},
		{"rping corrupt", verify, side{Output: strings.Replace(srvOut, "rdma-ping-7: H", "rdma-ping-7: X", 1)}, side{Output: cliOut},
			statusFail, "server: ping 7 data", ""},
		{"rping mismatch", verify, side{Output: srvOut}, side{Exit: 255, Output: "data mismatch!\nrping client failed: -1\n"},
			statusFail, "client (vm1) exit 255", ""},
		{"rping teardown race", verify, side{Output: srvOut}, side{Exit: 255, Output: rpingRace + "\n" + cliOut},
			statusPass, "client: rping's teardown race", "100/100 pings"},
		{"cycles", cycles, stopped, side{Output: "rping: 1000/1000 cycles, 3 teardown races\n"}, statusPass, "3 cycles ended in rping's teardown race", "1000/1000 cycles"},
		{"cycles short", cycles, stopped, side{Exit: 1, Output: "cma event RDMA_CM_EVENT_REJECTED, error 8\nrping: cycle 14 failed (exit 255)\nrping: 13/1000 cycles, 0 teardown races\n"},
			statusFail, "client: 13/1000 cycles", "13/1000 cycles"},
		{"cycles, server gone", cycles, side{Exit: 1, Output: "setup_qp failed: 12\n"}, side{Output: "rping: 1000/1000 cycles, 0 teardown races\n"},
			statusFail, "server (vm1) exit 1", ""},
		{"cycles, a server thread failed", cycles, side{Exit: -1, Stopped: true, Output: stopped.Output + "cq completion failed status 5\n"},
			side{Output: "rping: 1000/1000 cycles, 0 teardown races\n"}, statusFail, "server: cq completion failed status 5", ""},
		{"cycles, disconnections missing", cycles, side{Exit: -1, Stopped: true, Output: "server DISCONNECT EVENT...\n"},
			side{Output: "rping: 1000/1000 cycles, 0 teardown races\n"}, statusFail, "server: 1 disconnections for 1000 cycles", ""},
		{"ucmatose", ucm, side{Output: ucmSrv}, side{Output: ucmCli}, statusPass, "", "4 connections"},
		{"ucmatose incomplete", ucm, side{Output: ucmSrv}, side{Output: "cmatose: starting client\n"}, statusFail, `client: no "data transfers complete"`, ""},
		{"ucmatose no device", ucm, side{Exit: -1, Error: "server still running 10s after the client ended, killed"},
			side{Exit: 255, Output: "cmatose: failure getting addr: No such device\nreturn status -1\n"}, statusFail, "client (lib) exit 255", ""},
		{"qperf rc_bw", bw, side{Exit: -1, Stopped: true}, side{Output: "rc_bw:\n    bw  =  62.8 MB/sec\n"}, statusPass, "", "0.502 Gb/s"},
		{"qperf server gone", bw, side{Exit: 0}, side{Output: "rc_bw:\n    bw  =  62.8 MB/sec\n"}, statusFail, "exited by itself", ""},
		{"qperf rc_lat", lat, side{Exit: -1, Stopped: true}, side{Output: "rc_lat:\n    latency  =  493 us\n"}, statusPass, "", "493.00 µs"},
		{"qperf rejected", lat, side{Exit: -1, Stopped: true}, side{Exit: 1, Output: "rc_lat:\nunexpected event from RDMA CM: RDMA_CM_EVENT_REJECTED\n"},
			statusFail, "client (vm1) exit 1", ""},
		{"qperf UD as rxe", ud, side{Exit: -1, Stopped: true, Output: "failed to create address handle: Invalid argument\n"},
			side{Exit: 1, Output: "ud_bw:\nwarning: -cm1 set but not used in test ud_bw\nfailed to create address handle: Invalid argument\n"},
			statusSkipped, "expected failure: qperf 0.4.11 ignores -cm1", ""},
		{"qperf UD passing", ud, side{Exit: -1, Stopped: true}, side{Output: "ud_bw:\n    send_bw  =  10 MB/sec\n    recv_bw  =  9 MB/sec\n"},
			statusPass, "passed, though expected to fail", "0.072 Gb/s"},
	} {
		tc.srv.Endpoint, tc.cli.Endpoint = tc.c.Server.String(), tc.c.Client.String()
		r := judged(tc.c, tc.srv, tc.cli)
		if r.Status != tc.status || !strings.Contains(r.Reason, tc.reason) || tc.reason == "" && r.Reason != "" || tc.figure != "" && figure(r) != tc.figure ||
			tc.c.Tool == ucmatoseTool && r.Status == statusFail && figure(r) != "" {
			t.Errorf("%s: %s (%s), figure %q; want %s with %q, figure %q", tc.name, r.Status, r.Reason, figure(r), tc.status, tc.reason, tc.figure)
		}
	}
}

func TestParseQperf(t *testing.T) {
	out := "ud_bw:\n    send_bw  =  1,234.5 KB/sec\n    recv_bw  =  1.2 GB/sec\n    msg_rate  =  5.1 K/sec\n"
	v, ok := parseQperf(out, "ud_bw")
	if !ok || v["send_bw"].Value != 1234.5 || v["recv_bw"].Unit != "GB/sec" {
		t.Fatalf("parseQperf: %v %v", v, ok)
	}
	if g, ok := v["recv_bw"].gbps(); !ok || g != 9.6 {
		t.Errorf("recv_bw %v Gb/s", g)
	}
	if _, ok := v["msg_rate"].gbps(); ok {
		t.Error("a message rate taken for a bandwidth")
	}
	if us, ok := (qperfValue{2.5, "ms"}).micros(); !ok || us != 2500 {
		t.Errorf("2.5 ms = %v µs", us)
	}
	if _, ok := parseQperf("rc_bw:\n    bw = 1 MB/sec\n", "ud_bw"); ok {
		t.Error("another test's header taken")
	}
}

func TestCMListening(t *testing.T) {
	rxe := "link rxe0/- cm-idn 0 state LISTEN ps TCP pid 303 comm rping src-addr 0.0.0.0:7001 \n" +
		"link rxe0/1 cm-idn 1 state CONNECT ps TCP pid 303 comm rping src-addr 198.18.0.12:7002 dst-addr 198.18.0.11:40000\n"
	list := "dev xdp_rxhost0 netdev rxhost0 engines 1 datapath \"native\"\n" +
		"cm_id link xdp_rxhost0/1 lqpn 0 qp-type RC state LISTEN ps UDP pid 9 comm udaddy src-addr 0.0.0.0:7174 dst-addr -:0\n" +
		"cm xdp_rxhost0 connections 0\n"
	for _, tc := range []struct {
		out  string
		port int
		want bool
	}{{rxe, 7001, true}, {rxe, 7002, false}, {rxe, 700, false}, {list, 7174, true}, {list, 7001, false}, {"", 7001, false}} {
		if got := cmListening(tc.out, tc.port); got != tc.want {
			t.Errorf("port %d in %q: %v", tc.port, tc.out, got)
		}
	}
}

func TestPerfHasRDMACM(t *testing.T) {
	for _, tc := range []struct {
		help string
		want bool
	}{
		{"  -R\tconnect the QPs with rdma_cm and exchange over rdma_cm (perftest's --rdma_cm)\n  -V\tprint the perftest version spoken\n", true},
		{"  -R\t-R (rdma_cm) is not supported yet\n", false},
		{"  -R\n    \trdma_cm: not supported\n", false},
		{"  -R\tconnect with rdma_cm (not supported)\n  -V\tprint the perftest version spoken\n", false},
		{"  -c string\n    \tconnection type (default \"RC\")\n", false},
	} {
		if got := perfHasRDMACM(tc.help); got != tc.want {
			t.Errorf("%q: %v", tc.help, got)
		}
	}
}

// The cycles loop, run by sh against a fake rping: good cycles, the
// teardown race counted apart, and the first failure stops it.
func TestRpingCyclesScript(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout(1)")
	}
	dir := t.TempDir()
	// Calls 1 and 2 go well, 3 races in teardown, 4 pings nothing and
	// exits 0 (the server disconnected first), which is a failure.
	fake := `#!/bin/sh
n=$(cat "$0.n" 2>/dev/null || echo 0); n=$((n+1)); echo $n >"$0.n"
case $n in
3) echo "` + rpingRace + `" >&2; echo "ping data: rdma-ping-0: ABC"; exit 255 ;;
4) echo "client DISCONNECT EVENT..." >&2; exit 0 ;;
esac
echo "ping data: rdma-ping-0: ABC"
`
	if err := os.WriteFile(filepath.Join(dir, "rping"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(n int) (string, error) {
		cmd := exec.Command("sh", "-c", rpingCyclesScript("198.18.0.11", 18600, n))
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(3)
	if done, races, ok := rpingCyclesDone(out); err != nil || !ok || done != 3 || races != 1 {
		t.Errorf("3 cycles: %d done, %d races, %v, %v:\n%s", done, races, ok, err, out)
	}
	out, err = run(3)
	if done, _, ok := rpingCyclesDone(out); err == nil || !ok || done != 0 || !strings.Contains(out, "cycle 1 failed (exit 0)") {
		t.Errorf("a cycle without its ping: %d done, %v:\n%s", done, err, out)
	}
}

// A stock perftest -R client's failure on its own listen race gets the
// cell run again; other failures, and xdproce perf's client (which
// retries itself), do not.
func TestPerftestListenRace(t *testing.T) {
	stock := cell{Tool: "ib_read_lat", Server: vm1, Client: lib, Opts: []string{"-R"}}
	failed := func(exit int, out string) result {
		return result{Status: statusFail, Client: &side{Exit: exit, Output: out}}
	}
	for _, c := range []struct {
		c    cell
		r    result
		want bool
	}{
		{stock, failed(139, "ERRNO: Resource temporarily unavailable.\nFailed to handle RDMA CM event."), true},
		{stock, failed(1, " Event: RDMA_CM_EVENT_REJECTED; error: 8.\n"), true},
		{stock, failed(1, "Couldn't post send"), false},
		{stock, result{Status: statusPass, Client: &side{}}, false},
		{cell{Tool: "ib_read_lat", Server: vm1, Client: lib}, failed(139, ""), false},
		{cell{Tool: "ib_read_lat", Server: vm1, Client: xdp, Opts: []string{"-R"}}, failed(139, ""), false},
	} {
		if got := perftestListenRace(c.c, c.r); got != c.want {
			t.Errorf("%s with %+v: %v, want %v", c.c.ID(), c.r.Client, got, c.want)
		}
	}
}
