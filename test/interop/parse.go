package main

import (
	"bufio"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// bwRow is one result row of a perftest bandwidth test.
type bwRow struct {
	Bytes       int64   `json:"bytes"`
	Iters       int64   `json:"iterations"`
	PeakGbps    float64 `json:"bw_peak_gbps"`
	AvgGbps     float64 `json:"bw_avg_gbps"`
	MsgRateMpps float64 `json:"msg_rate_mpps"`
}

// latRow is one result row of a perftest latency test (all times in µs).
type latRow struct {
	Bytes   int64   `json:"bytes"`
	Iters   int64   `json:"iterations"`
	Min     float64 `json:"t_min_us"`
	Max     float64 `json:"t_max_us"`
	Typical float64 `json:"t_typical_us"`
	Avg     float64 `json:"t_avg_us"`
	Stdev   float64 `json:"t_stdev_us,omitempty"`
	P99     float64 `json:"p99_us,omitempty"`
	P999    float64 `json:"p99_9_us,omitempty"`
}

// pingpongResult is what ibv_rc_pingpong prints at the end of a run.
type pingpongResult struct {
	Iters      int64   `json:"iterations"`
	UsecPerIt  float64 `json:"usec_per_iter"`
	Mbitps     float64 `json:"mbit_per_sec"`
	BytesMoved int64   `json:"bytes"`
}

var (
	// perftest's row formats: tabs and spaces mixed, so match any blank run.
	// A latency's standard deviation perftest could not compute (from the
	// deltas of a TSC that went backwards between CPUs) is "-nan" or "inf".
	bwRowRE  = regexp.MustCompile(`^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$`)
	latRowRE = regexp.MustCompile(`^\s*\d+\s+\d+(\s+([\d.]+|-?nan|-?inf)){5,7}\s*$`)
	ppBytes  = regexp.MustCompile(`(\d+) bytes in [\d.]+ seconds = ([\d.]+) Mbit/sec`)
	ppIters  = regexp.MustCompile(`(\d+) iters in [\d.]+ seconds = ([\d.]+) usec/iter`)
)

// mbPerSecToGbps converts perftest's MB/sec (2^20 bytes) to Gb/s (10^9 bits).
const mbPerSecToGbps = 1 << 20 * 8 / 1e9

// parseBW returns the result rows that follow a bandwidth header
// (" #bytes #iterations BW peak[...] BW average[...] MsgRate[Mpps]"),
// converted to Gb/s when perftest printed MB/sec.
func parseBW(out string) []bwRow {
	var rows []bwRow
	scale := 0.0 // 0 until a header was seen
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "#bytes") && strings.Contains(line, "BW average[") {
			scale = 1
			if strings.Contains(line, "BW average[MB/sec]") {
				scale = mbPerSecToGbps
			}
			continue
		}
		if scale == 0 || !bwRowRE.MatchString(line) {
			continue
		}
		f := strings.Fields(line)
		rows = append(rows, bwRow{
			Bytes:       atoi(f[0]),
			Iters:       atoi(f[1]),
			PeakGbps:    atof(f[2]) * scale,
			AvgGbps:     atof(f[3]) * scale,
			MsgRateMpps: atof(f[4]),
		})
	}
	return rows
}

// parseLat returns the result rows that follow a latency header
// (" #bytes #iterations t_min[usec] t_max[usec] t_typical[usec] ...").
func parseLat(out string) []latRow {
	var rows []latRow
	seen := false
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "#bytes") && strings.Contains(line, "t_typical[usec]") {
			seen = true
			continue
		}
		if !seen || !latRowRE.MatchString(line) {
			continue
		}
		f := strings.Fields(line)
		v := make([]float64, 7)
		for i := range v {
			if 2+i < len(f) {
				v[i] = atof(f[2+i])
			}
		}
		rows = append(rows, latRow{
			Bytes: atoi(f[0]), Iters: atoi(f[1]),
			Min: v[0], Max: v[1], Typical: v[2], Avg: v[3], Stdev: v[4], P99: v[5], P999: v[6],
		})
	}
	return rows
}

// parsePingpong reads ibv_rc_pingpong's two summary lines; ok is false when
// the iteration line is missing.
func parsePingpong(out string) (r pingpongResult, ok bool) {
	if m := ppBytes.FindStringSubmatch(out); m != nil {
		r.BytesMoved = atoi(m[1])
		r.Mbitps = atof(m[2])
	}
	m := ppIters.FindStringSubmatch(out)
	if m == nil {
		return r, false
	}
	r.Iters = atoi(m[1])
	r.UsecPerIt = atof(m[2])
	return r, true
}

// atoi and atof are only called on strings the row regexps already matched.
func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// atof is 0 for perftest's "-nan" and "inf": JSON has no such numbers.
func atof(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
