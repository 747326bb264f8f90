package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/daemon"
	"github.com/xdproce/xdproce/internal/netns"
)

// repoRoot is the module's root: tests run in their package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// providerLibs builds xdproce's libibverbs.so.1 and its companion stubs
// (make provider) and returns their directory.
func providerLibs(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	if out, err := exec.Command("make", "-C", root, "--no-print-directory", "provider").CombinedOutput(); err != nil {
		t.Fatalf("make provider: %v\n%s", err, out)
	}
	return filepath.Join(root, "bin", "lib")
}

// requireStock fails (never skips: CI runs as root with the packages make
// test installs) unless Debian's stock RDMA binaries are installed.
func requireStock(t *testing.T, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s is not installed (make test installs perftest, ibverbs-utils): %v", b, err)
		}
	}
}

// runStock runs `xdproce run [-d IFACE] -- argv` in h with the libraries of
// lib, and returns its output.
func runStock(ctx context.Context, bin, lib string, h *netns.Host, dev bool, argv ...string) *exec.Cmd {
	args := []string{"run"}
	if dev {
		args = append(args, "-d", h.Link)
	}
	cmd := exec.CommandContext(ctx, bin, append(append(args, "--"), argv...)...)
	cmd.Env = append(os.Environ(), "XDPROCE_LIBDIR="+lib)
	return cmd
}

// TestStockLibraryABI runs verbs_check, an application of rdma-core's API
// compiled against Debian's libibverbs-dev, on xdproce's libibverbs.so.1:
// every verb it uses, what each returns (errno values included), data
// moved by every operation through both post APIs, the extended CQ,
// completion channels and async events, between the devices of two
// namespaces.
func TestStockLibraryABI(t *testing.T) {
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	check := buildVerbsCheck(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, check, a.Path(), "xdp_"+a.Link, a.Addr.String(), b.Path(), "xdp_"+b.Link, b.Addr.String())
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	t.Logf("verbs_check:\n%s", out)
	if err != nil {
		t.Fatalf("verbs_check: %v", err)
	}
	if n := checksPassed(t, out); n < 100 {
		t.Fatalf("verbs_check ran %d checks, want at least 100", n)
	}
}

// buildProviderCheck compiles provider/test/NAME.c as any rdma-core
// application would be, against Debian's headers, with the project's
// warnings and the libraries in libs (-libverbs ...), and returns the
// program's path.
func buildProviderCheck(t *testing.T, name string, libs ...string) string {
	t.Helper()
	check := filepath.Join(t.TempDir(), name)
	args := append([]string{"-O1", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-o", check,
		filepath.Join(repoRoot(t), "provider", "test", name+".c")}, libs...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s.c: %v\n%s", name, err, out)
	}
	return check
}

// buildVerbsCheck compiles provider/test/verbs_check.c, linked with
// -libverbs.
func buildVerbsCheck(t *testing.T) string {
	t.Helper()
	return buildProviderCheck(t, "verbs_check", "-libverbs")
}

// checksPassed is how many checks verbs_check ran, all passed; it fails
// the test otherwise.
func checksPassed(t *testing.T, out []byte) int {
	t.Helper()
	ok := regexp.MustCompile(`(?m)^(\d+) checks, 0 failed$`).FindSubmatch(out)
	if ok == nil {
		t.Fatalf("verbs_check failed or did not finish:\n%s", out)
	}
	n, _ := strconv.Atoi(string(ok[1]))
	return n
}

// TestStockLibraryDeviceFatal kills the daemon (SIGKILL) under an
// application of the library: as when an RNIC is removed, async_fd turns
// readable with IBV_EVENT_DEVICE_FATAL, every verb fails with EIO, and
// destroying the objects and closing the device still succeed.
func TestStockLibraryDeviceFatal(t *testing.T) {
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	up, _ := daemonUp(t, bin, a)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildVerbsCheck(t), "fatal", a.Path(), "xdp_"+a.Link, a.Addr.String())
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if sc.Text() == "ready" {
			if err := up.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("verbs_check fatal: %v\n%s", err, &out)
	}
	t.Logf("verbs_check fatal:\n%s", &out)
	checksPassed(t, out.Bytes())
}

// stockCell is one stock program run as server in b and client in a.
type stockCell struct {
	name string
	argv []string // without the device, GID index and server address
	// rows is the pattern of the figures both sides print: bwRow, latRow,
	// or pingRow for ibv_*_pingpong.
	rows *regexp.Regexp
}

