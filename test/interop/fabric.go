package main

// The libfabric cells: libfabric-bin's fi_pingpong (Debian 12's libfabric
// 1.17), stock, over its verbs provider on xdproce's libibverbs.so.1 and
// librdmacm.so.1 on the host (the lib endpoint) against the same program on
// rxe in VM 1, both roles, and rxe↔rxe between the VMs as the reference:
// MSG endpoints (verbs: an RC QP connected through rdma_cm) and RDM
// endpoints (verbs;ofi_rxm: libfabric's RXM protocol over such
// connections). The image has no libfabric: the harness installs
// libfabricGuestPackage into the VMs (rxe-peer install, cached .debs). The
// cells run as the other rdma_cm tool cells do (cmtools.go); these are their
// arguments and their verdict.

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	fiPingpongTool = "fi_pingpong"
	// libfabricGuestPackage holds fi_pingpong (with libfabric1 and what it
	// needs); Debian 12's, as on the host.
	libfabricGuestPackage = "libfabric-bin"
	// fabricIters is fi_pingpong's -I: transfers of each size, each way.
	fabricIters = 20
	// rxmUniverse is the FI_UNIVERSE_SIZE the rdm cells run with, on both
	// sides. libfabric 1.17's RXM sizes its verbs CQ by the universe size,
	// the peers it expects (default 256): 128 send and 128 receive entries
	// each, 65536 in all, beyond rxe's max_cqe (32767), so on rxe fi_enable
	// fails with EINVAL ("Unable to create verbs CQ"), rxe<->rxe too. Two
	// peers need far fewer.
	rxmUniverse = 16
)

func isFabricTool(tool string) bool { return tool == fiPingpongTool }

// fabricKinds are the libfabric cells' kinds, by endpoint type (the tag):
// msg over the verbs provider, rdm over verbs;ofi_rxm.
func fabricKinds() []cell {
	return []cell{
		{Tool: fiPingpongTool, Iters: fabricIters, Tag: "msg"},
		{Tool: fiPingpongTool, Iters: fabricIters, Tag: "rdm"},
	}
}

// fabricProvider is the provider fi_pingpong is asked for (-p).
func (c cell) fabricProvider() string {
	if c.Tag == "rdm" {
		return "verbs;ofi_rxm"
	}
	return "verbs"
}

// fabricArgs is one side's command line (addr empty for the server): every
// size from 64 B to 1 MiB (fi_pingpong's default -S all), each received
// buffer checked (-c), on the cell's own control port (the server's -B,
// the client's -P). The rdma_cm port is the server's passive endpoint's,
// which it sends its client over that control connection.
func (c cell) fabricArgs(addr string) []string {
	var a []string
	if c.Tag == "rdm" {
		a = []string{"env", "FI_UNIVERSE_SIZE=" + strconv.Itoa(rxmUniverse)}
	}
	a = append(a, fiPingpongTool, "-p", c.fabricProvider(), "-e", c.Tag, "-I", strconv.Itoa(c.Iters), "-c")
	if addr == "" {
		return append(a, "-B", strconv.Itoa(c.Port))
	}
	return append(a, "-P", strconv.Itoa(c.Port), addr)
}

// fabricTimeout: six sizes up to 1 MiB, 20 each way, took 8-24 s under
// emulation, and once 52 s (an rdm cell whose READs were resent).
func (c cell) fabricTimeout() time.Duration { return 180 * time.Second }

// fabricRowRE is a row of fi_pingpong's table: bytes, #sent, #ack
// ("=N": all acknowledged), total, time, MB/sec, usec/xfer, Mxfers/sec.
var fabricRowRE = regexp.MustCompile(`(?m)^(\S+)\s+(\d+)\s+=(\d+)\s+\S+\s+[0-9.]+s\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$`)

// fabricSizes are the sizes fi_pingpong runs with -S all (ft_size_array
// trimmed to the provider's limits; verbs takes them all): 64 B up to 1 MiB.
var fabricSizes = []string{"64", "256", "1k", "4k", "64k", "1m"}

// fabricRows checks one side's table: a row for every size in fabricSizes
// (fi_pingpong prints more between them), each with all iters sent and
// acknowledged, and returns the rows by size.
func fabricRows(out string, iters int) (map[string][]string, error) {
	rows := map[string][]string{}
	for _, m := range fabricRowRE.FindAllStringSubmatch(out, -1) {
		if m[2] != strconv.Itoa(iters) || m[3] != strconv.Itoa(iters) {
			return nil, fmt.Errorf("%s: %s sent, %s acknowledged, want %d", m[1], m[2], m[3], iters)
		}
		rows[m[1]] = m
	}
	var missing []string
	for _, s := range fabricSizes {
		if rows[s] == nil {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no row for %s of %d rows", strings.Join(missing, ", "), len(rows))
	}
	return rows, nil
}

// judgeFabric: both sides exit 0 (with -c a received buffer out of place
// fails its side) and print a row for every size with all transfers
// acknowledged; the client's 1 MiB MB/sec and 64 B usec/xfer are the
// figures.
func judgeFabric(c cell, r *result) {
	problems := exitProblems(r, nil)
	for _, s := range []struct {
		name string
		sd   *side
	}{{"server", r.Server}, {"client", r.Client}} {
		if s.sd.Exit != 0 {
			continue
		}
		rows, err := fabricRows(s.sd.Output, c.Iters)
		if err != nil {
			problems = append(problems, s.name+": "+err.Error())
			continue
		}
		if s.sd != r.Client {
			continue
		}
		big, errBW := strconv.ParseFloat(rows["1m"][4], 64)
		small, errLat := strconv.ParseFloat(rows["64"][5], 64)
		if errBW != nil || errLat != nil || big <= 0 || small <= 0 {
			problems = append(problems, fmt.Sprintf("client: no figures in %q, %q", rows["1m"][0], rows["64"][0]))
			continue
		}
		r.BWGbps = big * 8 / 1000 // MB/sec, decimal
		r.TypicalUs = small
		r.Figure = fmt.Sprintf("%d sizes 64..1m x %d, -c", len(fabricRowRE.FindAllString(s.sd.Output, -1)), c.Iters)
	}
	r.Status = statusPass
	if len(problems) > 0 {
		r.Status, r.Reason = statusFail, strings.Join(problems, "; ")
	}
}

// fabricVMs are the VMs the selected libfabric cells run fi_pingpong in.
func fabricVMs(cells []cell) []int {
	var vms []int
	for _, c := range cells {
		if !isFabricTool(c.Tool) {
			continue
		}
		for _, e := range []endpoint{c.Server, c.Client} {
			if vm := e.vm(); vm != 0 && !e.guest() && !slices.Contains(vms, vm) {
				vms = append(vms, vm)
			}
		}
	}
	slices.Sort(vms)
	return vms
}

// installFabric installs libfabricGuestPackage into each VM: the image has
// no libfabric, and its disks are snapshots, so after every boot. rxe-peer
// fetches the .debs once (apt-get download on the host, resolved against
// the guest's packages) and reuses them offline.
func (h *harness) installFabric(ctx context.Context, vms []int) error {
	for _, vm := range vms {
		h.progress("VM %d: installing %s (rxe-peer install)", vm, libfabricGuestPackage)
		if _, err := h.peer.run(ctx, 10*time.Minute, "install", strconv.Itoa(vm), libfabricGuestPackage); err != nil {
			return fmt.Errorf("VM %d: %w", vm, err)
		}
	}
	return nil
}
