package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/loader"
)

// buildCLI builds the xdproce command into a test directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "xdproce")
	cmd := exec.Command("go", "build", "-o", out, "github.com/xdproce/xdproce/cmd/xdproce")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// perfRun runs `xdproce perf` with the server on b and the client on a,
// each in its namespace, and returns both outputs.
func perfRun(t *testing.T, bin string, a, b *netns.Host, tool string, args ...string) (client, server string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var sout, cout bytes.Buffer
	srv := exec.CommandContext(ctx, bin, append([]string{"perf", tool, "-d", b.Link, "-timeout", "60s"}, args...)...)
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := b.Start(srv); err != nil {
		t.Fatal(err)
	}
	cli := exec.CommandContext(ctx, bin, append([]string{"perf", tool, "-d", a.Link, "-timeout", "60s"}, append(args, b.Addr.String())...)...)
	cli.Stdout, cli.Stderr = &cout, &cout
	if err := a.Start(cli); err != nil {
		t.Fatal(err)
	}
	cerr := cli.Wait()
	if cerr != nil {
		srv.Process.Kill()
	}
	serr := srv.Wait()
	if cerr != nil || serr != nil {
		t.Fatalf("%s %q: client %v, server %v\nclient:\n%s\nserver:\n%s", tool, args, cerr, serr, &cout, &sout)
	}
	return cout.String(), sout.String()
}

var (
	bwRow  = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
	latRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
)