var pingRow = regexp.MustCompile(`(?m)^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$`)

// calibrationWarning is what perftest prints when it cannot measure the CPU
// clock it times with (as test/interop's).
const calibrationWarning = "Correlation coefficient r^2"

// stockPort is the TCP port perftest and the pingpongs exchange their QPs'
// details on by default.
const stockPort = 18515

// awaitListening waits until a TCP socket listens on port in h's namespace,
// as a stock server does once it is ready for its client, for at most 30 s:
// a client started before then fails to connect, and on a loaded machine a
// server takes longer than any fixed pause to get there.
func awaitListening(t *testing.T, h *netns.Host, port int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !listening(t, h, port); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on TCP port %d after 30 s", port)
		}
	}
}

// stockCells are the stock programs of issues 15 and 16 that run on the
// host without rdma_cm: ibverbs-utils' pingpongs (-c checks every received
// byte) and perftest's tools, with the options applications use.
func stockCells() []stockCell {
	ping := func(tool string, args ...string) stockCell {
		return stockCell{tool + strings.Join(args, ""), append([]string{tool, "-n", "300", "-c"}, args...), pingRow}
	}
	perf := func(tool string, args ...string) stockCell {
		rows := bwRow
		if strings.HasSuffix(tool, "_lat") {
			rows = latRow
		}
		return stockCell{tool + " " + strings.Join(args, " "), append([]string{tool}, args...), rows}
	}
	cells := []stockCell{ping("ibv_rc_pingpong"), ping("ibv_rc_pingpong", "-N"), ping("ibv_rc_pingpong", "-e"),
		ping("ibv_uc_pingpong"), ping("ibv_srq_pingpong"), ping("ibv_ud_pingpong")}
	for _, verb := range []string{"send", "write", "read", "atomic"} {
		cells = append(cells, perf("ib_"+verb+"_bw", "-n", "300"), perf("ib_"+verb+"_lat", "-n", "300"))
	}
	return append(cells,
		perf("ib_write_bw", "--use_old_post_send", "-n", "300"),
		perf("ib_write_bw", "-a", "-n", "20"),
		perf("ib_read_bw", "-a", "-n", "20"),
		perf("ib_send_bw", "-q", "8", "-n", "200"),
		perf("ib_send_lat", "-I", "64", "-s", "64", "-n", "300"),
		// Event mode (perftest refuses it for WRITE, with rxe too).
		perf("ib_send_bw", "-e", "-n", "300"),
		perf("ib_read_bw", "-e", "-n", "300"),
		perf("ib_send_lat", "-e", "-n", "300"),
		// Datagrams: UD QPs and address handles.
		perf("ib_send_bw", "-c", "UD", "-n", "300"),
		perf("ib_send_lat", "-c", "UD", "-n", "300"),
	)
}

