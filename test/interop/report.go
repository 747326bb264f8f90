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
	case r.Figure != "":
		return r.Figure
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
		tool := r.Tool
		if r.Options != "" {
			tool += " " + r.Options
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n",
			tool, r.Direction, r.MTU, r.Sizes, r.QPs, loss, strings.ToUpper(r.Status), fig, note)
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

// printGuestTable sets each xdproce ↔ xdproce cell run inside the guests
// beside the same tool's rxe ↔ rxe cell in the same guests and run (issue
// 13), with what xdproce's port ran with in each guest.
func printGuestTable(w io.Writer, results []result, datapath map[int]string) {
	var rows []string
	for _, r := range results {
		if !strings.HasPrefix(r.ID, r.Tool+"/gxdp-gxdp/") {
			continue
		}
		ref, ok := guestReference(results, r)
		if !ok {
			continue
		}
		ratio := "-"
		switch {
		case r.BWGbps > 0 && ref.BWGbps > 0:
			ratio = fmt.Sprintf("%.2f×", r.BWGbps/ref.BWGbps)
		case r.TypicalUs > 0 && ref.TypicalUs > 0:
			ratio = fmt.Sprintf("%.2f× the latency", r.TypicalUs/ref.TypicalUs)
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.Tool, r.Sizes, figure(ref), figure(r), ratio))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nIn the guests (kernel 6.1, virtio-net, 1 vCPU each), same run, PMTU 2048:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSIZE\trxe ↔ rxe\txdproce ↔ xdproce\tRATIO")
	for _, row := range rows {
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	for vm := 1; vm <= 2; vm++ {
		if d := datapath[vm]; d != "" {
			fmt.Fprintf(w, "xdproce in VM %d ran with: %s\n", vm, d)
		}
	}
}

// guestReference is the rxe ↔ rxe cell of the guest comparison for r.
func guestReference(results []result, r result) (result, bool) {
	for _, b := range results {
		if b.Reference && b.Tool == r.Tool && b.Sizes == r.Sizes && b.MTU == r.MTU && b.Loss == "" && b.QPs == r.QPs && b.Status == statusPass {
			return b, true
		}
	}
	return result{}, false
}
