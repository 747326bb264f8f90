package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/test/interop/proc"
)

// The libfabric cells: fi_pingpong over verbs (msg) and verbs;ofi_rxm
// (rdm), each rxe<->rxe and on the lib in both roles, as a user runs them,
// with libfabric installed into the VMs they use.
func TestFabricCells(t *testing.T) {
	all := buildMatrix(matrixConfig{BWIters: 25, LatIters: 200})
	cells := selectCells(all, regexp.MustCompile(`^fi_pingpong/`))
	if len(cells) != 6 {
		t.Fatalf("%d libfabric cells, want 6", len(cells))
	}
	h := &harness{xdproce: "/x/xdproce"}
	const rdm = "env FI_UNIVERSE_SIZE=16 fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 20 -c"
	want := map[string][2]string{ // server, client
		"fi_pingpong/lib-server/msg": {"/x/xdproce run -d rxhost0 -- stdbuf -oL fi_pingpong -p verbs -e msg -I 20 -c -B PORT",
			"stdbuf -oL fi_pingpong -p verbs -e msg -I 20 -c -P PORT 198.18.0.2"},
		"fi_pingpong/lib-client/rdm": {"stdbuf -oL " + rdm + " -B PORT",
			"/x/xdproce run -d rxhost0 -- stdbuf -oL " + rdm + " -P PORT 198.18.0.11"},
		"fi_pingpong/rxe-rxe/msg": {"stdbuf -oL fi_pingpong -p verbs -e msg -I 20 -c -B PORT",
			"stdbuf -oL fi_pingpong -p verbs -e msg -I 20 -c -P PORT 198.18.0.12"},
	}
	seen := 0
	for _, c := range cells {
		// Ready when its control port listens (it creates its passive
		// endpoint after its client connected there); its lib side loads
		// librdmacm.so.1 (verbs MSG endpoints connect through rdma_cm).
		if !c.cmTool() || c.cmListener() || !c.needsRDMACM() || c.persistent() || c.timeout() < 60e9 || c.listenPort() != c.Port {
			t.Errorf("%s: run as a tool cell on its control port, not persistent, bounded", c.ID())
		}
		if o := newResult(c).Options; o != c.Tag {
			t.Errorf("%s: options %q in the table, want its endpoint type %q", c.ID(), o, c.Tag)
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
	// libfabric goes into the VMs of the selected libfabric cells only.
	if got := fabricVMs(all); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("libfabric installed into VMs %v, want [1 2]", got)
	}
	if got := fabricVMs(selectCells(all, regexp.MustCompile(`^fi_pingpong/lib-`))); !slices.Equal(got, []int{1}) {
		t.Errorf("lib cells only: VMs %v, want [1]", got)
	}
	if got := fabricVMs(selectCells(all, regexp.MustCompile(`^rstream/`))); len(got) != 0 {
		t.Errorf("no libfabric cell: VMs %v, want none", got)
	}
}

// fabricTable is fi_pingpong's output for -I 20 over verbs (an rxe<->rxe
// run under emulation).
const fabricTable = `bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
64      20      =20      2.5k        0.21s      0.01    5237.52       0.00
256     20      =20      10k         0.12s      0.08    3069.88       0.00
1k      20      =20      40k         0.13s      0.31    3291.65       0.00
4k      20      =20      160k        0.11s      1.45    2820.55       0.00
64k     20      =20      2.5m        0.42s      6.29   10426.28       0.00
1m      20      =20      40m         2.44s     17.22   60906.30       0.00
`

func TestJudgeFabric(t *testing.T) {
	c := cell{Tool: fiPingpongTool, Tag: "msg", Iters: 20, Server: lib, Client: vm1}
	noMiB := strings.Replace(fabricTable, "1m      20      =20      40m         2.44s     17.22   60906.30       0.00\n", "", 1)
	short := strings.Replace(fabricTable, "64k     20      =20", "64k     20      =19", 1)
	for _, tc := range []struct {
		name           string
		srv, cli       string
		srvExit, cExit int
		status         string
		reason         string
	}{
		{"both report every size", "daemon log line\n" + fabricTable, fabricTable, 0, 0, statusPass, ""},
		{"the client's data check failed", fabricTable, "Data check error at 4096\n", 0, 1, statusFail, "client (vm1) exit 1"},
		{"a size missing on the server", noMiB, fabricTable, 0, 0, statusFail, "server: no row for 1m"},
		{"transfers not all acknowledged", fabricTable, short, 0, 0, statusFail, "client: 64k: 20 sent, 19 acknowledged"},
		{"the server timed out", "", fabricTable, 124, 0, statusFail, "server (lib) exit 124"},
		{"no table at all", fabricTable, "", 0, 0, statusFail, "client: no row for 64, 256, 1k, 4k, 64k, 1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResult(c)
			r.Server = &side{Endpoint: c.Server.String(), Output: tc.srv, Exit: tc.srvExit}
			r.Client = &side{Endpoint: c.Client.String(), Output: tc.cli, Exit: tc.cExit}
			judge(c, &r)
			if r.Status != tc.status || !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("status %s (%s), want %s (%s)", r.Status, r.Reason, tc.status, tc.reason)
			}
			if tc.status != statusPass {
				return
			}
			// The client's 1 MiB MB/sec (decimal) in Gb/s, its 64 B round trip.
			if r.BWGbps != 17.22*8/1000 || r.TypicalUs != 5237.52 || r.Figure != "6 sizes 64..1m x 20, -c" {
				t.Errorf("figures %v Gb/s, %v µs, %q", r.BWGbps, r.TypicalUs, r.Figure)
			}
		})
	}
}

// installFabric asks rxe-peer to install libfabric-bin into each VM, in
// order, and stops at the first that fails, saying which.
func TestInstallFabric(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "rxe-peer")
	// A stand-in for rxe-peer: records its arguments; VM 2 fails as a
	// failed dpkg -i would.
	body := "#!/bin/sh\necho \"$*\" >> " + calls + "\n[ \"$2\" = 2 ] && { echo 'rxe-peer: error: VM 2: dpkg -i libfabric-bin failed' >&2; exit 1; }\nexit 0\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &harness{out: io.Discard, peer: &rxePeer{script: script, logf: func(string, ...any) {}}}
	if err := h.installFabric(t.Context(), []int{1}); err != nil {
		t.Fatalf("VM 1: %v", err)
	}
	err := h.installFabric(t.Context(), []int{1, 2, 3})
	if err == nil || !strings.Contains(err.Error(), "VM 2: rxe-peer install 2 libfabric-bin") || !strings.Contains(err.Error(), "dpkg -i libfabric-bin failed") {
		t.Fatalf("error %v, want VM 2's install and rxe-peer's reason", err)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if want := "install 1 libfabric-bin\ninstall 1 libfabric-bin\ninstall 2 libfabric-bin\n"; string(got) != want {
		t.Errorf("rxe-peer called with\n%s, want\n%s", got, want)
	}
	if err := h.installFabric(t.Context(), nil); err != nil {
		t.Errorf("no VM: %v", err)
	}
}
