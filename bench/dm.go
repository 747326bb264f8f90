package bench

import (
	"context"
	"errors"
	"fmt"

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
// each device's (at most verbs.MaxDMSize).
func openDMPair(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options) (*rnicPair, error) {
	if 2*maxSize > verbs.MaxDMSize {
		return nil, fmt.Errorf("bench: device memory holds %d bytes, not 2×%d", verbs.MaxDMSize, maxSize)
	}
	return openPairWith(ctx, hosts, maxSize, opts, dmRegions)
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
