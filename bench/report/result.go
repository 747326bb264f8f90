package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

// Contenders, measures and operations as the JSON output names them.
const (
	Xdproce = "xdproce"
	// XdproceDaemon is xdproce through its daemon (xdproce up): the
	// application in one place, the device in another, as two processes.
	XdproceDaemon = "xdproce_daemon"
	// XdproceDaemonOwnMemory is XdproceDaemon with regions of the
	// application's own memory (RegMR), which the daemon reaches with
	// process_vm_readv/writev, instead of memfds both map (AllocMR).
	XdproceDaemonOwnMemory = "xdproce_daemon_own_memory"
	// XdproceLoopback is xdproce with both ends on one device (in-process):
	// its frames loop back inside the device, never on the link (issue 32).
	XdproceLoopback = "xdproce_loopback"
	// XdproceDM and XdproceDMFast are xdproce with regions of device
	// memory (issue 34), without and with the XDP responder fast path.
	XdproceDM     = "xdproce_dm"
	XdproceDMFast = "xdproce_dm_fast"
	// PerftestLibibverbs is Debian's stock perftest binary on xdproce's
	// libibverbs.so.1 through a daemon (xdproce run), and XdprocePerf the
	// same tool as xdproce perf (Go, the verbs API) through the same
	// daemon: issue 15's comparison. Their round trips are perftest's
	// ib_write_lat figures doubled (perftest prints half round trips).
	PerftestLibibverbs = "perftest_libibverbs"
	XdprocePerf        = "xdproce_perf"
	// PerftestDefaultDaemons and PerftestBusyDaemons are stock
	// ib_write_lat over the library through daemons started with their
	// defaults (spinning while traffic flows, sleeping when idle) and
	// with --busy-poll, the two alternating in one run (issue 34). The
	// idle CPU of a default daemon is XdproceDaemon's IdleCPU figure.
	PerftestDefaultDaemons = "perftest_default_daemons"
	PerftestBusyDaemons    = "perftest_busy_daemons"
	TCP                    = "tcp"
	// AFXDP is the floor: raw AF_XDP frames on the same link, no transport.
	AFXDP = "afxdp"

	Bandwidth = "bandwidth"
	RTT       = "rtt"
	MsgRate   = "msgrate"
	CPUPerGB  = "cpu_per_gb"
	// IdleCPU is the CPU an idle daemon (xdproce up, defaults) takes, in
	// percent of one CPU: its user+system time over a quiet window.
	IdleCPU = "idle_cpu"

	OpWrite    = "write"
	OpSend     = "send"
	OpRead     = "read"
	OpFetchAdd = "fetch_add" // loss sweep only (LossResult)
	OpStream   = "stream"
	OpPingPong = "pingpong"
	OpFrame    = "frame" // AFXDP: frames carrying Size payload bytes
	OpIdle     = "idle"  // IdleCPU: no operation
)

// Result is one figure of a run.
type Result struct {
	Contender string // Xdproce, TCP or AFXDP
	// XDPAttached marks a TCP figure measured with xdproce's XDP program
	// attached to both ends of the link (JSON "xdp_attached": true).
	XDPAttached bool
	Measure     string
	Op          string
	Size        int // message bytes
	QPs         int // queue pairs (xdproce) or connections (TCP); msgrate only

	GbitS     float64 // bandwidth
	P50us     float64 // rtt
	P99us     float64
	P999us    float64
	MmsgS     float64 // msgrate
	CPUSPerGB float64 // cpu_per_gb
	CPUPct    float64 // idle_cpu: percent of one CPU
}

