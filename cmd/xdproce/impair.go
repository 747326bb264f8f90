package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/xdproce/xdproce/impair"
)

// impairFlags declares impair's flags; its action impairs the RoCEv2 packets arriving on a forwarding port (a bridge
// port or a router's interface) until interrupted, printing the counters.
func impairFlags(fs *flag.FlagSet) action {
	dev := fs.String("dev", "", "forwarding port whose incoming RoCEv2 packets are impaired (required)")
	var cfg impair.Config
	fs.Float64Var(&cfg.Drop, "drop", 0, "probability of dropping a packet (0..1)")
	fs.Float64Var(&cfg.Duplicate, "dup", 0, "probability of sending a packet twice")
	fs.Float64Var(&cfg.Corrupt, "corrupt", 0, "probability of flipping one payload bit (breaks the ICRC)")
	fs.Float64Var(&cfg.Reorder, "reorder", 0, "probability of holding a packet back behind later ones")
	fs.IntVar(&cfg.ReorderDistance, "reorder-distance", 0, "how many later packets overtake a held one (0: default)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the decision stream (same seed, same decisions)")
	every := fs.Duration("interval", time.Second, "how often to print the counters")
	duration := fs.Duration("time", 0, "stop after this long (0: until interrupted)")
	return func(ctx context.Context, std stdio, _ []string) error {
		stdout := std.out
		if *dev == "" {
			return fmt.Errorf("%w: --dev IFACE is required", errUsage)
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		in, err := impair.Attach(*dev, cfg)
		if err != nil {
			return err
		}
		defer in.Close()
		if *duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *duration)
			defer cancel()
		}
		fmt.Fprintf(stdout, "impairing RoCEv2 arriving on %s: drop %g dup %g corrupt %g reorder %g seed %d\n",
			*dev, cfg.Drop, cfg.Duplicate, cfg.Corrupt, cfg.Reorder, cfg.Seed)
		tick := time.NewTicker(*every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				printImpairCounters(stdout, in.Counters())
				return nil
			case <-tick.C:
				printImpairCounters(stdout, in.Counters())
			}
		}
	}
}

func printImpairCounters(w io.Writer, c impair.Counters) {
	fmt.Fprintf(w, "received %d sent %d dropped %d duplicated %d corrupted %d reordered %d lost %d\n",
		c.Received, c.Sent, c.Dropped, c.Duplicate, c.Corrupted, c.Reordered, c.Lost)
}
