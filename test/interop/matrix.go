package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// endpoint is where one side of a cell runs.
type endpoint int

const (
	xdp endpoint = iota // bin/xdproce perf in the rxepeer netns, on the veth
	vm1                 // stock perftest in VM 1 (198.18.0.11)
	vm2                 // stock perftest in VM 2 (198.18.0.12)
	gx1                 // xdproce perf inside VM 1: Debian 12's kernel 6.1, virtio-net, rdma_rxe unloaded
	gx2                 // the same in VM 2
)

func (e endpoint) String() string {
	switch e {
	case xdp:
		return "xdproce"
	case vm1:
		return "vm1"
	case vm2:
		return "vm2"
	case gx1:
		return "xdproce@vm1"
	default:
		return "xdproce@vm2"
	}
}

// vm is the VM an endpoint runs in (0 for xdproce on the host).
func (e endpoint) vm() int {
	switch e {
	case vm1, gx1:
		return 1
	case vm2, gx2:
		return 2
	}
	return 0
}

// guest: xdproce inside a VM, where rxe must be unloaded (both want UDP 4791).
func (e endpoint) guest() bool { return e == gx1 || e == gx2 }

// isXDP: xdproce, on the host or in a guest.
func (e endpoint) isXDP() bool { return e == xdp || e.guest() }

const (
	pingpong  = "ibv_rc_pingpong"
	allSizes  = "all" // perftest -a: 2..2^23
	sweepRows = 23    // rows printed by -a
	basePort  = 18515
)

// cell is one interoperability check: a server, then a client against it.
type cell struct {
	Tool   string
	Server endpoint
	Client endpoint
	MTU    int
	Size   string // allSizes or a byte count
	Iters  int
	QPs    int
	Loss   string // netem loss on VM 1's egress, "" for none
	Port   int    // own OOB port per cell, so a straggler cannot answer the next one
}

// peerName names an endpoint in a guest cell's direction.
func (e endpoint) peerName() string {
	switch {
	case e.guest():
		return fmt.Sprintf("xdproce (vm%d)", e.vm())
	case e == xdp:
		return "xdproce (host)"
	}
	return fmt.Sprintf("rxe (vm%d)", e.vm())
}

// isBW reports whether the tool is a bandwidth test (ibv_rc_pingpong is not).
func (c cell) isBW() bool { return strings.HasSuffix(c.Tool, "_bw") }

func (c cell) isLat() bool { return strings.HasSuffix(c.Tool, "_lat") }

func (c cell) hasXDP() bool { return c.Server.isXDP() || c.Client.isXDP() }

// hostXDP: one side is xdproce on the host (the netns veth).
func (c cell) hostXDP() bool { return c.Server == xdp || c.Client == xdp }

// guestCell: one side is xdproce in a guest.
func (c cell) guestCell() bool { return c.Server.guest() || c.Client.guest() }

// ID names the cell for progress lines, --only and the JSON output.
func (c cell) ID() string {
	var role string
	switch {
	case c.Server.guest() && c.Client.guest():
		role = "gxdp-gxdp"
	case c.Server.guest():
		role = fmt.Sprintf("gxdp-server-%s", c.Client)
	case c.Client.guest():
		role = fmt.Sprintf("gxdp-client-%s", c.Server)
	case c.Server == xdp:
		role = "xdp-server"
	case c.Client == xdp:
		role = "xdp-client"
	default:
		role = "rxe-rxe"
	}
	if c.Tool == integrityTool {
		return fmt.Sprintf("%s/xdp-vm%d/mtu%d", c.Tool, c.Client.vm(), c.MTU)
	}
	id := fmt.Sprintf("%s/%s/mtu%d", c.Tool, role, c.MTU)
	if c.Size == allSizes {
		id += "/all"
	} else {
		id += "/s" + c.Size
	}
	if c.QPs > 1 {
		id += fmt.Sprintf("/q%d", c.QPs)
	}
	if c.Loss != "" {
		id += "/loss" + c.Loss
	}
	return id
}

// Direction is the human-readable role split.
func (c cell) Direction() string {
	switch {
	case c.Tool == integrityTool:
		return fmt.Sprintf("xdproce ↔ verbs_peer (%v), both ways", c.Client)
	case c.guestCell():
		return fmt.Sprintf("%v server ← %v client", c.Server.peerName(), c.Client.peerName())
	case c.Server == xdp:
		return "xdproce server ← stock client"
	case c.Client == xdp:
		return "stock server ← xdproce client"
	default:
		return fmt.Sprintf("stock server (%v) ← stock client (%v)", c.Server, c.Client)
	}
}

