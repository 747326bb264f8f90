package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/test/interop/integrity"
	"github.com/xdproce/xdproce/test/interop/proc"
)

func TestMatrixFull(t *testing.T) {
	cells := buildMatrix(matrixConfig{BWIters: 100, LatIters: 200})
	// reference 13 (4 bw + 7 lat + -q 8 + pingpong)
	// + 2 MTUs x 2 directions x (4 bw + 7 lat) = 44
	// + -q 8 x 2 + pingpong x 2 + loss 4 bw x 2 = 12
	// + the same 64 KiB send/write/read cells without loss x 2 = 6
	// + integrity at MTU 4096 and 1024 = 2
	// + in the guests: 5 tools x (rxe-rxe, xdproce server, xdproce client, xdproce-xdproce) = 20
	// + stock tools over xdproce's libibverbs x 2 roles: the 8 perftest
	//   tools, 4 perftest variants, 4 ping-pongs and 3 UD tools = 38
	// + rdma_cm (-R): send/write/read bw and lat, send bw and lat over UD,
	//   each rxe-rxe, xdproce perf x 2 roles, lib x 2 roles = 8 x 5 = 40
	// + rdmacm-utils and qperf: rping (verify, cycles), ucmatose, udaddy,
	//   mckey, qperf x 4 tests, each rxe-rxe and lib x 2 roles = 9 x 3 = 27
	// + rsockets: rstream (blocking, async), riostream, each rxe-rxe and lib
	//   x 2 roles = 3 x 3 = 9
	// + libfabric: fi_pingpong msg and rdm, each rxe-rxe and lib x 2 roles
	//   = 2 x 3 = 6
	// + the XDP fast path on device memory: ib_write_lat 2 B and 64 B,
	//   ib_write_bw 64 B, x 2 roles = 6
	if len(cells) != 223 {
		t.Fatalf("%d cells, want 223", len(cells))
	}
	count := func(f func(cell) bool) int {
		n := 0
		for _, c := range cells {
			if f(c) {
				n++
			}
		}
		return n
	}
	checks := []struct {
		name string
		f    func(cell) bool
		want int
	}{
		{"reference", func(c cell) bool { return !c.hasXDP() }, 13 + 5 + 8 + 9 + 3 + 2},
		{"guest", func(c cell) bool { return c.guestCell() && c.MTU == 2048 && !c.hostXDP() }, 15},
		{"guest xdproce-xdproce", func(c cell) bool { return c.Server.guest() && c.Client.guest() }, 5},
		{"xdproce server", func(c cell) bool { return c.Server == xdp && c.Tool != integrity.IntegrityTool }, 31 + 8 + 3},
		{"xdproce client", func(c cell) bool { return c.Client == xdp }, 31 + 8 + 3},
		{"mtu 1024", func(c cell) bool { return c.MTU == 1024 && c.Tool != integrity.IntegrityTool }, 22 + 6},
		{"fast path", func(c cell) bool { return c.Tag == fastPathTag && len(c.XDPOpts) > 0 }, 6},
		{"integrity", func(c cell) bool { return c.Tool == integrity.IntegrityTool && c.Client == vm1 && c.Loss == "" }, 2},
		{"loss", func(c cell) bool { return c.Loss == "1%" }, 8},
		{"-q 8", func(c cell) bool { return c.QPs == 8 }, 3 + 2},
		{"pingpong", func(c cell) bool { return c.Tool == pingpong }, 3 + 2*2},
		// lib: send/write/read, --use_old_post_send, -e; both roles
		{"sweeps", func(c cell) bool { return c.Size == allSizes }, 3 + 2*2*3 + 5*2 + 3*5},
		{"rdma_cm", func(c cell) bool { return c.rdmaCM() && c.hostXDP() && c.MTU == 4096 && c.Loss == "" }, 16},
		{"rdma_cm UD", func(c cell) bool { return c.rdmaCM() && c.Tag == "rdma_cm-ud" }, 2 * 5},
		{"rdma_cm lib", func(c cell) bool { return c.rdmaCM() && c.libCell() }, 16},
		{"rdma_cm reference", func(c cell) bool { return c.rdmaCM() && !c.hasXDP() }, 8},
		{"rdma_cm tools", func(c cell) bool { return c.cmTool() }, 27 + 9 + 6},
		{"rdma_cm tools on the lib", func(c cell) bool { return c.cmTool() && c.libCell() }, 18 + 6 + 4},
		{"expected failures", func(c cell) bool { return c.XFail != "" }, 6},
		{"atomic lat", func(c cell) bool { return c.Tool == "ib_atomic_lat" }, 5 + 2},
		{"lib server", func(c cell) bool { return c.Server == lib && c.Client == vm1 && c.MTU == 4096 && c.Loss == "" }, 19 + 8 + 9 + 3 + 2},
		{"lib client", func(c cell) bool { return c.Client == lib && c.Server == vm1 && c.MTU == 4096 && c.Loss == "" }, 19 + 8 + 9 + 3 + 2},
		{"lib ping-pongs", func(c cell) bool { return c.libCell() && c.isPingpong() }, 10},
		{"lib tagged", func(c cell) bool { return c.libCell() && c.Tag != "" }, 12 + 16 + 18 + 6 + 4},
	}
	for _, ch := range checks {
		if got := count(ch.f); got != ch.want {
			t.Errorf("%s: %d cells, want %d", ch.name, got, ch.want)
		}
	}
	ids, ports := map[string]bool{}, map[int]bool{}
	for i, c := range cells {
		if ids[c.ID()] || ports[c.Port] {
			t.Errorf("duplicate id %s or port %d", c.ID(), c.Port)
		}
		ids[c.ID()], ports[c.Port] = true, true
		// netem is switched once: all loss cells come last.
		if c.Loss == "" && i > 0 && cells[i-1].Loss != "" {
			t.Errorf("cell %s without loss after a loss cell", c.ID())
		}
		if c.Server == c.Client || c.Server.vm() != 0 && c.Server.vm() == c.Client.vm() || (!c.hasXDP() && c.Server != vm2) {
			t.Errorf("cell %s: bad roles %v <- %v", c.ID(), c.Server, c.Client)
		}
		if c.libCell() && (c.hostXDP() || c.guestCell() || c.Server.onHost() == c.Client.onHost()) {
			t.Errorf("cell %s: a lib cell runs stock on xdproce's library against rxe: %v <- %v", c.ID(), c.Server, c.Client)
		}
		if c.timeout() <= 0 {
			t.Errorf("cell %s: no timeout", c.ID())
		}
	}
}

