package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/test/interop/proc"
)

// The rsocket cells: rstream (blocking, rpoll-driven) and riostream, each
// rxe<->rxe and on the lib in both roles, as a user runs them.
func TestRsocketCells(t *testing.T) {
	cells := selectCells(buildMatrix(matrixConfig{BWIters: 25, LatIters: 200}), regexp.MustCompile(`^r(io)?stream/`))
	if len(cells) != 9 {
		t.Fatalf("%d rsocket cells, want 9", len(cells))
	}
	h := &harness{xdproce: "/x/xdproce"}
	want := map[string][2]string{ // server, client
		"rstream/lib-server/blocking": {"/x/xdproce run -d rxhost0 -- stdbuf -oL rstream -p PORT -S 65536 -C 200 -T v -T b",
			"stdbuf -oL rstream -s 198.18.0.2 -p PORT -S 65536 -C 200 -T v -T b"},
		"rstream/lib-client/async": {"stdbuf -oL rstream -p PORT -S 65536 -C 200 -T v -T a",
			"/x/xdproce run -d rxhost0 -- stdbuf -oL rstream -s 198.18.0.11 -p PORT -S 65536 -C 200 -T v -T a"},
		"riostream/rxe-rxe/blocking": {"stdbuf -oL riostream -p PORT -S 65536 -C 200 -T v -T b",
			"stdbuf -oL riostream -s 198.18.0.12 -p PORT -S 65536 -C 200 -T v -T b"},
	}
	seen := 0
	for _, c := range cells {
		if !c.cmTool() || !c.cmListener() || !c.needsRDMACM() || c.persistent() || c.timeout() < 60e9 {
			t.Errorf("%s: run as an rdma_cm tool cell with a listener, not persistent, bounded", c.ID())
		}
		w, ok := want[c.ID()]
		if !ok {
			continue
		}
		seen++
		port := func(s string) string { return strings.ReplaceAll(s, "PORT", strconv.Itoa(c.Port)) }
		if srv := proc.ShellJoin(h.argv(c, c.Server, "")); srv != port(w[0]) {
			t.Errorf("%s server: %q, want %q", c.ID(), srv, port(w[0]))
		}
		if cli := proc.ShellJoin(h.argv(c, c.Client, serverAddr(c.Server))); cli != port(w[1]) {
			t.Errorf("%s client: %q, want %q", c.ID(), cli, port(w[1]))
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d cells checked found", seen, len(want))
	}
}

func TestJudgeRsocket(t *testing.T) {
	const row = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\ncustom    64k     200     1       25m        1.50s      0.28     3750.00\n"
	async := cell{Tool: rstreamTool, Tag: "async", Server: lib, Client: vm1}
	asyncLib := cell{Tool: rstreamTool, Tag: "async", Server: vm1, Client: lib}
	for _, tc := range []struct {
		name           string
		c              cell
		srv, cli       string
		srvExit, cExit int
		status         string
		reason         string
	}{
		{"both report", async, row, row, 0, 0, statusPass, ""},
		{"no server row", async, "name bytes\n", row, 0, 0, statusFail, "server: no result row"},
		{"client failed", async, row, "rsend: Connection reset by peer\n", 0, 255, statusFail, "client (vm1) exit 255"},
		{"rdma-core's POLLHUP race on rxe", async, row, "name bytes\n", 0, 16, statusPass, rsocketHupRace},
		{"the same exit on xdproce's side is a failure", asyncLib, row, "name bytes\n", 0, 16, statusFail, "client (lib) exit 16"},
		{"the race needs the server's row", async, "", "name bytes\n", 0, 16, statusFail, "client (vm1) exit 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResult(tc.c)
			r.Server = &side{Endpoint: tc.c.Server.String(), Output: tc.srv, Exit: tc.srvExit}
			r.Client = &side{Endpoint: tc.c.Client.String(), Output: tc.cli, Exit: tc.cExit}
			judge(tc.c, &r)
			if r.Status != tc.status || !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("status %s (%s), want %s (%s)", r.Status, r.Reason, tc.status, tc.reason)
			}
			if tc.status == statusPass && tc.cExit == 0 && (r.BWGbps != 0.28 || r.Figure != "200 x 64k") {
				t.Errorf("figure %v %q", r.BWGbps, r.Figure)
			}
		})
	}
}
