package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/impair/spoof"
)

// spoofFlags declares spoof's flags; its action attacks one RC connection from an interface that sees its
// traffic (see package impair/spoof and docs/security.md).
func spoofFlags(fs *flag.FlagSet) action {
	dev := fs.String("dev", "", "interface that sees the victim's traffic and sends the forged frames (required)")
	victim := fs.String("victim", "", "the victim's IP address (required)")
	victimMAC := fs.String("victim-mac", "", "the victim's MAC address (required)")
	as := fs.String("as", "", "the IP address of the peer to impersonate (required)")
	asMAC := fs.String("as-mac", "", "the MAC address of the peer to impersonate (required)")
	qpn := fs.Uint("qpn", 0, "the victim's QP number (0: learn it from the peer's frames)")
	pmtu := fs.Int("pmtu", 1024, "the connection's path MTU")
	classes := fs.String("classes", "all", "forged frame classes: blind, edges, in-window, malformed, exact (all: every one but exact)")
	exact := fs.Bool("exact", false, "allow the exact class: frames no RNIC can tell from the peer's (they break the connection)")
	interval := fs.Duration("interval", time.Millisecond, "time between two forged frames")
	duration := fs.Duration("time", 10*time.Second, "stop after this long")
	seed := fs.Uint64("seed", 1, "seed of the forger's choices")
	return func(ctx context.Context, std stdio, _ []string) error {
		stdout := std.out
		cfg := spoof.Config{VictimQPN: uint32(*qpn), PMTU: *pmtu, ExactHits: *exact, Seed: *seed}
		var err error
		if cfg.Classes, err = spoof.ParseClasses(*classes); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		for _, e := range []struct {
			ep      *spoof.Endpoint
			ip, mac string
			name    string
		}{{&cfg.Victim, *victim, *victimMAC, "victim"}, {&cfg.Peer, *as, *asMAC, "as"}} {
			if e.ep.IP, err = netip.ParseAddr(e.ip); err != nil {
				return fmt.Errorf("%w: --%s: %v", errUsage, e.name, err)
			}
			if e.ep.MAC, err = net.ParseMAC(e.mac); err != nil {
				return fmt.Errorf("%w: --%s-mac: %v", errUsage, e.name, err)
			}
		}
		if *dev == "" {
			return fmt.Errorf("%w: --dev IFACE is required", errUsage)
		}
		sp, err := spoof.New(cfg)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		ctx, cancel := context.WithTimeout(ctx, *duration)
		defer cancel()
		fmt.Fprintf(stdout, "spoofing %s towards %s on %s for %v\n", *as, *victim, *dev, *duration)
		err = sp.Run(ctx, *dev, *interval)
		fmt.Fprintln(stdout, sp.Stats())
		return err
	}
}