// jsonResult is the wire form: a field is present exactly when it applies to
// the figure's measure.
type jsonResult struct {
	Contender   string   `json:"contender"`
	XDPAttached bool     `json:"xdp_attached,omitempty"`
	Measure     string   `json:"measure"`
	Op          string   `json:"op"`
	Size        *int     `json:"size,omitempty"`
	QPs         *int     `json:"qps,omitempty"`
	GbitS       *float64 `json:"gbit_s,omitempty"`
	P50us       *float64 `json:"p50_us,omitempty"`
	P99us       *float64 `json:"p99_us,omitempty"`
	P999us      *float64 `json:"p999_us,omitempty"`
	MmsgS       *float64 `json:"mmsg_s,omitempty"`
	CPUSPerGB   *float64 `json:"cpu_s_per_gb,omitempty"`
	CPUPct      *float64 `json:"cpu_percent,omitempty"`
}

// MarshalJSON writes the fields that apply to r.Measure.
func (r Result) MarshalJSON() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	j := jsonResult{Contender: r.Contender, XDPAttached: r.XDPAttached, Measure: r.Measure, Op: r.Op, Size: &r.Size}
	switch r.Measure {
	case Bandwidth:
		j.GbitS = &r.GbitS
	case RTT:
		j.P50us, j.P99us, j.P999us = &r.P50us, &r.P99us, &r.P999us
	case MsgRate:
		j.QPs, j.MmsgS = &r.QPs, &r.MmsgS
	case CPUPerGB:
		j.CPUSPerGB = &r.CPUSPerGB
	case IdleCPU:
		j.CPUPct = &r.CPUPct
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a figure and checks it against the schema: every field
// of its measure present, no field of another.
func (r *Result) UnmarshalJSON(b []byte) error {
	var j jsonResult
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*r = Result{Contender: j.Contender, XDPAttached: j.XDPAttached, Measure: j.Measure, Op: j.Op}
	want := map[string]bool{"size": true}
	switch j.Measure {
	case Bandwidth:
		want["gbit_s"] = true
	case RTT:
		want["p50_us"], want["p99_us"], want["p999_us"] = true, true, true
	case MsgRate:
		want["qps"], want["mmsg_s"] = true, true
	case CPUPerGB:
		want["cpu_s_per_gb"] = true
	case IdleCPU:
		want["cpu_percent"] = true
	}
	for _, f := range []struct {
		name string
		set  bool
		copy func()
	}{
		{"size", j.Size != nil, func() { r.Size = *j.Size }},
		{"qps", j.QPs != nil, func() { r.QPs = *j.QPs }},
		{"gbit_s", j.GbitS != nil, func() { r.GbitS = *j.GbitS }},
		{"p50_us", j.P50us != nil, func() { r.P50us = *j.P50us }},
		{"p99_us", j.P99us != nil, func() { r.P99us = *j.P99us }},
		{"p999_us", j.P999us != nil, func() { r.P999us = *j.P999us }},
		{"mmsg_s", j.MmsgS != nil, func() { r.MmsgS = *j.MmsgS }},
		{"cpu_s_per_gb", j.CPUSPerGB != nil, func() { r.CPUSPerGB = *j.CPUSPerGB }},
		{"cpu_percent", j.CPUPct != nil, func() { r.CPUPct = *j.CPUPct }},
	} {
		if f.set != want[f.name] {
			if f.set {
				return fmt.Errorf("bench: %s figure has field %q", j.Measure, f.name)
			}
			return fmt.Errorf("bench: %s figure lacks field %q", j.Measure, f.name)
		}
		if f.set {
			f.copy()
		}
	}
	return r.Validate()
}

// Validate checks that r names a known contender, measure and operation, and
// that the operation belongs to the contender and measure.
func (r Result) Validate() error {
	ops := map[string]map[string][]string{
		Xdproce:                {Bandwidth: {OpWrite, OpSend, OpRead}, RTT: {OpWrite, OpSend}, MsgRate: {OpWrite}, CPUPerGB: {OpWrite, OpSend, OpRead}},
		XdproceDaemon:          {Bandwidth: {OpWrite}, RTT: {OpWrite}, IdleCPU: {OpIdle}},
		PerftestDefaultDaemons: {RTT: {OpWrite}},
		PerftestBusyDaemons:    {RTT: {OpWrite}},
		XdproceDaemonOwnMemory: {Bandwidth: {OpWrite}},
		XdproceLoopback:        {Bandwidth: {OpWrite}, RTT: {OpWrite}},
		XdproceDM:              {RTT: {OpWrite}, MsgRate: {OpWrite}},
		XdproceDMFast:          {RTT: {OpWrite}, MsgRate: {OpWrite}},
		PerftestLibibverbs:     {Bandwidth: {OpWrite}, RTT: {OpWrite}},
		XdprocePerf:            {Bandwidth: {OpWrite}, RTT: {OpWrite}},
		TCP:                    {Bandwidth: {OpStream}, RTT: {OpPingPong}, MsgRate: {OpStream}, CPUPerGB: {OpStream}},
		AFXDP:                  {Bandwidth: {OpFrame}, RTT: {OpFrame}, MsgRate: {OpFrame}, CPUPerGB: {OpFrame}},
	}
	byMeasure, ok := ops[r.Contender]
	if !ok {
		return fmt.Errorf("bench: unknown contender %q", r.Contender)
	}
	allowed, ok := byMeasure[r.Measure]
	if !ok {
		return fmt.Errorf("bench: unknown measure %q", r.Measure)
	}
	found := false
	for _, op := range allowed {
		found = found || op == r.Op
	}
	if !found {
		return fmt.Errorf("bench: %s %s has no operation %q", r.Contender, r.Measure, r.Op)
	}
	if r.XDPAttached && r.Contender != TCP {
		return errors.New("bench: only TCP figures are marked xdp_attached")
	}
	return nil
}

// Report is the JSON document `xdproce bench --json` writes.
type Report struct {
	Results []Result `json:"results"`
}

// WriteJSON writes results as {"results": [...]}.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if results == nil {
		results = []Result{}
	}
	return enc.Encode(Report{Results: results})
}