// TestStockToolsOverLibrary runs Debian's stock RDMA programs, unmodified,
// on xdproce through `xdproce run`, between two namespaces: first
// ibv_devices and ibv_devinfo with `xdproce run -d` starting and stopping the
// daemon itself, then every cell of stockCells on running daemons, each
// side's exit status and figures checked.
func TestStockToolsOverLibrary(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "ibv_devinfo", "ibv_rc_pingpong", "ib_write_bw")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	t.Run("xdproce run -d starts and stops the daemon", func(t *testing.T) {
		var out []byte
		if err := a.Do(func() (err error) {
			out, err = runStock(ctx, bin, lib, a, true, "ibv_devinfo", "-v").CombinedOutput()
			return err
		}); err != nil {
			t.Fatalf("ibv_devinfo -v: %v\n%s", err, out)
		}
		for _, want := range []string{"hca_id:\txdp_" + a.Link, "PORT_ACTIVE (4)", "link_layer:\t\tEthernet",
			fmt.Sprintf("::ffff:%s, RoCE v2", a.Addr), "active_mtu:\t\t4096 (5)",
			"maximum available device memory:\t262144Bytes"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, out)
			}
		}
		var left []string
		if err := a.Do(func() (err error) { left, err = daemon.Running(); return err }); err != nil || len(left) != 0 {
			t.Fatalf("daemons left running after xdproce run: %v %v", left, err)
		}
	})
	// runStock's commands start in the test's namespace; each runs in its
	// host's through Start.
	start := func(h *netns.Host, cmd *exec.Cmd, out *bytes.Buffer) error {
		cmd.Stdout, cmd.Stderr = out, out
		return h.Start(cmd)
	}

	daemonUp(t, bin, a)
	daemonUp(t, bin, b)
	t.Run("ibv_devices", func(t *testing.T) {
		var out bytes.Buffer
		cmd := runStock(ctx, bin, lib, a, false, "ibv_devices")
		if err := start(a, cmd, &out); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil || !regexp.MustCompile(`xdp_`+a.Link+`\s+[0-9a-f]{16}`).Match(out.Bytes()) {
			t.Fatalf("ibv_devices: %v\n%s", err, &out)
		}
	})
	for _, c := range stockCells() {
		t.Run(c.name, func(t *testing.T) {
			gid := "-x"
			if strings.HasPrefix(c.argv[0], "ibv_") {
				gid = "-g"
			}
			// GID 1 is the interface's IPv4 address (::ffff:a.b.c.d).
			args := func(h *netns.Host) []string {
				return append([]string{c.argv[0], "-d", "xdp_" + h.Link, gid, "1"}, c.argv[1:]...)
			}
			var sout, cout bytes.Buffer
			var cerr, serr error
			// perftest fails a run whose CPU clock it could not calibrate
			// (get_cpu_mhz's fit, which a loaded machine spoils) after the
			// transfer: that run says nothing of the library, so it is run
			// again, three times at most.
			for try := 1; try <= 3; try++ {
				sout.Reset()
				cout.Reset()
				cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
				srv := runStock(cctx, bin, lib, b, false, args(b)...)
				if err := start(b, srv, &sout); err != nil {
					cancel()
					t.Fatal(err)
				}
				awaitListening(t, b, stockPort)
				cli := runStock(cctx, bin, lib, a, false, append(args(a), b.Addr.String())...)
				if err := start(a, cli, &cout); err != nil {
					cancel()
					t.Fatal(err)
				}
				if cerr = cli.Wait(); cerr != nil {
					_ = srv.Process.Kill()
				}
				serr = srv.Wait()
				cancel()
				if cerr == nil || !strings.Contains(cout.String(), calibrationWarning) {
					break
				}
				t.Logf("run %d: perftest could not calibrate its clock:\n%s", try, &cout)
			}
			if cerr != nil || serr != nil {
				t.Fatalf("client %v, server %v\nclient:\n%s\nserver:\n%s", cerr, serr, &cout, &sout)
			}
			rows := c.rows.FindAllStringSubmatch(cout.String(), -1)
			if len(rows) == 0 {
				t.Fatalf("the client printed no figures:\n%s", &cout)
			}
			last := rows[len(rows)-1]
			if c.rows == bwRow {
				if bw, _ := strconv.ParseFloat(last[4], 64); bw <= 0 {
					t.Fatalf("bandwidth %s:\n%s", last[4], &cout)
				}
			}
			t.Logf("%s", strings.TrimSpace(last[0]))
		})
	}
}