func TestMatrixSmoke(t *testing.T) {
	cells := buildMatrix(matrixConfig{Smoke: true, BWIters: 20, LatIters: 100})
	if len(cells) != 10 {
		t.Fatalf("%d cells, want 10", len(cells))
	}
	// The last runs xdproce in a guest: kernel 6.1 and virtio-net in CI.
	if g := cells[9]; !g.Server.guest() || g.Client != xdp || g.MTU != 2048 {
		t.Errorf("smoke's guest cell is %s", g.ID())
	}
	// rdma_cm against rxe's CM: stock rping on the libraries in both roles,
	// xdproce perf -R serving stock perftest -R.
	if a, b, r := cells[6], cells[7], cells[8]; a.ID() != "rping/lib-server/verify" || b.ID() != "rping/lib-client/verify" ||
		r.ID() != "ib_send_lat/xdp-server/mtu4096/s2/rdma_cm" {
		t.Errorf("smoke's rdma_cm cells are %s, %s and %s", a.ID(), b.ID(), r.ID())
	}
	// Stock perftest over xdproce's libibverbs, once in each role.
	if w, l := cells[4], cells[5]; w.ID() != "ib_write_bw/lib-client/mtu4096/all" || l.ID() != "ib_send_lat/lib-server/mtu4096/s2" {
		t.Errorf("smoke's lib cells are %s and %s", w.ID(), l.ID())
	}
	roles := map[string]int{}
	for _, c := range cells[:4] {
		if c.Tool != "ib_write_bw" && c.Tool != "ib_send_lat" || c.MTU != 4096 || c.Loss != "" || !c.hasXDP() {
			t.Errorf("unexpected smoke cell %s", c.ID())
		}
		roles[c.Tool+" "+c.Server.String()]++
	}
	if len(roles) != 4 {
		t.Errorf("smoke does not cover both directions of both tools: %v", roles)
	}
}

