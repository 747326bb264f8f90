package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/xdproce/xdproce/bench/report"
	"github.com/xdproce/xdproce/verbs"
)

// Device memory (issue 34): the 8 B WRITE round trip and the WRITE message
// rate into regions of device memory, with the XDP responder fast path
// (docs/fastpath.md) and without, right after the AF_XDP floor, so that the
// three and host memory's figures are of one moment of the machine.

// dmGroups are the device-memory points of a run whose Config has
// DeviceMemory: the round trip at 8 B if LatSizes has it, the message
// rate over one QP at MsgRateSize if QPs are asked for.
func dmGroups(cfg Config) []group {
	w, d := cfg.Warmup, cfg.Duration
	var groups []group
	for _, fast := range []bool{true, false} {
		contender, where := report.XdproceDM, "into device memory"
		if fast {
			contender, where = report.XdproceDMFast, "into device memory, fast path"
		}
		if hasSize(cfg.LatSizes, 8) {
			groups = append(groups, group{dm: true, fast: fast, rtt: true, attached: []step{{fmt.Sprintf("xdproce WRITE ping-pong 8 B %s", where), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
				lat, err := p.writeLatency(ctx, w, d, 8)
				if err != nil {
					return nil, "", err
				}
				return []report.Result{rttResult(contender, false, report.OpWrite, 8, lat)}, latSummary(lat), nil
			}}}})
		}
		if len(cfg.QPs) > 0 {
			size := cfg.MsgRateSize
			groups = append(groups, group{dm: true, fast: fast, attached: []step{{fmt.Sprintf("xdproce WRITE %s message rate, 1 QP, %s", report.FormatSize(size), where), func(ctx context.Context, p *rnicPair) ([]report.Result, string, error) {
				win, err := p.stream(ctx, w, d, report.OpWrite, size, 1, cfg.Depth)
				if err != nil {
					return nil, "", err
				}
				return []report.Result{{Contender: contender, Measure: report.MsgRate, Op: report.OpWrite, Size: size, QPs: 1, MmsgS: win.mmsgPerSec()}}, rateSummary(win), nil
			}}}})
		}
	}
	return groups
}

func hasSize(sizes []int, s int) bool {
	for _, x := range sizes {
		if x == s {
			return true
		}
	}
	return false
}

// openDMPair is openPair with regions of device memory: 2·maxSize bytes of
// each device's (at most verbs.MaxDMSize), zero-based as regions over
// device memory are.
func openDMPair(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options) (*rnicPair, error) {
	if 2*maxSize > verbs.MaxDMSize {
		return nil, fmt.Errorf("bench: device memory holds %d bytes, not 2×%d", verbs.MaxDMSize, maxSize)
	}
	p := &rnicPair{busy: opts.BusyPoll}
	opts.Logger = slog.New(slog.DiscardHandler)
	for i, h := range hosts {
		r := &rnic{host: h, half: maxSize}
		if err := h.Do(func() error {
			var err error
			r.dev, err = verbs.Open(ctx, h.Link, opts)
			return err
		}); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: opening xdproce on %s: %w", h.Link, err), p.Close())
		}
		if i == 0 {
			p.a = r
		} else {
			p.b = r
		}
		var err error
		if r.pd, err = r.dev.AllocPD(); err == nil {
			if r.dm, err = r.dev.AllocDM((2*maxSize + 3) &^ 3); err == nil {
				r.mr, err = r.pd.RegDMMR(r.dm, 0, 2*maxSize, regionAccess|verbs.AccessZeroBased)
			}
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: device memory on %s: %w", h.Link, err), p.Close())
		}
	}
	return p, nil
}

// freeDM deregisters r's region and frees its device memory, if it has
// some (openDMPair).
func (r *rnic) freeDM() error {
	if r.dm == nil {
		return nil
	}
	var err error
	if r.mr != nil {
		err = r.mr.Dereg()
		r.mr = nil
	}
	err = errors.Join(err, r.dm.Free())
	r.dm = nil
	return err
}
