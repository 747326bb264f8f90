package e2e

import (
	"bytes"
	"context"
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
// the pingpong's 2×300 messages).
func TestStockLoopback(t *testing.T) {
	netns.RequireRoot(t)
	requireStock(t, "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong")
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
	a := topo.Hosts[0]
	bin := buildCLI(t)
	daemonUp(t, bin, a)
	for _, tool := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong"} {
		t.Run(tool, func(t *testing.T) {
			before := loopbackPkts(t, a)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			args := []string{tool, "-d", "xdp_" + a.Link, "-g", "1", "-n", "300", "-c"}
			var sout, cout bytes.Buffer
			srv := runStock(ctx, bin, lib, a, false, args...)
			srv.Stdout, srv.Stderr = &sout, &sout
			srv.WaitDelay = 5 * time.Second // a program outliving `xdproce run` keeps the pipe open
			if err := a.Start(srv); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // the server listens
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
