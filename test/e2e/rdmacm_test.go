package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
)

// buildRDMACMCheck compiles provider/test/rdmacm_check.c as an application
// would be: against Debian's librdmacm-dev, linked with -lrdmacm -libverbs.
func buildRDMACMCheck(t *testing.T) string {
	t.Helper()
	return buildProviderCheck(t, "rdmacm_check", "-lrdmacm", "-libverbs", "-lpthread")
}

// TestStockRDMACMABI runs rdmacm_check, an application of rdma-core's
// librdmacm API compiled against Debian's librdmacm-dev, on xdproce's
// librdmacm.so.1 and libibverbs.so.1 between the daemons of two namespaces:
// the errno of misuse, events in order with what they carry, the event
// channel's fd (pollable, blocking or O_NONBLOCK), synchronous IDs
// (rdma_create_ep, rdma_get_request), private data both ways, rejections,
// UD through SIDR, migration and disconnection.
func TestStockRDMACMABI(t *testing.T) {
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	_, aLog := daemonUp(t, bin, a)
	_, bLog := daemonUp(t, bin, b)
	check := buildRDMACMCheck(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, check, a.Path(), "xdp_"+a.Link, a.Addr.String(), b.Path(), "xdp_"+b.Link, b.Addr.String())
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	t.Logf("rdmacm_check:\n%s", out)
	if err != nil {
		t.Fatalf("rdmacm_check: %v", err)
	}
	if n := checksPassed(t, out); n < 150 {
		t.Fatalf("rdmacm_check ran %d checks, want at least 150", n)
	}
	// The program's IDs went with it.
	for _, h := range []struct {
		h   *netns.Host
		log *bytes.Buffer
	}{{a, aLog}, {b, bLog}} {
		waitDetached(t, h.log)
		if list := cli(t, bin, h.h, "list", "-d", h.h.Link); strings.Contains(list, "cm_id ") || hasClientQP(list) {
			t.Fatalf("the daemon of %s still holds rdma_cm IDs or QPs:\n%s", h.h.Link, list)
		}
	}
}

// stockPair runs a stock server in srv and, once it listens, its client in
// cli, both on the libraries of lib (LD_LIBRARY_PATH, no `xdproce run`);
// a server that serves forever (qperf, rping -P) is stopped once the client
// is done. It fails the test unless both exit 0 (the stopped server aside).
func stockPair(t *testing.T, ctx context.Context, lib string, srv *netns.Host, srvArgv []string, cli *netns.Host,
	cliArgv []string, forever bool) (server, client string) {
	t.Helper()
	server, client, err := runPair(t, ctx, lib, srv, srvArgv, cli, cliArgv, forever)
	if err != nil {
		t.Fatalf("%s: %v\nclient:\n%s\nserver:\n%s", cliArgv[0], err, client, server)
	}
	return server, client
}

func runPair(t *testing.T, ctx context.Context, lib string, srv *netns.Host, srvArgv []string, cli *netns.Host,
	cliArgv []string, forever bool) (server, client string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	s, sout := startOnLibrary(t, ctx, lib, srv, srvArgv...)
	time.Sleep(500 * time.Millisecond) // the server listens
	c, cout := startOnLibrary(t, ctx, lib, cli, cliArgv...)
	cerr := c.Wait()
	if cerr != nil || forever {
		_ = s.Process.Signal(syscall.SIGTERM)
	}
	serr := s.Wait()
	if forever && serr != nil && strings.Contains(serr.Error(), "terminated") {
		serr = nil
	}
	if cerr != nil || serr != nil {
		err = fmt.Errorf("client %v, server %v", cerr, serr)
	}
	return sout.String(), cout.String(), err
}

// listenRace reports whether a stock client failed the way Debian's perftest
// does when its data connection's request (or SIDR lookup) reaches the
// server before the server listens: perftest v4.5-0.17 creates its data
// listener only after its side of a handshake the client leaves at the same
// moment, then fails (or crashes in its retry path) on REJECTED reason 8 /
// UNREACHABLE status 1, with rdma-core on Linux as well.
func listenRace(client string) bool {
	return strings.Contains(client, "Event: RDMA_CM_EVENT_REJECTED; error: 8.") ||
		strings.Contains(client, "Event: RDMA_CM_EVENT_UNREACHABLE; error: 1.") ||
		strings.Contains(client, "unexpected event from RDMA CM: Event rejected") // qperf, which sends its port before it listens
}

