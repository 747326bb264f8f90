package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xdproce/xdproce/test/interop/integrity"
)

// endpoint is where one side of a cell runs.
type endpoint int

const (
	xdp endpoint = iota // bin/xdproce perf in the rxepeer netns, on the veth
	vm1                 // stock perftest in VM 1 (198.18.0.11)
	vm2                 // stock perftest in VM 2 (198.18.0.12)
	gx1                 // xdproce perf inside VM 1: Debian 12's kernel 6.1, virtio-net, rdma_rxe unloaded
	gx2                 // the same in VM 2
	// lib: a stock tool (perftest, ibverbs-utils) on the host, in the
	// rxepeer netns on the veth, over xdproce's C libibverbs: xdproce run
	// -d rxhost0 -- TOOL -d xdp_rxhost0, which starts a daemon for the cell.
	lib
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
	case lib:
		return "lib"
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

// isXDP: xdproce, on the host (xdproce perf or its libibverbs) or in a guest.
func (e endpoint) isXDP() bool { return e == xdp || e == lib || e.guest() }

// onHost: the endpoint runs on the host, in the rxepeer netns.
func (e endpoint) onHost() bool { return e == xdp || e == lib }

const (
	pingpong  = "ibv_rc_pingpong" // the one ping-pong xdproce perf has
	allSizes  = "all"             // perftest -a: 2..2^23
	sweepRows = 23                // rows printed by -a
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
	// Opts are more tool options for both sides; LibOpts only for the lib
	// side (how the tool drives the library: events, post API). Tag names
	// them in the ID.
	Opts    []string
	LibOpts []string
	// XDPOpts are options of xdproce perf on the host only.
	XDPOpts []string
	Tag     string
	// XFail says why the cell fails rxe<->rxe too (a tool's own
	// limitation): its failure is then a skip that says so.
	XFail string
}

// peerName names an endpoint in a guest cell's direction.
func (e endpoint) peerName() string {
	switch {
	case e.guest():
		return fmt.Sprintf("xdproce (vm%d)", e.vm())
	case e == xdp:
		return "xdproce (host)"
	case e == lib:
		return "xdproce libibverbs (host)"
	}
	return fmt.Sprintf("rxe (vm%d)", e.vm())
}

// isBW reports whether the tool is a bandwidth test (ibv_rc_pingpong is not).
func (c cell) isBW() bool { return strings.HasSuffix(c.Tool, "_bw") }

// isPingpong: one of rdma-core's examples ibv_{rc,uc,srq}_pingpong.
func isPingpong(tool string) bool {
	return strings.HasPrefix(tool, "ibv_") && strings.HasSuffix(tool, "_pingpong")
}

func (c cell) isPingpong() bool { return isPingpong(c.Tool) }

func (c cell) isLat() bool { return strings.HasSuffix(c.Tool, "_lat") }

func (c cell) hasXDP() bool { return c.Server.isXDP() || c.Client.isXDP() }

// hostXDP: one side is xdproce perf on the host (the netns veth).
func (c cell) hostXDP() bool { return c.Server == xdp || c.Client == xdp }

// libCell: one side is a stock tool over xdproce's libibverbs on the host.
func (c cell) libCell() bool { return c.Server == lib || c.Client == lib }

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
	case c.Server == lib:
		role = "lib-server"
	case c.Client == lib:
		role = "lib-client"
	default:
		role = "rxe-rxe"
	}
	if c.Tool == integrity.IntegrityTool {
		return fmt.Sprintf("%s/xdp-vm%d/mtu%d", c.Tool, c.Client.vm(), c.MTU)
	}
	if c.cmTool() { // the path MTU is rdma_cm's choice, not an option
		return fmt.Sprintf("%s/%s/%s", c.Tool, role, c.Tag)
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
	if c.Tag != "" {
		id += "/" + c.Tag
	}
	return id
}

// Direction is the human-readable role split.
func (c cell) Direction() string {
	switch {
	case c.Tool == integrity.IntegrityTool:
		return fmt.Sprintf("xdproce ↔ verbs_peer (%v), both ways", c.Client)
	case c.guestCell():
		return fmt.Sprintf("%v server ← %v client", c.Server.peerName(), c.Client.peerName())
	case c.Server == xdp:
		return "xdproce server ← stock client"
	case c.Client == xdp:
		return "stock server ← xdproce client"
	case c.Server == lib:
		return "stock on xdproce lib server ← stock client"
	case c.Client == lib:
		return "stock server ← stock on xdproce lib client"
	default:
		return fmt.Sprintf("stock server (%v) ← stock client (%v)", c.Server, c.Client)
	}
}

