package main

// Data-integrity cells: xdproce (in this process, on the veth in the rxepeer
// netns) against verbs_peer.py on real rxe in VM 1, one RC QP each side,
// every RC operation in both directions, every byte checked. Stock perftest
// fills its buffers with random bytes, so the perftest cells can only check
// completions and figures; these cells check the data.
//
// Both buffers are 1 MiB with distinct patterns: verbs_peer's byte[i] =
// i&0xff, ours byte[i] = (7i+3)&0xff. Every operation uses its own region
// of each buffer (Layout), the harness keeps a model of both
// buffers, checks each operation's bytes as it completes, and at the end
// compares both whole buffers with the models, which catches stray writes.

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/xdproce/xdproce/test/interop/integrity"
	"github.com/xdproce/xdproce/test/interop/proc"
)

// runIntegrity runs one data-integrity cell against VM 1.
func (h *harness) runIntegrity(ctx context.Context, c cell) (r result) {
	r = newResult(c)
	start := time.Now()
	defer func() { r.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds() }()
	ours := &side{Endpoint: xdp.String(), Cmd: fmt.Sprintf("(in-process verbs device on %s, netns %s)", hostIface, netns)}
	shell := integrity.PeerCommand(c.MTU)
	theirs := &side{Endpoint: vm1.String(), Cmd: shell}
	r.Server, r.Client = ours, theirs

	fail := func(err error) result {
		r.Status, r.Reason = statusFail, err.Error()
		return r
	}
	dev, err := integrity.OpenDeviceIn(ctx, netns, hostIface)
	if err != nil {
		ours.Exit, ours.Error = -1, err.Error()
		theirs.Exit, theirs.Error = -1, "not started"
		return fail(err)
	}
	defer func() {
		if err := dev.Close(); err != nil && r.Status == statusPass {
			r.Status, r.Reason = statusFail, "close the xdproce device: "+err.Error()
		}
	}()
	pp, err := integrity.StartPeerProc(ctx, h.peer.script, integrity.IntegrityVM, shell, c.timeout(), h.logf)
	if err != nil {
		theirs.Exit, theirs.Error = -1, err.Error()
		return fail(err)
	}
	run := &integrity.Cell{MTU: c.MTU, Dev: dev, MyGID: hostAddr, PeerAddr: netip.MustParseAddr(vmAddr(integrity.IntegrityVM)),
		Peer: pp.Stream, Logf: h.logf}
	runErr := run.Run(ctx)
	out, perr := pp.Stop(30 * time.Second)
	theirs.Output, theirs.Exit = out, proc.ExitCode(perr)
	if perr != nil {
		theirs.Error = perr.Error()
	}
	r.Checks = run.Checks
	var lines []string
	for _, ch := range run.Checks {
		mark := "ok  "
		if !ch.OK {
			mark = "FAIL"
		}
		l := mark + " " + ch.Name
		if ch.Detail != "" {
			l += ": " + ch.Detail
		}
		lines = append(lines, l)
	}
	ours.Output = strings.Join(lines, "\n")

	var problems []string
	if runErr != nil {
		problems = append(problems, runErr.Error())
		ours.Exit, ours.Error = 1, runErr.Error()
	}
	for _, ch := range run.Failed() {
		problems = append(problems, ch.Name+": "+ch.Detail)
	}
	if perr != nil {
		msg := "verbs_peer: " + perr.Error()
		if e := strings.TrimSpace(pp.Stderr.String()); e != "" {
			msg += " (" + lastLines(e, 1) + ")"
		}
		problems = append(problems, msg)
	}
	if ctx.Err() != nil {
		problems = append([]string{"interrupted"}, problems...)
	}
	if len(problems) > 0 {
		if len(problems) > 3 {
			problems = append(problems[:3], fmt.Sprintf("and %d more", len(problems)-3))
		}
		r.Status, r.Reason = statusFail, strings.Join(problems, "; ")
		return r
	}
	r.Status = statusPass
	return r
}