// args are the tool options shared by both sides, without device and server.
func (c cell) args() []string {
	if c.Tool == integrityTool {
		return strings.Fields(integrityCmd(c.MTU))
	}
	a := []string{"-p", strconv.Itoa(c.Port), "-m", strconv.Itoa(c.MTU), "-n", strconv.Itoa(c.Iters)}
	if c.Tool == pingpong {
		return append(a, "-g", "1", "-s", c.Size)
	}
	a = append([]string{"-F"}, a...)
	switch {
	case c.Size == allSizes:
		a = append(a, "-a")
	case c.Tool != "ib_atomic_bw" && c.Tool != "ib_atomic_lat":
		a = append(a, "-s", c.Size)
	}
	if c.QPs > 1 {
		a = append(a, "-q", strconv.Itoa(c.QPs))
	}
	if c.isBW() {
		a = append(a, "--report_gbits")
	}
	return a
}

// expectedRows is how many result rows a side that reports must print.
// With -a a WRITE/READ/ATOMIC server prints only the report of the last
// size, which the client sends it (perftest 6.06); a SEND server measures
// every size itself.
func (c cell) expectedRows(server bool) int {
	if c.Size != allSizes || server && c.isBW() && c.Tool != "ib_send_bw" {
		return 1
	}
	return sweepRows
}

// totalBytes estimates the payload moved, to size the timeout.
func (c cell) totalBytes() int64 {
	size := int64(8)
	switch {
	case c.Size == allSizes:
		size = 1<<24 - 2 // 2 + 4 + ... + 2^23
	case c.Size != "":
		size, _ = strconv.ParseInt(c.Size, 10, 64)
	}
	qps := int64(max(c.QPs, 1))
	return size * int64(c.Iters) * qps
}

// timeout bounds each side of the cell. Under TCG rxe moves about 0.3 Gb/s
// and a ping-pong takes about 1 ms; allow ~10x that, more under loss.
func (c cell) timeout() time.Duration {
	if c.Tool == integrityTool {
		return 10 * time.Minute // the whole cell; every wait in it is bounded by waitLimit
	}
	const bytesPerSec = 4 << 20
	d := 90*time.Second + time.Duration(c.totalBytes()/bytesPerSec)*time.Second
	if c.isLat() || c.Tool == pingpong {
		d = 60*time.Second + time.Duration(c.Iters)*20*time.Millisecond
	}
	if c.Loss != "" {
		d *= 3
	}
	return d
}

// matrixConfig holds the knobs of the matrix.
type matrixConfig struct {
	Smoke     bool
	LossSweep bool // only the loss sweep (lossSweep)
	BWIters   int  // -n for bandwidth sweeps
	LatIters  int  // -n for latency tests
}

var perfVerbs = []string{"send", "write", "read", "atomic"}

// latSizes are the -s values of a latency test (atomics are always 8 bytes).
func latSizes(verb string) []string {
	if verb == "atomic" {
		return []string{"8"}
	}
	return []string{"2", "4096"}
}

// buildMatrix returns the cells in run order: the rxe↔rxe reference first
// (it proves the peer works), then xdproce in both roles, and the loss cells
// last so that netem is switched on only once.
func buildMatrix(cfg matrixConfig) []cell {
	var cells []cell
	add := func(c cell) {
		c.Port = basePort + len(cells)
		if c.QPs == 0 {
			c.QPs = 1
		}
		cells = append(cells, c)
	}
	dirs := [][2]endpoint{{xdp, vm1}, {vm1, xdp}} // {server, client}
	if cfg.LossSweep {
		for _, c := range lossSweep(cfg) {
			add(c)
		}
		return cells
	}

	if cfg.Smoke {
		for _, d := range dirs {
			add(cell{Tool: "ib_write_bw", Server: d[0], Client: d[1], MTU: 4096, Size: allSizes, Iters: cfg.BWIters})
		}
		for _, d := range dirs {
			add(cell{Tool: "ib_send_lat", Server: d[0], Client: d[1], MTU: 4096, Size: "2", Iters: cfg.LatIters})
		}
		// Kernel 6.1 and virtio-net in CI: xdproce in the guest (rxe
		// unloaded there) serving xdproce on the host.
		add(cell{Tool: "ib_write_bw", Server: gx1, Client: xdp, MTU: 2048, Size: "65536", Iters: 8 * cfg.BWIters})
		return cells
	}

	// Reference: stock against stock, VM 2 serving VM 1, at MTU 4096.
	ref := [2]endpoint{vm2, vm1}
	for _, v := range perfVerbs {
		add(cell{Tool: "ib_" + v + "_bw", Server: ref[0], Client: ref[1], MTU: 4096, Size: bwSize(v), Iters: cfg.BWIters})
	}
	for _, v := range perfVerbs {
		for _, s := range latSizes(v) {
			add(cell{Tool: "ib_" + v + "_lat", Server: ref[0], Client: ref[1], MTU: 4096, Size: s, Iters: cfg.LatIters})
		}
	}
	add(cell{Tool: "ib_write_bw", Server: ref[0], Client: ref[1], MTU: 4096, Size: "65536", Iters: cfg.BWIters, QPs: 8})
	add(cell{Tool: pingpong, Server: ref[0], Client: ref[1], MTU: 4096, Size: "4096", Iters: cfg.LatIters})

	for _, mtu := range []int{1024, 4096} {
		for _, v := range perfVerbs {
			for _, d := range dirs {
				add(cell{Tool: "ib_" + v + "_bw", Server: d[0], Client: d[1], MTU: mtu, Size: bwSize(v), Iters: cfg.BWIters})
			}
			for _, s := range latSizes(v) {
				for _, d := range dirs {
					add(cell{Tool: "ib_" + v + "_lat", Server: d[0], Client: d[1], MTU: mtu, Size: s, Iters: cfg.LatIters})
				}
			}
		}
	}
	for _, d := range dirs {
		add(cell{Tool: "ib_write_bw", Server: d[0], Client: d[1], MTU: 4096, Size: "65536", Iters: cfg.BWIters, QPs: 8})
	}
	for _, d := range dirs {
		add(cell{Tool: pingpong, Server: d[0], Client: d[1], MTU: 4096, Size: "4096", Iters: cfg.LatIters})
	}
	// Data integrity, every RC operation both ways, byte for byte.
	for _, mtu := range []int{4096, 1024} {
		add(cell{Tool: integrityTool, Server: xdp, Client: vm1, MTU: mtu})
	}
	for _, c := range guestCells(cfg) {
		add(c)
	}
	// Under loss a full -a sweep takes far too long under emulation (an
	// 8 MiB message is 2048 packets, so nearly every one is retransmitted):
	// one 64 KiB size exercises the NAK/retransmit path well enough. The
	// same cells run without loss first (the atomic one is in the matrix
	// already), so the table gives each loss cell's ratio within one run
	// (issue 17: ≥ 0.5× at 1%); netem is switched once, before the last.
	for _, loss := range []string{"", "1%"} {
		for _, v := range perfVerbs {
			size := "65536"
			if v == "atomic" {
				if loss == "" {
					continue
				}
				size = "8"
			}
			for _, d := range dirs {
				// -n 25 at 64 KiB is 400 packets, about four losses: too few
				// for a ratio; eight times that takes seconds.
				add(cell{Tool: "ib_" + v + "_bw", Server: d[0], Client: d[1], MTU: 4096, Size: size, Iters: 8 * cfg.BWIters, Loss: loss})
			}
		}
	}
	return cells
}

