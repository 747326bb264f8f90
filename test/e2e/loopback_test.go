package e2e

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// loopbackPkts is the loopback_pkts counter of the daemon serving h's link.
func loopbackPkts(t *testing.T, h *netns.Host) uint64 {
	t.Helper()
	var n uint64
	if err := h.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := verbs.Dial(ctx, h.Link)
		if err != nil {
			return err
		}
		defer d.Close()
		c, err := d.Counters()
		for _, f := range c.Named() {
			if f.Name == "loopback_pkts" {
				n = f.Value
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStockLoopback runs ibverbs-utils' pingpongs with server and client
// on one device, two processes attached to one daemon, the client given
// the device's own address: their QPs and address handles reach the
// device's GID without ARP (which nobody would answer), and every frame
// loops back inside the daemon's engine (loopback_pkts grows by at least
// the pingpong's 2×300 messages; ibv_srq_pingpong's -n counts per QP).
func TestStockLoopback(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	for _, tool := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"} {
		t.Run(tool, func(t *testing.T) {
			before := loopbackPkts(t, a)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			args := []string{tool, "-d", "xdp_" + a.Link, "-g", "1", "-n", "300", "-c"}
			if tool == "ibv_srq_pingpong" {
				args = append(args, "-q", "4") // four RC QPs sharing one SRQ
			}
			var sout, cout bytes.Buffer
			srv := runStock(ctx, bin, lib, a, false, args...)
			srv.Stdout, srv.Stderr = &sout, &sout
			srv.WaitDelay = 5 * time.Second // a program outliving `xdproce run` keeps the pipe open
			if err := a.Start(srv); err != nil {
				t.Fatal(err)
			}
			awaitListening(t, a, stockPort)
			cli := runStock(ctx, bin, lib, a, false, append(args, a.Addr.String())...)
			cli.Stdout, cli.Stderr = &cout, &cout
			cli.WaitDelay = 5 * time.Second
			if err := a.Start(cli); err != nil {
				t.Fatal(err)
			}
			cerr := cli.Wait()
			if cerr != nil {
				_ = srv.Process.Kill()
			}
			serr := srv.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client %v, server %v\nclient:\n%s\nserver:\n%s", cerr, serr, &cout, &sout)
			}
			if m := pingRow.FindStringSubmatch(cout.String()); m == nil || m[1] != "300" {
				t.Fatalf("no report of 300 iterations:\n%s", &cout)
			}
			if n := loopbackPkts(t, a) - before; n < 600 {
				t.Errorf("loopback_pkts grew by %d, want at least 600", n)
			}
		})
	}
}

// TestStockLoopbackRDMACM runs rdmacm-utils with server and client on one
// device, the client given the device's own address: rping, ucmatose and
// udaddy connect through the CM's MADs looped from QP1 to QP1 and move
// their data inside the daemon. rping to 127.0.0.1 or 0.0.0.0 fails as
// on rxe (Debian 12's 6.1 kernel): the address resolves, the route does
// not ("rdma_resolve_route: No such device").
func TestStockLoopbackRDMACM(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "rping", "ucmatose", "udaddy")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	own := a.Addr.String()
	complete := func(t *testing.T, srv, cl string) {
		t.Helper()
		for _, out := range []string{srv, cl} {
			if !strings.Contains(out, "test complete") || !strings.Contains(out, "return status 0") {
				t.Fatalf("incomplete:\nclient:\n%s\nserver:\n%s", cl, srv)
			}
		}
	}
	for _, c := range []struct {
		name     string
		srv, cli []string
		check    func(t *testing.T, srv, cl string)
	}{
		{"rping", []string{"rping", "-s", "-a", own, "-v", "-C", "200"}, []string{"rping", "-c", "-a", own, "-v", "-V", "-C", "200"},
			func(t *testing.T, srv, cl string) {
				if !strings.Contains(cl, "ping data: rdma-ping-199: ") || !strings.Contains(srv, "server ping data: rdma-ping-199: ") {
					t.Fatalf("not 200 pings:\nclient:\n%s\nserver:\n%s", cl, srv)
				}
			}},
		{"rping to a wildcard listener", []string{"rping", "-s", "-v", "-C", "20"}, []string{"rping", "-c", "-a", own, "-v", "-V", "-C", "20"},
			func(t *testing.T, srv, cl string) {
				if !strings.Contains(cl, "ping data: rdma-ping-19: ") {
					t.Fatalf("not 20 pings:\nclient:\n%s\nserver:\n%s", cl, srv)
				}
			}},
		{"ucmatose", []string{"ucmatose"}, []string{"ucmatose", "-s", own}, complete},
		{"udaddy", []string{"udaddy"}, []string{"udaddy", "-s", own}, complete},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := loopbackPkts(t, a)
			srv, cl := stockPair(t, ctx, lib, a, c.srv, a, c.cli, false)
			c.check(t, srv, cl)
			if n := loopbackPkts(t, a) - before; n < 20 {
				t.Errorf("loopback_pkts grew by %d", n)
			}
		})
	}
	// (::1 as well in rdmacm.TestResolveLoopbackAddress: these namespaces
	// have no IPv6, and rping's getaddrinfo refuses it.)
	for _, dst := range []string{"127.0.0.1", "0.0.0.0"} {
		t.Run("rping to "+dst, func(t *testing.T) {
			c, out := startOnLibrary(t, ctx, lib, a, "rping", "-c", "-a", dst, "-C", "1", "-v")
			err := c.Wait()
			if err == nil || !strings.Contains(out.String(), "rdma_resolve_route: No such device") {
				t.Fatalf("rping -c -a %s: %v, want rxe's route failure:\n%s", dst, err, out)
			}
		})
	}
}

// latRowNaN is latRow that also takes the "-nan" perftest 4.5 prints for
// t_stdev when one sample is far out (a loaded machine's scheduling gap).
var latRowNaN = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(-?nan|[\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)

// TestStockLoopbackPerftest runs stock perftest with server and client on
// one device, with and without rdma_cm (-R): every side reports its row
// and the frames looped back inside the daemon.
func TestStockLoopbackPerftest(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "ib_write_bw", "ib_send_lat")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, c := range []struct {
		tool string
		args []string
		row  *regexp.Regexp
	}{
		{"ib_write_bw", nil, bwRow},
		{"ib_write_bw", []string{"-R"}, bwRow},
		{"ib_send_lat", nil, latRowNaN},
		{"ib_send_lat", []string{"-R"}, latRowNaN},
	} {
		t.Run(strings.Join(append([]string{c.tool}, c.args...), " "), func(t *testing.T) {
			before := loopbackPkts(t, a)
			argv := append([]string{c.tool, "-d", "xdp_" + a.Link, "-x", "1", "-n", "300"}, c.args...)
			out := retryListenRace(t, func() (string, string, error) {
				return runPair(t, ctx, lib, a, argv, a, append(argv, a.Addr.String()), false)
			})
			if m := c.row.FindStringSubmatch(out); m == nil || m[2] != "300" {
				t.Fatalf("no row of 300 iterations:\n%s", out)
			}
			if n := loopbackPkts(t, a) - before; n < 600 {
				t.Errorf("loopback_pkts grew by %d, want at least 600", n)
			}
		})
	}
}