// args are the tool options shared by both sides, without device and server.
func (c cell) args() []string {
	if c.Tool == integrity.IntegrityTool {
		return strings.Fields(integrity.PeerCommand(c.MTU))
	}
	a := []string{"-p", strconv.Itoa(c.Port), "-m", strconv.Itoa(c.MTU), "-n", strconv.Itoa(c.Iters)}
	if c.Tool == "ibv_ud_pingpong" {
		// Datagrams take the port's MTU: ibv_ud_pingpong has no -m.
		a = []string{"-p", strconv.Itoa(c.Port), "-n", strconv.Itoa(c.Iters)}
	}
	if c.isPingpong() {
		// GID 1 is the IPv4 RoCEv2 GID on rxe and on xdproce alike.
		a = append(a, "-g", "1", "-s", c.Size)
		if c.QPs > 1 {
			a = append(a, "-q", strconv.Itoa(c.QPs))
		}
		return append(a, c.Opts...)
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
	return append(a, c.Opts...)
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
	if c.Tool == integrity.IntegrityTool {
		return 10 * time.Minute // the whole cell; every wait in it is bounded by WaitLimit
	}
	if c.cmTool() {
		return c.toolTimeout()
	}
	const bytesPerSec = 4 << 20
	d := 90*time.Second + time.Duration(c.totalBytes()/bytesPerSec)*time.Second
	if c.isLat() || c.isPingpong() {
		// ibv_srq_pingpong's -n counts per QP.
		d = 60*time.Second + time.Duration(c.Iters*max(c.QPs, 1))*20*time.Millisecond
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
		// Stock perftest on the host over xdproce's libibverbs, through
		// xdproce run (which starts and stops the daemon): one cell in
		// each role.
		add(cell{Tool: "ib_write_bw", Server: vm1, Client: lib, MTU: 4096, Size: allSizes, Iters: cfg.BWIters})
		add(cell{Tool: "ib_send_lat", Server: lib, Client: vm1, MTU: 4096, Size: "2", Iters: cfg.LatIters})
		// rdma_cm against rxe's CM: stock rping on xdproce's libraries in
		// both roles, and xdproce perf -R serving stock perftest -R.
		for _, d := range [][2]endpoint{{lib, vm1}, {vm1, lib}} {
			add(cell{Tool: rpingTool, Server: d[0], Client: d[1], MTU: 4096, Size: strconv.Itoa(rpingSize), Iters: rpingSmokePings, Tag: "verify"})
		}
		add(cell{Tool: "ib_send_lat", Server: xdp, Client: vm1, MTU: 4096, Size: "2", Iters: cfg.LatIters, Opts: []string{"-R"}, Tag: "rdma_cm"})
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
	for _, c := range libCells(cfg) {
		add(c)
	}
	for _, c := range rdmaCMCells(cfg) {
		add(c)
	}
	for _, c := range cmToolCells() {
		add(c)
	}
	// The XDP fast path (docs/fastpath.md): xdproce perf's buffer in device
	// memory, small WRITEs executed and acknowledged by its program, rxe's
	// ACKs taken by it, both roles.
	for _, c := range []cell{{Tool: "ib_write_lat", Size: "2"}, {Tool: "ib_write_lat", Size: "64"}, {Tool: "ib_write_bw", Size: "64"}} {
		for _, d := range dirs {
			c.Server, c.Client, c.MTU, c.Iters = d[0], d[1], 1024, cfg.LatIters
			if c.Tool == "ib_write_bw" {
				c.Iters = 8 * cfg.BWIters
			}
			c.XDPOpts, c.Tag = []string{"--dm", "--fast-path", "--counters"}, fastPathTag
			add(c)
		}
	}
	// Data integrity, every RC operation both ways, byte for byte.
	for _, mtu := range []int{4096, 1024} {
		add(cell{Tool: integrity.IntegrityTool, Server: xdp, Client: vm1, MTU: mtu})
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

// libCells run stock perftest and rdma-core's ping-pong examples on the
// host over xdproce's libibverbs (the lib endpoint) against the same stock
// tool on rxe in VM 1, both roles, at MTU 4096: the eight perftest tools
// with the xdproce perf cells' options, then the library's other paths
// (perftest's old post API, several QPs, completion events, inline sends,
// ibv_wr_* through rc_pingpong -N, UC, SRQ).
func libCells(cfg matrixConfig) []cell {
	var cells []cell
	both := func(c cell) {
		for _, d := range [][2]endpoint{{lib, vm1}, {vm1, lib}} { // {server, client}
			c.Server, c.Client, c.MTU = d[0], d[1], 4096
			cells = append(cells, c)
		}
	}
	for _, v := range perfVerbs {
		both(cell{Tool: "ib_" + v + "_bw", Size: bwSize(v), Iters: cfg.BWIters})
		both(cell{Tool: "ib_" + v + "_lat", Size: latSizes(v)[0], Iters: cfg.LatIters})
	}
	// perftest posts with ibv_post_send on xdproce as on rxe (it uses
	// ibv_wr_* only on mlx5, efa and hns): the flag must be taken all the same.
	both(cell{Tool: "ib_write_bw", Size: allSizes, Iters: cfg.BWIters, LibOpts: []string{"--use_old_post_send"}, Tag: "old-post-send"})
	both(cell{Tool: "ib_send_bw", Size: "65536", Iters: cfg.BWIters, QPs: 8})
	// Completion events (-e): perftest 4.5 refuses them for WRITE ("Events
	// feature not available on WRITE verb"); SEND waits on both sides' CQs.
	both(cell{Tool: "ib_send_bw", Size: allSizes, Iters: cfg.BWIters, LibOpts: []string{"-e"}, Tag: "events"})
	both(cell{Tool: "ib_send_lat", Size: "64", Iters: cfg.LatIters, Opts: []string{"-I", "64"}, Tag: "inline64"})
	both(cell{Tool: "ibv_rc_pingpong", Size: "4096", Iters: cfg.LatIters})
	both(cell{Tool: "ibv_rc_pingpong", Size: "4096", Iters: cfg.LatIters, LibOpts: []string{"-N"}, Tag: "new-send"})
	both(cell{Tool: "ibv_uc_pingpong", Size: "4096", Iters: cfg.LatIters})
	// 16 QPs, ibv_srq_pingpong's default, said aloud.
	both(cell{Tool: "ibv_srq_pingpong", Size: "4096", Iters: cfg.LatIters, QPs: 16})
	// Datagrams (issue 16): UD QPs, address handles, the GRH area.
	both(cell{Tool: "ibv_ud_pingpong", Size: "2048", Iters: cfg.LatIters})
	both(cell{Tool: "ib_send_bw", Size: "2048", Iters: cfg.BWIters, Opts: []string{"-c", "UD"}, Tag: "ud"})
	both(cell{Tool: "ib_send_lat", Size: "2048", Iters: cfg.LatIters, Opts: []string{"-c", "UD"}, Tag: "ud"})
	return cells
}

// rdmaCMCells run perftest's rdma_cm mode (-R): xdproce perf -R, and stock
// perftest -R on the host over xdproce's librdmacm and libibverbs (the lib
// endpoint), against stock perftest -R on rxe in VM 1, both roles, at MTU
// 4096, each tool after its rxe<->rxe reference: the RC SEND, WRITE and
// READ tools with the other cells' options, and SEND over UD (SIDR) at
// 2048 bytes as the UD lib cells.
func rdmaCMCells(cfg matrixConfig) []cell {
	var cells []cell
	both := func(c cell) {
		for _, d := range [][2]endpoint{{vm2, vm1}, {xdp, vm1}, {vm1, xdp}, {lib, vm1}, {vm1, lib}} { // {server, client}
			c.Server, c.Client, c.MTU = d[0], d[1], 4096
			cells = append(cells, c)
		}
	}
	for _, v := range []string{"send", "write", "read"} {
		both(cell{Tool: "ib_" + v + "_bw", Size: allSizes, Iters: cfg.BWIters, Opts: []string{"-R"}, Tag: rdmaCMTag})
		both(cell{Tool: "ib_" + v + "_lat", Size: "2", Iters: cfg.LatIters, Opts: []string{"-R"}, Tag: rdmaCMTag})
	}
	both(cell{Tool: "ib_send_bw", Size: "2048", Iters: cfg.BWIters, Opts: []string{"-R", "-c", "UD"}, Tag: rdmaCMTag + "-ud"})
	both(cell{Tool: "ib_send_lat", Size: "2048", Iters: cfg.LatIters, Opts: []string{"-R", "-c", "UD"}, Tag: rdmaCMTag + "-ud"})
	return cells
}

// fastPathTag names the XDP fast path's cells (--only dm-fastpath).
const fastPathTag = "dm-fastpath"

// rdmaCMTag names the rdma_cm cells (--only rdma_cm).
const rdmaCMTag = "rdma_cm"

// rdmaCM: the cell runs perftest's rdma_cm mode, whose server listens with
// rdma_cm and not on a TCP port.
func (c cell) rdmaCM() bool {
	for _, o := range c.Opts {
		if o == "-R" || o == "--rdma_cm" {
			return true
		}
	}
	return false
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
				// 1000 messages by default: a few seconds under
				// emulation, where 200 scattered the ratio by ±30%.
				iters = 40 * cfg.BWIters
			}
			cells = append(cells, cell{Tool: t[0], Server: roles[0], Client: roles[1], MTU: 2048, Size: t[1], Iters: iters})
		}
	}
	return cells
}
