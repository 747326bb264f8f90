package perftest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

// Verb is the operation a test measures.
type Verb int

const (
	Send Verb = iota
	Write
	Read
	Atomic
)

var verbNames = [...]string{"send", "write", "read", "atomic"}

func (v Verb) String() string { return verbNames[v] }

// Test is what a tool measures: bandwidth or latency.
type Test int

const (
	BW Test = iota
	Lat
)

// Tool is one of perftest's eight RC tools, ib_<verb>_<test>.
type Tool struct {
	Verb Verb
	Test Test
}

// Tools lists the tools xdproce perf speaks, in perftest's names.
func Tools() []Tool {
	var ts []Tool
	for v := Send; v <= Atomic; v++ {
		ts = append(ts, Tool{v, BW}, Tool{v, Lat})
	}
	return ts
}

func (t Tool) String() string {
	s := "bw"
	if t.Test == Lat {
		s = "lat"
	}
	return "ib_" + t.Verb.String() + "_" + s
}

// ParseTool accepts a perftest tool name such as "ib_write_bw".
func ParseTool(name string) (Tool, error) {
	for _, t := range Tools() {
		if t.String() == name {
			return t, nil
		}
	}
	return Tool{}, fmt.Errorf("perftest: unknown tool %q (want one of ib_{send,write,read,atomic}_{bw,lat})", name)
}

// ConnType is the transport of the data QPs (-c).
type ConnType int

const (
	RC ConnType = iota
	UD
)

func (t ConnType) String() string {
	if t == UD {
		return "UD"
	}
	return "RC"
}

// AtomicOp is the operation of the atomic tests (-A).
type AtomicOp int

const (
	FetchAndAdd AtomicOp = iota
	CmpAndSwap
)

func (a AtomicOp) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// ParseAtomicOp accepts -A's values.
func ParseAtomicOp(s string) (AtomicOp, error) {
	switch strings.ToUpper(s) {
	case "FETCH_AND_ADD":
		return FetchAndAdd, nil
	case "CMP_AND_SWAP":
		return CmpAndSwap, nil
	}
	return 0, fmt.Errorf("perftest: atomic type %q (want FETCH_AND_ADD or CMP_AND_SWAP)", s)
}

// perftest's defaults (perftest_parameters.h).
const (
	defSizeBW     = 65536
	defSizeLat    = 2
	defSizeAtomic = 8
	defIters      = 1000
	defItersWB    = 5000 // ib_write_bw
	defTxBW       = 128
	defTxLat      = 1
	defRxSend     = 512
	defRxRDMA     = 1
	defCQMod      = 100
	cqModLimit    = 8192 // above it every completion is signaled
	maxSize       = 1 << 23
	cycleBuffer   = 4096 // the page size perftest announces
	cacheLine     = 64
	minRNRTimer   = 12
	qpTimeout     = 14
	defInlineRC   = 236   // DEF_INLINE_SEND_RC_UC
	defInlineW    = 220   // DEF_INLINE_WRITE
	defInlineUD   = 188   // DEF_INLINE_SEND_UD
	maxInlineUD   = 884   // MAX_INLINE_UD
	maxRxUD       = 16000 // UC_MAX_RX: UD's receive depth follows -n up to it
	grhSize       = 40    // UD_ADDITION: the GRH area in front of a datagram
	latencyTail   = 2     // LAT_MEASURE_TAIL: the slowest samples a latency report drops
)

// Config is one run of a tool, as perftest's command line sets it. Zero
// values take perftest's defaults (Normalize).
type Config struct {
	Tool Tool
	// Conn is the data QPs' transport: RC, or UD (SEND tools only).
	Conn ConnType
	// RDMACM connects the data QPs with rdma_cm and exchanges the
	// out-of-band messages over an rdma_cm connection of their own, both
	// on Port (-R).
	RDMACM bool
	// Server is the server's address; empty runs the server side.
	Server string
	// Bind is the address the server listens on; empty is every address,
	// as perftest's server.
	Bind  string
	Port  int
	Size  int
	Iters int
	// Duration runs for that long instead of Iters iterations (-D).
	Duration time.Duration
	// MTU is the path MTU in bytes to offer; 0 offers the port's active MTU.
	MTU      int
	AllSizes bool // -a: every power of two from 2 to 8 MiB
	QPs      int
	TxDepth  int
	RxDepth  int
	CQMod    int
	// OutReads bounds the outstanding READs/atomics this side accepts as
	// responder; 0 is the device maximum.
	OutReads int
	// GIDIndex selects the local GID; a negative one picks the first
	// IPv4-mapped GID, as perftest does on RoCEv2 without -x.
	GIDIndex    int
	Atomic      AtomicOp
	ReportGbits bool
	// Inline is the largest message sent inline; a negative one takes
	// perftest's default (236 B for SEND, 220 B for WRITE).
	Inline int
	// Verify fills the source memory with a pattern and checks every byte
	// that arrives. Both sides must be xdproce perf with Verify.
	Verify bool
	// OwnMemory registers memory the program allocated itself (RegMR), as
	// stock perftest registers its malloc'd buffers, instead of memory it
	// shares with the device (AllocMR): through a daemon that is the
	// process_vm_readv/writev path the C library's applications take.
	OwnMemory bool
	// DeviceMemory puts the buffer, the peer's target and the source of
	// what this side sends, in device memory (Device.AllocDM, a region
	// over it with PD.RegDMMR): memory the device's XDP program can
	// write; through a daemon, the daemon's, mapped here. At most
	// verbs.MaxDMSize bytes.
	DeviceMemory bool
	// Timeout bounds each out-of-band exchange and each wait for the peer.
	Timeout time.Duration

	// sizeDefaulted records that Normalize chose Size: UD may then lower
	// it to the path MTU (perftest's check_mtu).
	sizeDefaulted bool
}