func TestArgsAndSelect(t *testing.T) {
	cells := buildMatrix(matrixConfig{BWIters: 100, LatIters: 200})
	sel := selectCells(cells, regexp.MustCompile(`^ib_write_bw/xdp-.*/q8$`))
	if len(sel) != 2 {
		t.Fatalf("--only selected %d cells, want 2", len(sel))
	}
	got := strings.Join(sel[0].args(), " ")
	want := "-F -p " + strconv.Itoa(sel[0].Port) + " -m 4096 -n 100 -s 65536 -q 8 --report_gbits"
	if got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	for _, c := range cells {
		a := strings.Join(c.args(), " ")
		if strings.HasPrefix(c.Tool, "ib_atomic") && strings.Contains(a, "-s ") {
			t.Errorf("%s: atomic with a size: %s", c.ID(), a)
		}
		if c.isLat() && strings.Contains(a, "--report_gbits") {
			t.Errorf("%s: latency with --report_gbits", c.ID())
		}
	}
	h := &harness{xdproce: "/x/xdproce"}
	c := sel[0]
	if got := proc.ShellJoin(h.argv(c, xdp, "")); !strings.HasPrefix(got, "/x/xdproce perf ib_write_bw -d rxhost0 -F ") {
		t.Errorf("xdproce server argv %q", got)
	}
	if got := proc.ShellJoin(h.argv(c, vm1, serverAddr(xdp))); !strings.HasPrefix(got, "stdbuf -oL ib_write_bw -d rxe0 -F ") || !strings.HasSuffix(got, " 198.18.0.2") {
		t.Errorf("stock client argv %q", got)
	}
	lc := selectCells(cells, regexp.MustCompile(`^ibv_rc_pingpong/lib-client/.*/new-send$`))
	if len(lc) != 1 {
		t.Fatalf("--only rc_pingpong -N on the lib: %d cells", len(lc))
	}
	want = "/x/xdproce run -d rxhost0 -- stdbuf -oL ibv_rc_pingpong -d xdp_rxhost0 -p " + strconv.Itoa(lc[0].Port) +
		" -m 4096 -n 200 -g 1 -s 4096 -N 198.18.0.11"
	if got := proc.ShellJoin(h.argv(lc[0], lib, serverAddr(lc[0].Server))); got != want {
		t.Errorf("lib client argv\n%q, want\n%q", got, want)
	}
	// The rxe side runs without the lib side's options.
	if got := proc.ShellJoin(h.argv(lc[0], vm1, "")); strings.Contains(got, "-N") || !strings.HasPrefix(got, "stdbuf -oL ibv_rc_pingpong -d rxe0 ") {
		t.Errorf("rxe server argv %q", got)
	}
	if got := serverAddr(lib); got != hostAddr {
		t.Errorf("lib server address %s", got)
	}
	if q := proc.ShellQuote("a b'c"); q != `'a b'\''c'` {
		t.Errorf("shellQuote: %s", q)
	}
}

func TestRunListNeedsNoRoot(t *testing.T) {
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"--smoke", "--list", "--only", "send_lat"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Errorf("listed %d cells, want 4:\n%s", n, out.String())
	}
	if code := run(context.Background(), []string{"--only", "("}, &out, &errb); code != 2 {
		t.Errorf("bad regexp: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"--list", "--only", "nothing-matches"}, &out, &errb); code != 0 {
		t.Errorf("empty --list: exit %d", code)
	}
}

// The loss sweep measures every verb and size at every rate beside its
// loss-free baseline, for xdproce in both roles and for rxe, switching
// netem once per rate.
func TestLossSweepMatrix(t *testing.T) {
	cells := buildMatrix(matrixConfig{LossSweep: true, BWIters: 25, LatIters: 200})
	perRate := map[string]int{}
	switches := 0
	for i, c := range cells {
		perRate[c.Loss]++
		if i > 0 && cells[i-1].Loss != c.Loss {
			switches++
		}
		if !c.isBW() || c.MTU != 4096 {
			t.Errorf("cell %s: want bandwidth cells at MTU 4096", c.ID())
		}
	}
	// 3 verbs x 2 sizes + atomic, x 3 directions.
	for _, r := range sweepRates {
		if perRate[r] != 21 {
			t.Errorf("rate %q: %d cells, want 21", r, perRate[r])
		}
	}
	if switches != len(sweepRates)-1 {
		t.Errorf("netem switched %d times, want %d", switches, len(sweepRates)-1)
	}
}