// retryListenRace runs a stock server and client pair (run returns the
// server's output, the client's and the error) up to five times while the
// client fails only by listenRace, and returns the client's output.
func retryListenRace(t *testing.T, run func() (server, client string, err error)) string {
	t.Helper()
	for try := 1; ; try++ {
		srv, out, err := run()
		if err == nil {
			return out
		}
		if !listenRace(out) || try == 5 {
			t.Fatalf("%v\nclient:\n%s\nserver:\n%s", err, out, srv)
		}
		t.Logf("try %d: the client connected before the server listened (the stock tool's own race): %v", try, err)
	}
}

// TestStockRDMACMTools runs Debian's stock rdma_cm programs, unmodified, on
// xdproce's librdmacm.so.1 and libibverbs.so.1 (LD_LIBRARY_PATH) between the
// daemons of two namespaces: rping both ways (and with -q, the application's
// own QP moved with rdma_init_qp_attr and rdma_establish), ucmatose (with
// rdma_migrate_id), udaddy (UD, SIDR), rdma_server/rdma_client and
// rdma_xserver/rdma_xclient (synchronous IDs), cmtime (50 connections at
// once), perftest's -R (rdma_cm data and control connections, UD included),
// qperf -cm1; and every Debian binary that imports librdmacm loads on it
// with BIND_NOW.
func TestStockRDMACMTools(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "rping", "ucmatose", "udaddy", "rdma_server", "ib_send_bw", "qperf")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	_, aLog := daemonUp(t, bin, a)
	_, bLog := daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	as, bs := a.Addr.String(), b.Addr.String()

	t.Run("symbols", func(t *testing.T) {
		for _, prog := range []string{"rping", "ucmatose", "udaddy", "mckey", "cmtime", "rdma_server", "rdma_client",
			"rdma_xserver", "rdma_xclient", "ib_send_bw", "ib_write_lat", "ib_read_bw", "ib_atomic_lat", "qperf"} {
			path, err := exec.LookPath(prog)
			if err != nil {
				t.Errorf("%s: %v", prog, err)
				continue
			}
			cmd := exec.CommandContext(ctx, path, "-h")
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "LD_BIND_NOW=1")
			out, _ := cmd.CombinedOutput()
			if strings.Contains(string(out), "symbol lookup error") || strings.Contains(string(out), "version `") {
				t.Errorf("%s does not load on the library:\n%s", prog, out)
			}
		}
	})

	rping := regexp.MustCompile(`(?m)^ping data: rdma-ping-999: `)
	for _, dir := range []struct {
		name     string
		srv, cli *netns.Host
		addr     string
	}{{"rping A to B", b, a, bs}, {"rping B to A", a, b, as}} {
		t.Run(dir.name, func(t *testing.T) {
			srv, cl := stockPair(t, ctx, lib, dir.srv, []string{"rping", "-s", "-a", dir.addr, "-v", "-C", "1000"},
				dir.cli, []string{"rping", "-c", "-a", dir.addr, "-v", "-V", "-C", "1000"}, false)
			// (rping's threads write the server's lines and its disconnect
			// message at once: the last line may come interleaved.)
			if !rping.MatchString(cl) || !strings.Contains(srv, "rdma-ping-999: NOPQ") {
				t.Fatalf("not 1000 pings:\nclient:\n%s\nserver:\n%s", lastLines(cl, 5), lastLines(srv, 5))
			}
			t.Log(lastLines(cl, 1))
		})
	}
	t.Run("rping with the route through another interface", func(t *testing.T) {
		// A's kernel routes B through another interface (a veth pair of its
		// own) with an address of its own, as on a host with two interfaces
		// on one subnet: no
		// xdproce device has that address, so the library takes the
		// device's, as the daemon's CM does, and rping connects through it.
		other := netip.MustParseAddr("198.18.77.1")
		for _, args := range [][]string{
			{"link", "add", "xdpalt0", "type", "veth", "peer", "name", "xdpalt1"},
			{"addr", "add", other.String() + "/32", "dev", "xdpalt0"},
			{"link", "set", "xdpalt0", "up"},
			{"link", "set", "xdpalt1", "up"},
			{"route", "add", bs + "/32", "dev", "xdpalt0", "src", other.String()},
		} {
			if out, err := a.Exec(ctx, "ip", args...); err != nil {
				t.Fatalf("ip %v: %v\n%s", args, err, out)
			}
		}
		t.Cleanup(func() { a.Exec(context.Background(), "ip", "link", "del", "xdpalt0") })
		if out, err := a.Exec(ctx, "ip", "route", "get", bs); err != nil || !strings.Contains(string(out), "src "+other.String()) {
			t.Fatalf("the route to B: %s %v", out, err)
		}
		srv, cl := stockPair(t, ctx, lib, b, []string{"rping", "-s", "-a", bs, "-v", "-C", "10"},
			a, []string{"rping", "-c", "-a", bs, "-v", "-V", "-C", "10"}, false)
		if !strings.Contains(cl, "ping data: rdma-ping-9: ") || !strings.Contains(srv, "server ping data: rdma-ping-9: ") {
			t.Fatalf("not 10 pings:\nclient:\n%s\nserver:\n%s", lastLines(cl, 5), lastLines(srv, 5))
		}
	})
	t.Run("rping -q", func(t *testing.T) {
		// The application's own QP: rdma_init_qp_attr, CONNECT_RESPONSE, rdma_establish.
		srv, cl := stockPair(t, ctx, lib, b, []string{"rping", "-s", "-q", "-a", bs, "-v", "-C", "20"},
			a, []string{"rping", "-c", "-q", "-a", bs, "-v", "-V", "-C", "20"}, false)
		if !strings.Contains(cl, "ping data: rdma-ping-19: ") || !strings.Contains(srv, "server ping data: rdma-ping-19: ") {
			t.Fatalf("not 20 pings:\nclient:\n%s\nserver:\n%s", lastLines(cl, 5), lastLines(srv, 5))
		}
	})
	complete := func(t *testing.T, srv, cl string) {
		t.Helper()
		for _, out := range []string{srv, cl} {
			if !strings.Contains(out, "test complete") || !strings.Contains(out, "return status 0") {
				t.Fatalf("incomplete:\nclient:\n%s\nserver:\n%s", cl, srv)
			}
		}
	}
	t.Run("ucmatose", func(t *testing.T) {
		srv, cl := stockPair(t, ctx, lib, b, []string{"ucmatose"}, a, []string{"ucmatose", "-s", bs}, false)
		complete(t, srv, cl)
	})
	t.Run("ucmatose -c 10 -C 20 -m", func(t *testing.T) {
		// Ten connections at once, the client's moved to a new channel (rdma_migrate_id).
		srv, cl := stockPair(t, ctx, lib, b, []string{"ucmatose", "-c", "10", "-C", "20"},
			a, []string{"ucmatose", "-s", bs, "-c", "10", "-C", "20", "-m"}, false)
		complete(t, srv, cl)
	})
	t.Run("udaddy", func(t *testing.T) {
		srv, cl := stockPair(t, ctx, lib, b, []string{"udaddy"}, a, []string{"udaddy", "-s", bs}, false)
		complete(t, srv, cl)
	})
	t.Run("rdma_server", func(t *testing.T) {
		srv, cl := stockPair(t, ctx, lib, b, []string{"rdma_server"}, a, []string{"rdma_client", "-s", bs}, false)
		if !strings.Contains(srv, "rdma_server: end 0") || !strings.Contains(cl, "rdma_client: end 0") {
			t.Fatalf("client:\n%s\nserver:\n%s", cl, srv)
		}
	})
	t.Run("rdma_xserver", func(t *testing.T) {
		// rdma_xclient posts 16 bytes inline on a QP that asked for no inline data, as rxe allows.
		srv, cl := stockPair(t, ctx, lib, b, []string{"rdma_xserver"}, a, []string{"rdma_xclient", "-s", bs}, false)
		if !strings.Contains(srv, "rdma_xserver: end 0") || !strings.Contains(cl, "rdma_xclient: end 0") {
			t.Fatalf("client:\n%s\nserver:\n%s", cl, srv)
		}
	})
	t.Run("cmtime", func(t *testing.T) {
		// 50 connections at once, each step timed; the server serves until stopped.
		_, cl := stockPair(t, ctx, lib, b, []string{"cmtime"}, a, []string{"cmtime", "-s", bs, "-c", "50"}, true)
		if !regexp.MustCompile(`(?m)^disconnect\s+:`).MatchString(cl) {
			t.Fatalf("cmtime printed no disconnect time:\n%s", cl)
		}
	})
	for _, c := range []struct {
		argv []string
		rows *regexp.Regexp
	}{
		{[]string{"ib_send_bw", "-R"}, bwRow},
		{[]string{"ib_send_lat", "-R"}, latRow},
		{[]string{"ib_write_bw", "-R"}, bwRow},
		{[]string{"ib_write_lat", "-R"}, latRow},
		{[]string{"ib_read_bw", "-R"}, bwRow},
		{[]string{"ib_read_lat", "-R"}, latRow},
		{[]string{"ib_send_bw", "-R", "-c", "UD"}, bwRow},
		{[]string{"ib_send_lat", "-R", "-c", "UD"}, latRow},
	} {
		t.Run(strings.Join(c.argv, " "), func(t *testing.T) {
			args := func(h *netns.Host) []string {
				return append([]string{c.argv[0], "-d", "xdp_" + h.Link, "-n", "500"}, c.argv[1:]...)
			}
			var cl string
			// perftest times with the CPU's clock; when it cannot calibrate
			// it (a loaded host) it prints the warning and "inf" figures:
			// that run measured nothing, and the next is asked, as in
			// TestStockToolsOverLibrary.
			for try := 1; try <= 3; try++ {
				cl = retryListenRace(t, func() (string, string, error) {
					return runPair(t, ctx, lib, b, args(b), a, append(args(a), bs), false)
				})
				if !strings.Contains(cl, calibrationWarning) {
					break
				}
				t.Logf("run %d: perftest could not calibrate its clock:\n%s", try, cl)
			}
			rows := c.rows.FindAllStringSubmatch(cl, -1)
			if len(rows) == 0 || rows[len(rows)-1][2] != "500" {
				t.Fatalf("no row of 500 iterations:\n%s", cl)
			}
			t.Log(strings.TrimSpace(rows[len(rows)-1][0]))
		})
	}
	t.Run("qperf -cm1", func(t *testing.T) {
		cl := retryListenRace(t, func() (string, string, error) {
			return runPair(t, ctx, lib, b, []string{"qperf"}, a, []string{"qperf", "-cm1", "-t", "2", bs, "rc_bw", "rc_lat"}, true)
		})
		bw := regexp.MustCompile(`(?m)^\s+bw\s+=\s+([\d.]+) ([KMG]B/sec)$`).FindStringSubmatch(cl)
		lat := regexp.MustCompile(`(?m)^\s+latency\s+=\s+([\d.]+) (us|ms)$`).FindStringSubmatch(cl)
		if bw == nil || lat == nil {
			t.Fatalf("qperf printed no bandwidth or latency:\n%s", cl)
		}
		t.Logf("rc_bw %s %s, rc_lat %s %s", bw[1], bw[2], lat[1], lat[2])
	})

	// Nothing of the programs is left in the daemons.
	for _, h := range []struct {
		h   *netns.Host
		log *bytes.Buffer
	}{{a, aLog}, {b, bLog}} {
		waitDetached(t, h.log)
		if list := cli(t, bin, h.h, "list", "-d", h.h.Link); strings.Contains(list, "client ") ||
			strings.Contains(list, "cm_id ") || hasClientQP(list) {
			t.Fatalf("the daemon of %s still serves clients, IDs or QPs:\n%s", h.h.Link, list)
		}
	}
}

