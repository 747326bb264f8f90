package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/verbs"
	"github.com/xdproce/xdproce/wire"
)

// daemonUp starts `xdproce up` on h's link and waits until it serves; the
// test's cleanup stops it (SIGTERM) if the test did not.
func daemonUp(t *testing.T, bin string, h *netns.Host, extra ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, append([]string{"up", "-d", h.Link}, extra...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var d *verbs.Device
		err := h.Do(func() (err error) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			d, err = verbs.Dial(ctx, h.Link)
			return err
		})
		if err == nil {
			d.Close()
			return cmd, &out
		}
		select {
		case <-exited:
			t.Fatalf("xdproce up exited:\n%s", &out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdproce up does not serve after 20 s: %v\n%s", err, &out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// daemonSharedMaps counts the mappings of memory a daemon (pid) shares
// with clients: rings and regions; the doorbell page is the daemon's own.
func daemonSharedMaps(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:xdproce-") - strings.Count(string(b), "memfd:xdproce-doorbell")
}

// waitDetached waits (5 s at most) until every client a daemon's log shows
// attaching has detached, and fails the test if one has not.
func waitDetached(t *testing.T, log *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(log.String(), "client detached") < strings.Count(log.String(), "client attached") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n, m := strings.Count(log.String(), "client attached"), strings.Count(log.String(), "client detached"); n != m {
		t.Fatalf("%d clients attached, %d detached:\n%s", n, m, log)
	}
}

// hasClientQP reports whether an `xdproce list` shows a QP other than the
// daemon's own QP1 (type GSI).
func hasClientQP(list string) bool {
	for _, l := range strings.Split(list, "\n") {
		if strings.HasPrefix(l, "link ") && !strings.Contains(l, "type GSI") {
			return true
		}
	}
	return false
}

// cli runs an xdproce command in h and returns its output.
func cli(t *testing.T, bin string, h *netns.Host, args ...string) string {
	t.Helper()
	var out []byte
	err := h.Do(func() (err error) {
		out, err = exec.Command(bin, args...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("xdproce %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// startPerf starts `xdproce perf` in h (a server without peer, else a client).
func startPerf(t *testing.T, ctx context.Context, bin string, h *netns.Host, port int, peer string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	full := append([]string{"perf", "ib_write_bw", "-d", h.Link, "-p", strconv.Itoa(port), "-timeout", "60s"}, args...)
	if peer != "" {
		full = append(full, peer)
	}
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// Two daemons, one per namespace, each serving two perf processes at once:
// the transfers are byte-checked; then one client is killed with SIGKILL
// mid-transfer, the other finishes, the daemon lets go of everything the
// dead one had, its peer fails instead of hanging, and a new client runs at
// once; xdproce down stops a daemon and takes its XDP program away.
func TestDaemonServesManyProcesses(t *testing.T) {
	netns.RequireRoot(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	aUp, aLog := daemonUp(t, bin, a, "--metrics", "127.0.0.1:19464") // the namespace's own loopback
	sharedMaps := func() int { return daemonSharedMaps(t, aUp.Process.Pid) }
	pcapFile := filepath.Join(t.TempDir(), "b.pcapng")
	bUp, _ := daemonUp(t, bin, b, "--pcap", pcapFile)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	t.Run("two clients at once", func(t *testing.T) {
		var srvs, clis []*exec.Cmd
		var outs []*bytes.Buffer
		for i, port := range []int{18601, 18602} {
			s, so := startPerf(t, ctx, bin, b, port, "", "-n", "400", "-s", strconv.Itoa(8192*(i+1)), "--verify")
			srvs, outs = append(srvs, s), append(outs, so)
		}
		time.Sleep(300 * time.Millisecond) // the servers listen
		for i, port := range []int{18601, 18602} {
			c, co := startPerf(t, ctx, bin, a, port, b.Addr.String(), "-n", "400", "-s", strconv.Itoa(8192*(i+1)), "--verify")
			clis, outs = append(clis, c), append(outs, co)
		}
		for i, c := range append(clis, srvs...) {
			if err := c.Wait(); err != nil {
				t.Fatalf("perf %d: %v\n%s", i, err, outs[(i+2)%4])
			}
		}
		for i, o := range outs {
			if m := bwRow.FindStringSubmatch(o.String()); m == nil || m[2] != "400" {
				t.Errorf("perf %d: no bandwidth row of 400 iterations:\n%s", i, o)
			}
		}
	})

	parent := t
	// B's daemon wrote what it sent and received as pcapng: RoCEv2 both
	// ways, every frame decoding, and as many as its counters say.
	t.Run("pcap", func(t *testing.T) {
		stats := cli(t, bin, b, "stats", "-d", b.Link)
		if err := bUp.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for bUp.ProcessState == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // daemonUp's goroutine reaps it
		}
		data, err := os.ReadFile(pcapFile)
		if err != nil {
			t.Fatal(err)
		}
		pkts, err := pcap.ReadNG(data)
		if err != nil {
			t.Fatal(err)
		}
		var in, out int
		for i, p := range pkts {
			var w wire.Packet
			if err := wire.Decode(p.Data, &w); err != nil {
				t.Fatalf("frame %d of the capture: %v", i, err)
			}
			if p.Outbound {
				out++
			} else {
				in++
			}
		}
		m := regexp.MustCompile(`sent_pkts (\d+) rcvd_pkts (\d+)`).FindStringSubmatch(stats)
		if m == nil {
			t.Fatalf("no counters in %q", stats)
		}
		sent, _ := strconv.Atoi(m[1])
		rcvd, _ := strconv.Atoi(m[2])
		// At least what the counters said before the daemon stopped (its
		// Close may send the ACKs it held).
		if sent == 0 || out < sent || in < rcvd {
			t.Fatalf("captured %d sent and %d received frames; the counters said %d and %d", out, in, sent, rcvd)
		}
		daemonUp(parent, bin, b) // the next subtests need B's daemon: the test's, not this subtest's
	})

	t.Run("client killed mid-transfer", func(t *testing.T) {
		long, lo := startPerf(t, ctx, bin, b, 18603, "", "-n", "1000000", "-s", "65536", "-timeout", "20s")
		short, so := startPerf(t, ctx, bin, b, 18604, "", "-D", "4", "-s", "16384", "--verify")
		time.Sleep(300 * time.Millisecond)
		victim, vo := startPerf(t, ctx, bin, a, 18603, b.Addr.String(), "-n", "1000000", "-s", "65536")
		other, oo := startPerf(t, ctx, bin, a, 18604, b.Addr.String(), "-D", "4", "-s", "16384", "--verify")
		time.Sleep(1500 * time.Millisecond)
		if n := sharedMaps(); n < 2*4 { // per client: its region, CQ and QP rings
			t.Errorf("the daemon maps %d memfds of its two clients", n)
		}
		// An operator sees both clients, their QPs and the counters.
		list := cli(t, bin, a, "list", "-d", a.Link)
		if strings.Count(list, "comm xdproce") < 4 || strings.Count(list, "\nclient ") != 2 || !strings.Contains(list, "state RTS") ||
			!strings.Contains(list, "peer "+b.Addr.String()) {
			t.Errorf("xdproce list while two clients run:\n%s\nvictim:\n%s\nits server:\n%s", list, vo, lo)
		}
		var metrics []byte
		err := a.Do(func() error {
			// Dialled here, on the namespace's thread (http.Client would
			// dial on a goroutine of its own, in the test's namespace).
			c, err := net.Dial("tcp", "127.0.0.1:19464")
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\n\r\n"); err != nil {
				return err
			}
			metrics, err = io.ReadAll(c)
			return err
		})
		// Two clients, and perhaps list's and stats' connections not yet
		// seen to close.
		if m := regexp.MustCompile(`xdproce_clients\{device="xdp_` + regexp.QuoteMeta(a.Link) + `"\} (\d+)`).FindSubmatch(metrics); err != nil || m == nil || string(m[1]) < "2" {
			t.Errorf("metrics (%v):\n%s\ndaemon:\n%s", err, metrics, aLog)
		}
		if m := regexp.MustCompile(`lqpn (\d+) `).FindStringSubmatch(list); m != nil {
			if qp := cli(t, bin, a, "stats", "-d", a.Link, "--qp", m[1]); !strings.Contains(qp, "lqpn "+m[1]+" ") || !strings.Contains(qp, "sent_pkts") {
				t.Errorf("xdproce stats --qp %s:\n%s", m[1], qp)
			}
		}
		if stats := cli(t, bin, a, "stats", "-d", a.Link); !strings.Contains(stats, "link xdp_"+a.Link+"/1 sent_pkts ") ||
			!strings.Contains(stats, "xdp_redirected ") {
			t.Errorf("xdproce stats:\n%s", stats)
		}
		if err := victim.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = victim.Wait()
		if err := other.Wait(); err != nil {
			t.Fatalf("the other client failed: %v\n%s", err, oo)
		}
		if err := short.Wait(); err != nil {
			t.Fatalf("the other client's server failed: %v\n%s", err, so)
		}
		done := make(chan error, 1)
		go func() { done <- long.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("the dead client's server exited 0:\n%s", lo)
			}
		case <-time.After(40 * time.Second):
			_ = long.Process.Kill()
			t.Fatalf("the dead client's server still runs 40 s on:\n%s", lo)
		}
		// The daemon noticed: the dead client detached, and its QPs are gone.
		waitDetached(t, aLog)
		if list := cli(t, bin, a, "list", "-d", a.Link); strings.Contains(list, "client ") || hasClientQP(list) {
			t.Errorf("the clients' QPs outlive them:\n%s", list)
		}
		if n := sharedMaps(); n != 0 {
			t.Errorf("the daemon still maps %d memfds of its departed clients", n)
		}
		// And a new pair runs at once.
		s, sout := startPerf(t, ctx, bin, b, 18605, "", "-n", "200", "-s", "4096", "--verify")
		time.Sleep(300 * time.Millisecond)
		c, cout := startPerf(t, ctx, bin, a, 18605, b.Addr.String(), "-n", "200", "-s", "4096", "--verify")
		if err := c.Wait(); err != nil {
			t.Fatalf("new client: %v\n%s", err, cout)
		}
		if err := s.Wait(); err != nil {
			t.Fatalf("new server: %v\n%s", err, sout)
		}
	})

	t.Run("down", func(t *testing.T) {
		var out []byte
		err := a.Do(func() (err error) {
			out, err = exec.Command(bin, "down", "-d", a.Link).CombinedOutput()
			return err
		})
		if err != nil || !strings.Contains(string(out), "down") {
			t.Fatalf("xdproce down: %v\n%s", err, out)
		}
		info, err := linkInfoIn(a)
		if err != nil {
			t.Fatal(err)
		}
		if info.XDPProgramID != 0 {
			t.Fatalf("XDP program %d still on %s after xdproce down", info.XDPProgramID, a.Link)
		}
	})

	// A daemon killed with SIGKILL mid-transfer: its client fails instead of
	// hanging, the kernel takes the XDP program away with the process, and a
	// new daemon serves at once.
	t.Run("daemon killed and restarted", func(t *testing.T) {
		up, _ := daemonUp(t, bin, a)
		s, sout := startPerf(t, ctx, bin, b, 18606, "", "-n", "1000000", "-s", "65536", "-timeout", "6s")
		time.Sleep(300 * time.Millisecond)
		c, cout := startPerf(t, ctx, bin, a, 18606, b.Addr.String(), "-n", "1000000", "-s", "65536", "-timeout", "6s")
		// A Go client too, with a QP, to see what the application sees.
		var g *verbs.Device
		if err := a.Do(func() (err error) { g, err = verbs.Dial(ctx, a.Link); return err }); err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		gpd, err := g.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		gcq, err := g.CreateCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		gqp, err := gpd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: gcq, RecvCQ: gcq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if err := up.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if ev, err := g.GetAsyncEvent(ectx); err != nil || ev.Type != verbs.EventDeviceFatal {
			t.Errorf("after the daemon died: event %v, %v; want DEVICE_FATAL", ev.Type, err)
		}
		if _, err := gqp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrDeviceFatal) {
			t.Errorf("post after the daemon died: %v", err)
		}
		for _, p := range []struct {
			cmd *exec.Cmd
			out *bytes.Buffer
		}{{c, cout}, {s, sout}} {
			done := make(chan error, 1)
			go func() { done <- p.cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("a perf run exited 0 though the daemon died under it:\n%s", p.out)
				}
			case <-time.After(40 * time.Second):
				_ = p.cmd.Process.Kill()
				t.Fatalf("a perf run still runs 40 s after the daemon died:\n%s", p.out)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			info, err := linkInfoIn(a)
			if err != nil {
				t.Fatal(err)
			}
			if info.XDPProgramID == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("XDP program %d still on %s after its daemon was killed", info.XDPProgramID, a.Link)
			}
			time.Sleep(50 * time.Millisecond)
		}
		daemonUp(t, bin, a)
		s, sout = startPerf(t, ctx, bin, b, 18607, "", "-n", "200", "-s", "4096", "--verify")
		time.Sleep(300 * time.Millisecond)
		c, cout = startPerf(t, ctx, bin, a, 18607, b.Addr.String(), "-n", "200", "-s", "4096", "--verify")
		if err := c.Wait(); err != nil {
			t.Fatalf("client on the new daemon: %v\n%s", err, cout)
		}
		if err := s.Wait(); err != nil {
			t.Fatalf("server: %v\n%s", err, sout)
		}
	})
}
