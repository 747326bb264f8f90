package main

// The rsocket cells: rdmacm-utils' rstream and riostream, stock, on
// xdproce's librdmacm.so.1 on the host (the lib endpoint) against the same
// program on rxe's rdma-core librdmacm in VM 1, both roles, and rxe↔rxe
// between the VMs as the reference: rsockets' wire protocol (the connection
// data, WRITE WITH IMMEDIATE into the peer's buffer halves, the grants, the
// iomap of riostream) between two implementations. They run as the other
// rdma_cm tool cells do (cmtools.go); these are their arguments and their
// verdict.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	rstreamTool   = "rstream"
	riostreamTool = "riostream"
	// rsocketSize and rsocketCount: 64 KiB transfers, each way, verified
	// (-T v: the receiver checks every byte's pattern).
	rsocketSize  = 65536
	rsocketCount = 200
)

func isRsocketTool(tool string) bool { return tool == rstreamTool || tool == riostreamTool }

// rsocketKinds are the rsocket cells' kinds: rstream blocking and
// rpoll-driven, riostream (riowrite into the server's riomap window).
func rsocketKinds() []cell {
	return []cell{
		{Tool: rstreamTool, Size: strconv.Itoa(rsocketSize), Iters: rsocketCount, Tag: "blocking"},
		{Tool: rstreamTool, Size: strconv.Itoa(rsocketSize), Iters: rsocketCount, Tag: "async"},
		{Tool: riostreamTool, Size: strconv.Itoa(rsocketSize), Iters: rsocketCount, Tag: "blocking"},
	}
}

// rsocketArgs is one side's command line (addr empty for the server).
func (c cell) rsocketArgs(addr string) []string {
	a := []string{c.Tool}
	if addr != "" {
		a = append(a, "-s", addr)
	}
	a = append(a, "-p", strconv.Itoa(c.Port), "-S", c.Size, "-C", strconv.Itoa(c.Iters), "-T", "v")
	switch c.Tag {
	case "blocking":
		a = append(a, "-T", "b")
	case "async":
		a = append(a, "-T", "a")
	}
	return a
}

// rsocketTimeout: a few seconds' transfer under emulation, with room.
func (c cell) rsocketTimeout() time.Duration { return 90 * time.Second }

// rsocketResultRE is rstream's and riostream's result row: name, transfer
// size, count, iterations, total bytes, seconds, Gb/s, µs a transfer.
var rsocketResultRE = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+([0-9.]+)s\s+([0-9.]+)\s+([0-9.]+)\s*$`)

// rsocketHupRace is how rdma-core 44's rstream -T a fails by itself (rxe<->rxe
// too): the server's last data and its DISCONNECT arrive together, rdma-core's
// rpoll reports POLLHUP with the data unread, and rstream's do_poll exits with
// the revents (16). xdproce's rpoll reports the hangup after the data.
const rsocketHupRace = "rdma-core's rpoll reported POLLHUP before the last data was read (rstream -T a exits 16; rxe<->rxe too)"

// hupRaced: an rdma-core client of an async cell that exited 16 after its
// server printed its result row, the whole exchange done.
func hupRaced(c cell, r *result, sd *side) bool {
	return c.Tag == "async" && sd == r.Client && !c.Client.onHost() && sd.Exit == 16 &&
		r.Server.Exit == 0 && rsocketResultRE.MatchString(r.Server.Output)
}

// judgeRsocket: both sides exit 0 and print their result row (with -T v a
// byte out of place fails the receiver); the client's Gb/s is the figure.
// rdma-core's own POLLHUP race (rsocketHupRace) is excused on its side.
func judgeRsocket(c cell, r *result) {
	var notes []string
	problems := exitProblems(r, func(sd *side) bool { return hupRaced(c, r, sd) })
	if hupRaced(c, r, r.Client) {
		notes = append(notes, rsocketHupRace)
	}
	for _, s := range []struct {
		name string
		sd   *side
	}{{"server", r.Server}, {"client", r.Client}} {
		if s.sd.Exit != 0 {
			continue
		}
		m := rsocketResultRE.FindStringSubmatch(s.sd.Output)
		if m == nil {
			problems = append(problems, s.name+": no result row")
			continue
		}
		if s.sd == r.Client {
			if g, err := strconv.ParseFloat(m[7], 64); err == nil && g > 0 {
				r.BWGbps = g
				r.Figure = fmt.Sprintf("%s x %s", m[3], m[2])
			} else {
				problems = append(problems, "client: no bandwidth in "+strings.TrimSpace(m[0]))
			}
		}
	}
	r.Status, r.Reason = statusPass, strings.Join(notes, "; ")
	if len(problems) > 0 {
		r.Status, r.Reason = statusFail, strings.Join(append(problems, notes...), "; ")
	}
}