// bwSize is the size selection of a bandwidth cell: the -a sweep, except for
// atomics, which have one fixed 8-byte size.
func bwSize(verb string) string {
	if verb == "atomic" {
		return "8"
	}
	return allSizes
}

// sweepRates are the netem loss rates of --loss-sweep (issue 17), after
// the loss-free baseline.
var sweepRates = []string{"", "0.1%", "1%", "5%"}

// lossSweep is --loss-sweep: every bandwidth verb at 4 KiB and 64 KiB
// (atomics: 8 B) at each rate, xdproce in both roles beside rxe against
// itself, each rate's cells together so netem switches once per rate.
// -n is 8× (64 KiB) or 40× (4 KiB) the bandwidth -n: a few hundred to a
// thousand packets, enough losses at 1% for a ratio.
func lossSweep(cfg matrixConfig) []cell {
	var cells []cell
	dirs := [][2]endpoint{{vm2, vm1}, {xdp, vm1}, {vm1, xdp}} // {server, client}: the rxe reference first
	for _, loss := range sweepRates {
		for _, v := range perfVerbs {
			sizes := []string{"4096", "65536"}
			if v == "atomic" {
				sizes = []string{"8"}
			}
			for _, size := range sizes {
				iters := 40 * cfg.BWIters
				if size == "65536" {
					iters = 8 * cfg.BWIters
				}
				for _, d := range dirs {
					cells = append(cells, cell{Tool: "ib_" + v + "_bw", Server: d[0], Client: d[1], MTU: 4096, Size: size, Iters: iters, Loss: loss})
				}
			}
		}
	}
	return cells
}

// guestTools are issue 13's guest comparison: tool and size.
var guestTools = [][2]string{
	{"ib_write_bw", "65536"}, {"ib_send_bw", "4096"}, {"ib_read_bw", "65536"}, {"ib_write_lat", "8"}, {"ib_send_lat", "8"},
}

// guestCells run xdproce inside the VMs (Debian 12's kernel 6.1,
// virtio-net), at PMTU 2048 (what a port without AF_XDP multi-buffer
// offers): rxe against rxe first, then xdproce in VM 2 against stock
// perftest on rxe in VM 1 both ways, then xdproce in both guests, so each
// VM switches from rxe to xdproce once and the table can set xdproce ↔
// xdproce beside rxe ↔ rxe from the same run (guestRatio).
func guestCells(cfg matrixConfig) []cell {
	var cells []cell
	for _, roles := range [][2]endpoint{{vm2, vm1}, {gx2, vm1}, {vm1, gx2}, {gx2, gx1}} {
		for _, t := range guestTools {
			iters := cfg.LatIters
			if strings.HasSuffix(t[0], "_bw") {
				iters = 8 * cfg.BWIters
			}
			cells = append(cells, cell{Tool: t[0], Server: roles[0], Client: roles[1], MTU: 2048, Size: t[1], Iters: iters})
		}
	}
	return cells
}