// startOnLibrary starts a stock program in h on the library of lib, itself
// (no `xdproce run` between: a signal reaches the program), its output
// going to the buffer returned.
func startOnLibrary(t *testing.T, ctx context.Context, lib string, h *netns.Host, argv ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	out := new(lockedBuffer)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	cmd.Stdout, cmd.Stderr = out, out
	// A stuck tool fails its test instead of hanging it on the pipe a child kept.
	cmd.WaitDelay = 5 * time.Second
	if err := h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// lockedBuffer is a program's output that a test may read while the program
// still writes it (exec copies a pipe into it from a goroutine of its own).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// daemonFDs counts a daemon's open file descriptors.
func daemonFDs(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestStockLibraryClientKilled kills (SIGKILL) a stock program on the
// library mid-transfer: ib_write_bw's client, WRITEs in flight. Its daemon
// frees everything the program had: its session, QP, region, CQ and rings
// (xdproce list empty, the daemon's shared mappings and file descriptors
// back to what they were before the program came). Its peer, the server,
// learns of it on its TCP connection and fails instead of hanging, and its
// QP goes with it. A new pair of programs then runs on the same daemons.
//
// The peer is ib_write_bw's server, which posts nothing: perftest sets
// retry_cnt 7 without rdma_cm, and with 7 an RC requester whose responder
// vanished retries forever (rxe's rule, which the engines follow), so a
// peer that posted (-b) would never see its QP fail.
func TestStockLibraryClientKilled(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "ib_write_bw")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	aUp, aLog := daemonUp(t, bin, a)
	_, bLog := daemonUp(t, bin, b)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// noClients checks that h's daemon serves no client and holds no QP.
	noClients := func(h *netns.Host, log *bytes.Buffer) {
		t.Helper()
		waitDetached(t, log)
		if list := cli(t, bin, h, "list", "-d", h.Link); strings.Contains(list, "client ") || hasClientQP(list) {
			t.Fatalf("the daemon of %s still serves clients or QPs:\n%s", h.Link, list)
		}
	}
	sentPkts := func() int {
		t.Helper()
		m := regexp.MustCompile(`sent_pkts (\d+)`).FindStringSubmatch(cli(t, bin, a, "stats", "-d", a.Link))
		if m == nil {
			t.Fatal("no sent_pkts in xdproce stats")
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	noClients(a, aLog)
	noClients(b, bLog)
	waitDetached(t, aLog) // list's own connection
	baseFDs, baseMaps := daemonFDs(t, aUp.Process.Pid), daemonSharedMaps(t, aUp.Process.Pid)

	// GID 1 is the interface's IPv4 address (::ffff:a.b.c.d).
	args := func(h *netns.Host, extra ...string) []string {
		return append([]string{"ib_write_bw", "-d", "xdp_" + h.Link, "-x", "1", "-p", "18620"}, extra...)
	}
	transfer := []string{"-s", "65536", "-n", "5000000"}
	srv, sout := startOnLibrary(t, ctx, lib, b, args(b, transfer...)...)
	awaitListening(t, b, 18620)
	victim, vout := startOnLibrary(t, ctx, lib, a, args(a, append(transfer, b.Addr.String())...)...)

	// Mid-transfer: the program's QP is in RTS on A's daemon and frames flow.
	deadline := time.Now().Add(30 * time.Second)
	for sent := sentPkts(); ; {
		time.Sleep(200 * time.Millisecond)
		list := cli(t, bin, a, "list", "-d", a.Link)
		now := sentPkts()
		if strings.Contains(list, "comm ib_write_bw") && strings.Contains(list, "state RTS") && now > sent+100 {
			t.Logf("A's daemon while ib_write_bw transfers (%d frames sent in 200 ms):\n%s", now-sent, list)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transfer after 30 s:\n%s\nclient:\n%s\nserver:\n%s", list, vout, sout)
		}
		sent = now
	}
	if n, fds := daemonSharedMaps(t, aUp.Process.Pid), daemonFDs(t, aUp.Process.Pid); n <= baseMaps || fds <= baseFDs {
		t.Errorf("with a client the daemon maps %d memfds and holds %d fds, %d and %d without", n, fds, baseMaps, baseFDs)
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := victim.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the killed ib_write_bw: %v\n%s", err, vout)
	}

	// A's daemon let go of everything the dead program had.
	noClients(a, aLog)
	deadline = time.Now().Add(5 * time.Second)
	for {
		waitDetached(t, aLog) // list's and stats' connections
		fds, maps := daemonFDs(t, aUp.Process.Pid), daemonSharedMaps(t, aUp.Process.Pid)
		if fds == baseFDs && maps == baseMaps {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon holds %d fds and %d shared mappings, %d and %d before its client", fds, maps, baseFDs, baseMaps)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The peer sees its TCP connection close: it exits, failing, and B's
	// daemon has destroyed its QP.
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the dead program's peer exited 0:\n%s", sout)
		}
		t.Logf("the dead program's peer: %v\n%s", err, lastLines(sout.String(), 5))
	case <-time.After(40 * time.Second):
		list := cli(t, bin, b, "list", "-d", b.Link)
		_ = srv.Process.Kill()
		t.Fatalf("the dead program's peer still runs 40 s on:\n%s\nB's daemon:\n%s", sout, list)
	}
	noClients(b, bLog)

	// A new pair runs at once on the same daemons.
	srv, sout = startOnLibrary(t, ctx, lib, b, args(b, "-n", "300")...)
	time.Sleep(300 * time.Millisecond)
	c, cout := startOnLibrary(t, ctx, lib, a, args(a, "-n", "300", b.Addr.String())...)
	cerr := c.Wait()
	if cerr != nil {
		_ = srv.Process.Kill()
	}
	if serr := srv.Wait(); cerr != nil || serr != nil {
		t.Fatalf("a new pair: client %v, server %v\nclient:\n%s\nserver:\n%s", cerr, serr, cout, sout)
	}
	if m := bwRow.FindStringSubmatch(cout.String()); m == nil || m[2] != "300" {
		t.Fatalf("the new client printed no bandwidth row of 300 iterations:\n%s", cout)
	}
	noClients(a, aLog)
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