// Normalize fills perftest's defaults and applies its dependencies between
// options (force_dependecies), so both sides agree on what a run does.
func (c *Config) Normalize() error {
	bw := c.Tool.Test == BW
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.QPs == 0 {
		c.QPs = 1
	}
	if c.Tool.Verb == Atomic {
		if c.Size != 0 && c.Size != defSizeAtomic {
			return errors.New("perftest: message size cannot be changed for atomic tests")
		}
		if c.AllSizes {
			return errors.New("perftest: atomic tests have one size; -a does not apply")
		}
		c.Size = defSizeAtomic
	}
	if c.Conn == UD && c.Tool.Verb != Send {
		return errors.New("perftest: UD connection only possible in SEND verb")
	}
	if c.Conn == UD && !c.RDMACM {
		return errors.New("perftest: UD runs over rdma_cm (RDMACM) only")
	}
	if c.DeviceMemory && c.OwnMemory {
		return errors.New("perftest: the buffer is either device memory or the program's own")
	}
	if c.Size == 0 {
		c.Size = defSizeLat
		if bw {
			c.Size = defSizeBW
		}
		c.sizeDefaulted = true
	}
	if c.Size < 1 || c.Size > maxSize {
		return fmt.Errorf("perftest: message size %d out of range 1..%d", c.Size, maxSize)
	}
	if c.Iters == 0 {
		c.Iters = defIters
		if bw && c.Tool.Verb == Write {
			c.Iters = defItersWB
		}
	}
	if c.Iters < 5 {
		return fmt.Errorf("perftest: %d iterations; at least 5", c.Iters)
	}
	if c.TxDepth == 0 {
		c.TxDepth = defTxLat
		if bw {
			c.TxDepth = defTxBW
		}
	}
	if c.RxDepth == 0 {
		c.RxDepth = defRxRDMA
		if c.Tool.Verb == Send {
			c.RxDepth = defRxSend
		}
		if c.Conn == UD && c.Duration == 0 {
			// Datagrams find no receive otherwise: all of them are posted.
			c.RxDepth = min(c.Iters, maxRxUD)
		}
	}
	explicitCQMod := c.CQMod != 0
	if c.CQMod == 0 {
		c.CQMod = defCQMod
	}
	if c.Inline < 0 {
		c.Inline = 0
		switch {
		case c.Tool.Verb == Send && c.Conn == UD:
			c.Inline = defInlineUD
		case c.Tool.Verb == Send:
			c.Inline = defInlineRC
		case c.Tool.Verb == Write:
			c.Inline = defInlineW
		}
	}
	if c.Tool.Verb == Read || c.Tool.Verb == Atomic {
		c.Inline = 0
	}
	if c.Conn == UD {
		c.Inline = min(c.Inline, maxInlineUD)
	}
	if c.Duration > 0 {
		if c.AllSizes {
			return errors.New("perftest: duration mode does not run all sizes")
		}
		if c.Duration < time.Second {
			return errors.New("perftest: duration must be at least one second")
		}
	} else {
		c.TxDepth = min(c.TxDepth, c.Iters)
		if c.Tool.Verb == Send {
			c.RxDepth = min(c.RxDepth, c.Iters)
		}
	}
	if c.AllSizes {
		c.Size = maxSize
	}
	if c.Size > cqModLimit && !c.AllSizes && !explicitCQMod && c.Conn != UD {
		c.CQMod = 1
	}
	c.CQMod = min(c.CQMod, c.TxDepth)
	if c.MTU != 0 && int(verbs.MTUFromBytes(c.MTU)) == 0 {
		return fmt.Errorf("perftest: MTU %d (want 256, 512, 1024, 2048 or 4096)", c.MTU)
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.QPs < 1 || c.QPs > 1024 {
		return fmt.Errorf("perftest: %d QPs out of range 1..1024", c.QPs)
	}
	return nil
}

// sizes is the message sizes a run measures: -a's sweep or the one size.
// The sweep goes from 2 bytes up to Size: 8 MiB, or for UD the path MTU.
func (c *Config) sizes() []int {
	if !c.AllSizes {
		return []int{c.Size}
	}
	var s []int
	for i := 1; i < 24 && 1<<i <= c.Size; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// Passive reports whether this side's application leaves the device alone
// during the run: the server of a WRITE bandwidth test and of every READ
// and atomic test, which as perftest's only waits for the client to finish
// while its device answers. Nothing there spins on the device, so it need
// not busy-poll.
func (c Config) Passive() bool {
	if c.Server != "" {
		return false
	}
	v := c.Tool.Verb
	return v == Read || v == Atomic || v == Write && c.Tool.Test == BW
}

// slotSize is perftest's BUFF_SIZE: one QP's share of each half of the buffer.
func slotSize(size, cycle int) int { return max(size, cycle) }

// stride is perftest's INC: how far consecutive messages are apart in the
// buffer (at least a cache line).
func stride(size, line int) int {
	if size > line {
		return (size + line - 1) / line * line
	}
	return line
}