// daemonRSS is a daemon's resident memory in kB.
func daemonRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no VmRSS")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestStockRDMACMCycles connects and disconnects 1000 times in a row: one
// `rping -c -C 1` after another against a persistent `rping -s -P`. Every
// cycle succeeds, and the daemons keep nothing of the 1000 processes: once
// the server is gone too, no client, rdma_cm ID or QP is listed, the CM's
// connections leave timewait, and the daemons' file descriptors and shared
// mappings are back to what they were (their memory stays within a bound).
func TestStockRDMACMCycles(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "rping")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	aUp, aLog := daemonUp(t, bin, a)
	bUp, bLog := daemonUp(t, bin, b)
	type daemonState struct{ fds, maps, rss int }
	state := func(pid int) daemonState {
		return daemonState{daemonFDs(t, pid), daemonSharedMaps(t, pid), daemonRSS(t, pid)}
	}
	waitDetached(t, aLog)
	waitDetached(t, bLog)
	baseA, baseB := state(aUp.Process.Pid), state(bUp.Process.Pid)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	bs := b.Addr.String()
	srv, sout := startOnLibrary(t, ctx, lib, b, "rping", "-s", "-P", "-a", bs, "-C", "1")
	time.Sleep(500 * time.Millisecond)
	const cycles = 1000
	start := time.Now()
	for i := range cycles {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "rping", "-c", "-a", bs, "-C", "1", "-v")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := a.Start(cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "ping data: rdma-ping-0: ") {
			_ = srv.Process.Kill()
			t.Fatalf("cycle %d: %v\n%s\nserver:\n%s", i, err, &out, lastLines(sout.String(), 10))
		}
	}
	t.Logf("%d rping connections, one after another, in %v", cycles, time.Since(start).Round(time.Millisecond))
	// The last client may exit before the server has printed its
	// disconnection: wait for it, boundedly.
	disconnects := func() int { return strings.Count(sout.String(), "server DISCONNECT EVENT") }
	for deadline := time.Now().Add(10 * time.Second); disconnects() < cycles && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := disconnects(); n != cycles {
		t.Errorf("the server saw %d disconnections, want %d", n, cycles)
	}
	_ = srv.Process.Kill()
	_ = srv.Wait()

	for _, d := range []struct {
		h    *netns.Host
		log  *bytes.Buffer
		pid  int
		base daemonState
	}{{a, aLog, aUp.Process.Pid, baseA}, {b, bLog, bUp.Process.Pid, baseB}} {
		waitDetached(t, d.log)
		deadline := time.Now().Add(60 * time.Second)
		for {
			list := cli(t, bin, d.h, "list", "-d", d.h.Link)
			if strings.Contains(list, "client ") || strings.Contains(list, "cm_id ") || hasClientQP(list) {
				t.Fatalf("the daemon of %s still serves clients, IDs or QPs:\n%s", d.h.Link, list)
			}
			waitDetached(t, d.log) // list's own connection
			now := state(d.pid)
			if strings.Contains(list, " connections 0\n") && now.fds == d.base.fds && now.maps == d.base.maps {
				t.Logf("the daemon of %s: %d fds, %d shared mappings, %d kB resident (%d kB before)", d.h.Link, now.fds,
					now.maps, now.rss, d.base.rss)
				if now.rss > d.base.rss+64<<10 {
					t.Errorf("the daemon of %s grew from %d kB to %d kB", d.h.Link, d.base.rss, now.rss)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the daemon of %s: %d fds, %d shared mappings (%d, %d before); list:\n%s", d.h.Link, now.fds,
					now.maps, d.base.fds, d.base.maps, list)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// TestStockRDMACMDeviceRemoval kills (SIGKILL) the daemon under `rping -s`
// waiting for a connection: as when an RNIC is removed, its event channel
// wakes with DEVICE_REMOVAL, which rping reports before it exits. A new
// daemon then serves a new pair at once.
func TestStockRDMACMDeviceRemoval(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "rping")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	bUp, _ := daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bs := b.Addr.String()
	srv, sout := startOnLibrary(t, ctx, lib, b, "rping", "-s", "-a", bs, "-C", "1")
	time.Sleep(500 * time.Millisecond) // it listens, its CM thread asleep in rdma_get_cm_event
	if err := bUp.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(sout.String(), "cma detected device removal") {
			t.Fatalf("rping -s: %v\n%s", err, sout)
		}
		t.Logf("rping -s: %v: %s", err, strings.TrimSpace(sout.String()))
	case <-time.After(20 * time.Second):
		_ = srv.Process.Kill()
		t.Fatalf("rping -s still runs 20 s after its daemon died:\n%s", sout)
	}
	// The kernel lets go of the dead daemon's XDP program and sockets as its process goes.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := linkInfoIn(b)
		if err != nil {
			t.Fatal(err)
		}
		if info.XDPProgramID == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("XDP program %d still on %s after its daemon was killed", info.XDPProgramID, b.Link)
		}
	}
	daemonUp(t, bin, b)
	_, cl := stockPair(t, ctx, lib, b, []string{"rping", "-s", "-a", bs, "-C", "10"},
		a, []string{"rping", "-c", "-a", bs, "-v", "-V", "-C", "10"}, false)
	if !strings.Contains(cl, "ping data: rdma-ping-9: ") {
		t.Fatalf("no 10 pings on the new daemon:\n%s", cl)
	}
}
