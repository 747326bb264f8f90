package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseSizes reads a comma-separated list of byte counts, each a number with
// an optional suffix K, KiB, M or MiB (powers of 1024): "64,4K,1MiB".
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		for _, u := range []struct {
			suffix string
			mult   int
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
			if strings.HasSuffix(f, u.suffix) {
				f, mult = strings.TrimSpace(strings.TrimSuffix(f, u.suffix)), u.mult
				break
			}
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bench: size %q is not a positive number of bytes", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// ParseCounts reads a comma-separated list of positive integers: "1,2,4".
func ParseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bench: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// PowersOf4 lists lo, 4·lo, 16·lo, ... up to hi.
func PowersOf4(lo, hi int) []int {
	var out []int
	for n := lo; n <= hi; n *= 4 {
		out = append(out, n)
	}
	return out
}

// Latencies summarises round-trip samples.
type Latencies struct {
	N              int
	P50, P99, P999 time.Duration
}

// Summarize returns the nearest-rank percentiles of the samples (sorted in place).
func Summarize(samples []time.Duration) Latencies {
	slices.Sort(samples)
	// Nearest rank: the smallest sample with at least perMille/1000 of all
	// samples at or below it; integer arithmetic, so 99% of 100 is rank 99.
	rank := func(perMille int) time.Duration {
		if len(samples) == 0 {
			return 0
		}
		i := (perMille*len(samples)+999)/1000 - 1
		return samples[max(i, 0)]
	}
	return Latencies{N: len(samples), P50: rank(500), P99: rank(990), P999: rank(999)}
}
