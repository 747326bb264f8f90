package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// LossConfig is `xdproce bench --loss`: xdproce's bandwidth between two
// namespaces joined through a bridge namespace whose ports drop RoCEv2
// packets (package impair) at each rate, in both directions.
type LossConfig struct {
	Rates    []float64 // drop probabilities per packet; 0, the baseline, is measured first whether listed or not
	Sizes    []int     // WRITE, SEND and READ message sizes; FETCH_ADD always moves 8 bytes
	Depth    int       // operations in flight
	Duration time.Duration
	Warmup   time.Duration
	MTU      int
	Seed     uint64 // of the drop decisions
	Progress io.Writer
}

// DefaultLoss is issue 17's sweep: 0.1%, 1% and 5% loss, 4 KiB and 64 KiB.
func DefaultLoss() LossConfig {
	return LossConfig{Rates: []float64{0.001, 0.01, 0.05}, Sizes: []int{4 << 10, 64 << 10}, Depth: 32,
		Duration: 2 * time.Second, Warmup: 300 * time.Millisecond, MTU: 4200, Seed: 1}
}

// LossResult is one point of the sweep.
type LossResult struct {
	Op    string  `json:"op"`
	Size  int     `json:"size"`
	Loss  float64 `json:"loss"`
	GbitS float64 `json:"gbit_s"`
	MmsgS float64 `json:"mmsg_s"`
	// Counters are the requester's transport counters over the point.
	Counters verbs.Counters `json:"-"`
}

// lossOps are the operations the sweep measures, in table order.
var lossOps = []string{OpWrite, OpSend, OpRead, OpFetchAdd}

// RunLoss measures every operation and size at every loss rate.
func RunLoss(ctx context.Context, cfg LossConfig) ([]LossResult, error) {
	if len(cfg.Sizes) == 0 || cfg.Depth < 1 || cfg.Duration <= 0 {
		return nil, errors.New("bench: a loss sweep needs sizes, a depth and a duration")
	}
	rates := []float64{0}
	for _, r := range cfg.Rates {
		if r < 0 || r >= 1 {
			return nil, fmt.Errorf("bench: loss rate %g not in [0, 1)", r)
		}
		if r > 0 && !slices.Contains(rates, r) {
			rates = append(rates, r)
		}
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	if _, err := netns.Sweep(namespacePrefix); err != nil {
		return nil, fmt.Errorf("bench: removing stale namespaces: %w", err)
	}
	topo, err := netns.Build(netns.Config{Prefix: namespacePrefix, Kind: netns.Bridge, MTU: cfg.MTU, Queues: 1, StaticNeighbors: true})
	if err != nil {
		return nil, fmt.Errorf("bench: building namespaces: %w", err)
	}
	defer topo.Close()
	var hosts [2]*Host
	for i, h := range topo.Hosts {
		hosts[i] = &Host{Name: h.Namespace.Name(), Link: h.Link, Addr: h.Addr, MTU: h.MTU, do: h.Do}
	}
	pair, err := openPair(ctx, hosts, slices.Max(cfg.Sizes), verbs.Options{})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	fmt.Fprintf(progress, "bench: loss sweep %s <-> %s through a bridge dropping RoCEv2 packets both ways, MTU %d, %v per point\n",
		hosts[0].Name, hosts[1].Name, cfg.MTU, cfg.Duration)
	var out []LossResult
	for _, rate := range rates {
		for i, h := range topo.Hosts {
			if err := topo.SetFaults(h, &impair.Config{Drop: rate, Seed: cfg.Seed + uint64(i)}); err != nil {
				return out, err
			}
		}
		for _, op := range lossOps {
			sizes := cfg.Sizes
			if op == OpFetchAdd {
				sizes = []int{8}
			}
			for _, size := range sizes {
				before, err := pair.a.dev.Counters()
				if err != nil {
					return out, err
				}
				win, err := pair.stream(ctx, cfg.Warmup, cfg.Duration, op, size, 1, cfg.Depth)
				if err != nil {
					return out, fmt.Errorf("bench: %g loss: %w", rate, err)
				}
				after, _ := pair.a.dev.Counters()
				r := LossResult{Op: op, Size: size, Loss: rate, GbitS: win.gbitPerSec(), MmsgS: win.mmsgPerSec(), Counters: counterDelta(after, before)}
				fmt.Fprintf(progress, "bench: %-9s %6s at %5.1f%% loss: %s, %.4f Mmsg/s\n", op, FormatSize(size), rate*100, bwSummary(win), r.MmsgS)
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// counterDelta is a - b, counter by counter.
func counterDelta(a, b verbs.Counters) verbs.Counters {
	na, nb := a.Named(), b.Named()
	var d verbs.Counters
	for i := range na {
		d.Set(na[i].Name, na[i].Value-nb[i].Value)
	}
	return d
}

// WriteLossTable prints, per operation and size, the figure at each loss
// rate and its ratio to the loss-free one (issue 17's target: ≥ 0.5× at 1%).
func WriteLossTable(w io.Writer, results []LossResult) error {
	var rates []float64
	for _, r := range results {
		if !slices.Contains(rates, r.Loss) {
			rates = append(rates, r.Loss)
		}
	}
	slices.Sort(rates)
	find := func(op string, size int, rate float64) (LossResult, bool) {
		for _, r := range results {
			if r.Op == op && r.Size == size && r.Loss == rate {
				return r, true
			}
		}
		return LossResult{}, false
	}
	var b strings.Builder
	b.WriteString("Under loss, xdproce <-> xdproce, one RC QP (Gbit/s; FETCH_ADD: million/s; ratio to no loss)\n")
	fmt.Fprintf(&b, "%9s %6s", "op", "size")
	for _, r := range rates {
		fmt.Fprintf(&b, " %16s", fmt.Sprintf("%g%% loss", r*100))
	}
	b.WriteString("  retries / lost-response retries at the highest loss\n")
	for _, op := range lossOps {
		var sizes []int
		for _, r := range results {
			if r.Op == op && !slices.Contains(sizes, r.Size) {
				sizes = append(sizes, r.Size)
			}
		}
		for _, size := range sizes {
			base, ok := find(op, size, 0)
			fmt.Fprintf(&b, "%9s %6s", op, FormatSize(size))
			var last LossResult
			for _, rate := range rates {
				r, have := find(op, size, rate)
				v, bv := r.GbitS, base.GbitS
				if op == OpFetchAdd {
					v, bv = r.MmsgS, base.MmsgS
				}
				cell := "–"
				if have {
					cell = formatValue(v, true)
					if rate > 0 && ok {
						cell += " (" + FormatRatio(v, bv, true, ok) + ")"
					}
					last = r
				}
				fmt.Fprintf(&b, " %16s", cell)
			}
			fmt.Fprintf(&b, "  %d / %d\n", last.Counters.CompleterRetryErr, last.Counters.LostResponseRetry)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
