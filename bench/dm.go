package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/verbs"
)

// Device memory (issue 34): the 8 B WRITE round trip and the 64 B WRITE
// message rate with both sides' regions in device memory (Device.AllocDM,
// PD.RegDMMR), beside the same on host memory and the AF_XDP floor. The
// issue's fast path places such WRITEs in XDP; without it the figures show
// what device memory alone costs or saves (nothing should differ: the
// engines copy into the map's pages as into any other).

// dmHalf bounds each half of a device-memory region: the points need 64 B.
const dmHalf = 2048

// openDMPair is openPair with each side's region in device memory, of
// 2·min(maxSize, dmHalf) bytes.
func openDMPair(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options) (*rnicPair, error) {
	half := min(maxSize, dmHalf)
	p, err := openPair(ctx, hosts, half, opts)
	if err != nil {
		return nil, err
	}
	for _, r := range []*rnic{p.a, p.b} {
		dm, err := r.dev.AllocDM(2 * half)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: %s: %d bytes of device memory: %w", r.host.Link, 2*half, err), p.Close())
		}
		mr, err := r.pd.RegDMMR(dm, 0, 2*half, regionAccess|verbs.AccessZeroBased)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: %s: a region over device memory: %w", r.host.Link, err), dm.Free(), p.Close())
		}
		host := r.mr
		r.mr, r.dm = mr, dm
		if err := host.Dereg(); err != nil {
			return nil, errors.Join(err, p.Close())
		}
	}
	return p, nil
}

// freeDM deregisters r's region over device memory and frees the memory,
// if it has one (before its device closes).
func (r *rnic) freeDM() error {
	if r.dm == nil {
		return nil
	}
	err := errors.Join(r.mr.Dereg(), r.dm.Free())
	r.dm = nil
	return err
}

// dmGroups measure on device memory: the 8 B WRITE round trip
// (busy-polled as the round trips on host memory are) and the 64 B WRITE
// message rate on one QP. plan puts each right after the same point on
// host memory, so that the machine's drift does not come between them.
func dmGroups(cfg Config) (roundTrip, msgRate group) {
	w, d := cfg.Warmup, cfg.Duration
	size := cfg.MsgRateSize
	rtt := step{"xdproce device memory WRITE ping-pong 8 B", func(ctx context.Context, p *rnicPair) ([]Result, string, error) {
		lat, err := p.writeLatency(ctx, w, d, 8)
		if err != nil {
			return nil, "", err
		}
		return []Result{rttResult(XdproceDM, false, OpWrite, 8, lat)}, latSummary(lat), nil
	}}
	rate := step{fmt.Sprintf("xdproce device memory WRITE %s message rate, 1 QP", FormatSize(size)), func(ctx context.Context, p *rnicPair) ([]Result, string, error) {
		win, err := p.stream(ctx, w, d, OpWrite, size, 1, cfg.Depth)
		if err != nil {
			return nil, "", err
		}
		return []Result{{Contender: XdproceDM, Measure: MsgRate, Op: OpWrite, Size: size, QPs: 1, MmsgS: win.mmsgPerSec()}}, rateSummary(win), nil
	}}
	return group{deviceMemory: true, rtt: true, attached: []step{rtt}}, group{deviceMemory: true, attached: []step{rate}}
}