// Every perftest tool runs through the command line between two
// namespaces, over XDP and AF_XDP, with --verify checking every byte that
// arrives; the tables are perftest's.
func TestPerfToolsOverXDP(t *testing.T) {
	netns.RequireRoot(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	for _, verb := range []string{"send", "write", "read", "atomic"} {
		for _, test := range []string{"bw", "lat"} {
			tool := "ib_" + verb + "_" + test
			t.Run(tool, func(t *testing.T) {
				args := []string{"-n", "300", "--verify", "--report_gbits", "-m", "1024"}
				if verb != "atomic" {
					args = append(args, "-s", "5000")
				}
				cout, sout := perfRun(t, bin, a, b, tool, args...)
				if test == "bw" {
					for side, out := range map[string]string{"client": cout, "server": sout} {
						m := bwRow.FindStringSubmatch(out)
						if m == nil || m[2] != "300" || m[5] == "0.000000" {
							t.Errorf("%s: no bandwidth row with 300 iterations and a message rate:\n%s", side, out)
						}
					}
				} else if m := latRow.FindStringSubmatch(cout); m == nil || m[2] != "300" {
					t.Errorf("no latency row with 300 iterations:\n%s", cout)
				}
				if !strings.Contains(cout+sout, "Data validation : every byte") && test == "bw" && verb != "send" {
					t.Errorf("no side reported its data check:\n%s\n%s", cout, sout)
				}
			})
		}
	}
	// --own-memory: regions of memory the program allocated (PD.RegMR), as
	// stock perftest registers its buffers; every byte checked.
	t.Run("ib_read_bw --own-memory", func(t *testing.T) {
		cout, sout := perfRun(t, bin, a, b, "ib_read_bw", "-n", "200", "-s", "70000", "--verify", "--own-memory")
		if !strings.Contains(cout+sout, "Data validation : every byte") {
			t.Errorf("no side reported its data check:\n%s\n%s", cout, sout)
		}
	})
	t.Run("ib_write_bw -a", func(t *testing.T) {
		cout, _ := perfRun(t, bin, a, b, "ib_write_bw", "-a", "-n", "5", "--verify")
		if n := len(bwRow.FindAllString(cout, -1)); n != 23 {
			t.Errorf("%d rows, want 23 sizes:\n%s", n, cout)
		}
	})
	t.Run("ibv_rc_pingpong", func(t *testing.T) {
		cout, sout := perfRun(t, bin, a, b, "ibv_rc_pingpong", "-g", "1", "-n", "500", "-s", "6000", "-c")
		if !strings.Contains(cout, "500 iters in") || !strings.Contains(sout, "6000000 bytes in") {
			t.Errorf("reports:\n%s\n%s", cout, sout)
		}
	})
	// A client killed mid-transfer (SIGKILL: no cleanup of its own) leaves
	// the server to notice and exit with an error instead of hanging, and
	// leaves nothing behind on its link: the kernel drops its XDP program
	// and UDP 4791 with the process, and a new run works at once.
	t.Run("client killed mid-transfer", func(t *testing.T) {
		var sout bytes.Buffer
		srv := exec.CommandContext(t.Context(), bin, "perf", "ib_write_bw", "-d", b.Link, "-timeout", "20s", "-n", "1000000", "-s", "65536")
		srv.Stdout, srv.Stderr = &sout, &sout
		if err := b.Start(srv); err != nil {
			t.Fatal(err)
		}
		var cout bytes.Buffer
		cli := exec.CommandContext(t.Context(), bin, "perf", "ib_write_bw", "-d", a.Link, "-timeout", "20s", "-n", "1000000", "-s", "65536", b.Addr.String())
		cli.Stdout, cli.Stderr = &cout, &cout
		if err := a.Start(cli); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // well into a million 64 KiB WRITEs
		if err := cli.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cli.Wait()
		done := make(chan error, 1)
		go func() { done <- srv.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("the server exited 0 after its client was killed:\n%s", &sout)
			}
			if !strings.Contains(sout.String(), "#bytes") {
				t.Fatalf("the client was killed before the transfer began:\n%s", &sout)
			}
			t.Logf("server: %v: %s", err, lastLine(sout.String()))
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			t.Fatalf("the server still runs 30 s after its client was killed:\n%s", &sout)
		}
		info, err := linkInfoIn(a)
		if err != nil {
			t.Fatal(err)
		}
		if info.XDPProgramID != 0 {
			t.Fatalf("XDP program %d still on %s after the client was killed", info.XDPProgramID, a.Link)
		}
		perfRun(t, bin, a, b, "ib_write_bw", "-n", "100", "-s", "4096", "--verify")
	})
	// On one CPU (GOMAXPROCS follows a cgroup's limit) the engines never
	// spin and the passive sides coalesce their receive wakeups by default
	// (verbs.DefaultRxCoalesce): every byte still arrives, and a READ
	// responder, which answers what it receives, is not held back.
	t.Run("one CPU, receive wakeups coalesced", func(t *testing.T) {
		t.Setenv("GOMAXPROCS", "1")
		for _, tool := range []string{"ib_write_bw", "ib_send_bw", "ib_read_bw"} {
			cout, sout := perfRun(t, bin, a, b, tool, "-n", "2000", "-s", "65536", "--verify")
			if m := bwRow.FindStringSubmatch(cout); m == nil || m[2] != "2000" {
				t.Errorf("%s: want 2000 iterations:\n%s\n%s", tool, cout, sout)
			}
		}
	})
	t.Run("ib_write_bw -q 8", func(t *testing.T) {
		cout, sout := perfRun(t, bin, a, b, "ib_write_bw", "-q", "8", "-n", "200", "-s", "8192", "--verify")
		if m := bwRow.FindStringSubmatch(cout); m == nil || m[2] != "1600" {
			t.Errorf("want 8×200 iterations:\n%s\n%s", cout, sout)
		}
	})
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// linkInfoIn reads h's link as its namespace sees it.
func linkInfoIn(h *netns.Host) (l loader.Link, err error) {
	err = h.Do(func() error {
		l, err = loader.LinkInfo(h.Link)
		return err
	})
	return l, err
}

// xdproce perf -R connects with rdma_cm (QP1, the CM's MADs, SIDR for UD)
// between two namespaces over XDP: first with each process's own device,
// then through a daemon on each side, whose CM the processes use.
func TestPerfRDMACM(t *testing.T) {
	netns.RequireRoot(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	runs := []struct {
		tool string
		args []string
	}{
		{"ib_send_bw", []string{"-n", "300", "-s", "5000", "--verify"}},
		{"ib_read_bw", []string{"-n", "300", "-s", "5000", "--verify"}},
		{"ib_write_lat", []string{"-n", "300", "-s", "8"}},
		{"ib_send_bw", []string{"-c", "UD", "-n", "300", "-s", "1024", "--verify"}},
	}
	check := func(t *testing.T, tool string, args []string, mode string) {
		cout, sout := perfRun(t, bin, a, b, tool, append([]string{"-R"}, args...)...)
		for side, out := range map[string]string{"client": cout, "server": sout} {
			if !strings.Contains(out, "rdma_cm QPs\t : ON") {
				t.Errorf("%s %s: the %s does not report rdma_cm:\n%s", mode, tool, side, out)
			}
		}
		row := bwRow
		if strings.HasSuffix(tool, "_lat") {
			row = latRow
		}
		if m := row.FindStringSubmatch(cout); m == nil || m[2] != "300" {
			t.Errorf("%s %s %q: no row with 300 iterations:\n%s", mode, tool, args, cout)
		}
	}
	for _, r := range runs {
		t.Run("own device/"+r.tool+strings.Join(r.args, ""), func(t *testing.T) { check(t, r.tool, r.args, "own device") })
	}
	t.Run("through daemons", func(t *testing.T) {
		daemonUp(t, bin, a)
		daemonUp(t, bin, b)
		for _, r := range runs[:2] {
			check(t, r.tool, r.args, "daemon")
		}
		// The daemons keep no ID and, once timewait is over, no connection.
		deadline := time.Now().Add(10 * time.Second)
		for _, h := range []*netns.Host{a, b} {
			for {
				list := cli(t, bin, h, "list", "-d", h.Link)
				if !strings.Contains(list, "cm_id ") && strings.Contains(list, "connections 0") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the daemon of %s keeps rdma_cm state:\n%s", h.Link, list)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
}