// ReadJSON parses what WriteJSON wrote, checking every figure against the schema.
func ReadJSON(r io.Reader) ([]Result, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var rep struct {
		Results *[]Result `json:"results"`
	}
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("bench: reading results: %w", err)
	}
	if rep.Results == nil {
		return nil, errors.New(`bench: no "results" array`)
	}
	return *rep.Results, nil
}

// LossResult is one point of the sweep: a bandwidth (GbitS, MmsgS) or,
// for OpSendRTT and OpWriteRTT, round-trip latencies.
type LossResult struct {
	Op    string  `json:"op"`
	Size  int     `json:"size"`
	Loss  float64 `json:"loss"`
	GbitS float64 `json:"gbit_s,omitempty"`
	MmsgS float64 `json:"mmsg_s,omitempty"`
	// P50 and P99 are the round trips' (OpSendRTT, OpWriteRTT).
	P50 time.Duration `json:"p50_ns,omitempty"`
	P99 time.Duration `json:"p99_ns,omitempty"`
	// Lost is how many RoCEv2 packets the path dropped during the point,
	// both ways; Retransmitted how many packets both devices sent again
	// (retransmitted_pkts): their ratio shows how selective recovery is.
	Lost          uint64 `json:"lost"`
	Retransmitted uint64 `json:"retransmitted"`
	// Counters are the requester's transport counters over the point.
	Counters verbs.Counters `json:"-"`
}

// RetxPerLost is packets sent again per packet lost; 0 without loss.
func (r LossResult) RetxPerLost() float64 {
	if r.Lost == 0 {
		return 0
	}
	return float64(r.Retransmitted) / float64(r.Lost)
}

// OpName is an operation as the tables print it.
func OpName(op string) string {
	switch op {
	case OpWrite:
		return "WRITE"
	case OpSend:
		return "SEND"
	case OpRead:
		return "READ"
	}
	return op
}
