package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// figure is the headline number of a result.
func figure(r result) string {
	switch {
	case r.BWGbps >= 0.01:
		return fmt.Sprintf("%.3f Gb/s", r.BWGbps)
	case r.BWGbps > 0: // 8-byte atomics
		return fmt.Sprintf("%.6f Gb/s", r.BWGbps)
	case r.TypicalUs > 0:
		return fmt.Sprintf("%.2f µs", r.TypicalUs)
	case len(r.Checks) > 0:
		ok := 0
		for _, c := range r.Checks {
			if c.OK {
				ok++
			}
		}
		return fmt.Sprintf("%d/%d checks", ok, len(r.Checks))
	}
	return ""
}

// summary is the progress line of a finished cell.
func summary(r result) string {
	s := strings.ToUpper(r.Status)
	if f := figure(r); f != "" {
		s += " " + f
	}
	if r.Reason != "" {
		s += " (" + r.Reason + ")"
	}
	if r.Seconds > 0 {
		s += fmt.Sprintf(" [%.1fs]", r.Seconds)
	}
	return s
}

// printTable prints the final matrix.
func printTable(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tDIRECTION\tMTU\tSIZE\tQPS\tLOSS\tRESULT\tFIGURE\tNOTE")
	for _, r := range results {
		loss := r.Loss
		if loss == "" {
			loss = "-"
		}
		note := r.Reason
		if len(note) > 100 {
			note = note[:97] + "..."
		}
		fig := figure(r)
		if ratio, ok := lossRatio(results, r); ok {
			fig += fmt.Sprintf(" (%.2f× of no loss)", ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n",
			r.Tool, r.Direction, r.MTU, r.Sizes, r.QPs, loss, strings.ToUpper(r.Status), fig, note)
	}
	tw.Flush()
}

// lossRatio is a loss cell's bandwidth over that of the same cell without
// loss in the same run.
func lossRatio(results []result, r result) (float64, bool) {
	if r.Loss == "" || r.BWGbps <= 0 {
		return 0, false
	}
	for _, b := range results {
		if b.Loss == "" && b.Tool == r.Tool && b.Direction == r.Direction && b.MTU == r.MTU && b.Sizes == r.Sizes &&
			b.QPs == r.QPs && b.BWGbps > 0 {
			return r.BWGbps / b.BWGbps, true
		}
	}
	return 0, false
}

func countStatus(results []result, status string) int {
	n := 0
	for _, r := range results {
		if r.Status == status {
			n++
		}
	}
	return n
}