// The lib cells: every one has an ID of its own, the ping-pongs' options
// take GID 1 (the IPv4 RoCEv2 GID on rxe and xdproce) and the lib side's
// own options stay on the lib side.
func TestLibCells(t *testing.T) {
	cells := libCells(matrixConfig{BWIters: 25, LatIters: 200})
	if len(cells) != 38 {
		t.Fatalf("%d lib cells, want 38", len(cells))
	}
	tools := map[string]int{}
	for _, c := range cells {
		tools[c.Tool]++
		a := " " + proc.ShellJoin(c.args()) + " "
		if c.isPingpong() && !strings.Contains(a, " -g 1 ") {
			t.Errorf("%s: ping-pong without -g 1: %s", c.ID(), a)
		}
		if c.Tool == "ibv_ud_pingpong" && strings.Contains(a, " -m ") {
			t.Errorf("%s: ibv_ud_pingpong takes no -m: %s", c.ID(), a)
		}
		for _, o := range c.LibOpts {
			if strings.Contains(a, " "+o+" ") {
				t.Errorf("%s: lib option %s given to both sides", c.ID(), o)
			}
		}
		if !strings.Contains(c.ID(), "/lib-server/") && !strings.Contains(c.ID(), "/lib-client/") {
			t.Errorf("%s: not named as a lib cell", c.ID())
		}
	}
	want := map[string]int{"ib_send_bw": 8, "ib_write_bw": 4, "ib_send_lat": 6, "ibv_rc_pingpong": 4, "ibv_uc_pingpong": 2, "ibv_srq_pingpong": 2, "ibv_ud_pingpong": 2,
		"ib_read_bw": 2, "ib_atomic_bw": 2, "ib_write_lat": 2, "ib_read_lat": 2, "ib_atomic_lat": 2}
	for tool, n := range want {
		if tools[tool] != n {
			t.Errorf("%s: %d lib cells, want %d", tool, tools[tool], n)
		}
	}
	h := &harness{xdproce: "/x/xdproce"}
	for _, c := range cells {
		if c.Tag != "events" || c.Client != lib {
			continue
		}
		got := proc.ShellJoin(h.argv(c, lib, hostAddr))
		if !strings.HasPrefix(got, "/x/xdproce run -d rxhost0 -- stdbuf -oL ib_send_bw -d xdp_rxhost0 ") || !strings.Contains(got, " --report_gbits -e 198.18.0.2") {
			t.Errorf("events client argv %q", got)
		}
	}
}

func TestUnixListener(t *testing.T) {
	procNetUnix := `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0005 01 41239 @xdproce/rxhost0
0000000000000000: 00000003 00000000 00000000 0005 03 41240 @xdproce/rxhost0
0000000000000000: 00000002 00000000 00010000 0001 01 1234 /run/other.sock
`
	if !unixListener(procNetUnix, "@xdproce/rxhost0") {
		t.Error("listener not found")
	}
	if unixListener(procNetUnix, "@xdproce/eth0") || unixListener(strings.Replace(procNetUnix, "00010000 0005", "00000000 0005", 1), "@xdproce/rxhost0") {
		t.Error("found a listener that is not there")
	}
}

func TestLibDirs(t *testing.T) {
	if got := libDirs("", "/repo/bin/xdproce"); len(got) != 2 || got[0] != "/repo/bin/lib" || got[1] != "/repo/lib/xdproce" {
		t.Errorf("libDirs: %v", got)
	}
	if got := libDirs("/opt/x", "/repo/bin/xdproce"); len(got) != 1 || got[0] != "/opt/x" {
		t.Errorf("libDirs with $XDPROCE_LIBDIR: %v", got)
	}
}

// The rdma_cm cells: both sides run -R (UD ones -c UD too), each cell on a
// port of its own, selected by --only rdma_cm.
func TestRDMACMCells(t *testing.T) {
	cells := selectCells(buildMatrix(matrixConfig{BWIters: 25, LatIters: 200}), regexp.MustCompile(`/xdp-(server|client)/.*/rdma_cm`))
	if len(cells) != 16 {
		t.Fatalf("%d xdproce perf cells match /rdma_cm, want 16", len(cells))
	}
	h := &harness{xdproce: "/x/xdproce"}
	for _, c := range cells {
		if !c.rdmaCM() {
			t.Errorf("%s: no -R", c.ID())
		}
		srv := " " + proc.ShellJoin(h.argv(c, c.Server, "")) + " "
		cli := " " + proc.ShellJoin(h.argv(c, c.Client, serverAddr(c.Server))) + " "
		for _, a := range []string{srv, cli} {
			if !strings.Contains(a, " -R ") || strings.Contains(c.Tag, "ud") != strings.Contains(a, " -c UD ") ||
				!strings.Contains(a, " -p "+strconv.Itoa(c.Port)+" ") {
				t.Errorf("%s: argv %q", c.ID(), a)
			}
		}
	}
	if id := cells[len(cells)-1].ID(); id != "ib_send_lat/xdp-client/mtu4096/s2048/rdma_cm-ud" {
		t.Errorf("last rdma_cm cell %s", id)
	}
}
