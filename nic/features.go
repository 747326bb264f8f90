package nic

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/ring"
)

// Features is what a port runs with: the best of what this kernel and this
// driver offer, chosen once at Open, and why the rest is not used. Every
// fallback costs speed or the largest path MTU, never correctness.
type Features struct {
	XDPMode loader.Mode
	// NativeXDP is why native XDP was not used ("" when it was, or when
	// generic mode was asked for).
	NativeXDP string
	// MultiBuffer: AF_XDP sockets bound with XDP_USE_SG (Linux 6.6), so a
	// frame longer than one UMEM chunk arrives as a chain. Without it a
	// frame must fit one chunk, and the active MTU is capped to match, as
	// rxe caps active_mtu by the netdev MTU.
	MultiBuffer bool
	// NoMultiBuffer is why frames are limited to one chunk although the
	// link MTU asks for more ("" when not).
	NoMultiBuffer string
	ZeroCopy      bool
	// NoZeroCopy is why the sockets copy ("" in zero-copy mode).
	NoZeroCopy string
	// TXBudget is XDP_MAX_TX_SKB_BUDGET, frames per copy-mode kick; 0 when
	// the kernel lacks it (Linux 6.17) and sends 32.
	TXBudget int
	// SendBuffer is each socket's send buffer in bytes, which bounds the
	// copy-mode frames in flight (ring.Config.SendBuffer).
	SendBuffer int
	Queues     int // RX queues served, one AF_XDP socket each
	// BusyPoll: the sockets ask the kernel to busy-poll their queues
	// (SO_PREFER_BUSY_POLL, Linux 5.11); NoBusyPoll is why not.
	BusyPoll   bool
	NoBusyPoll string
	// MaxFrame is the longest Ethernet frame received whole.
	MaxFrame int
	// ActiveMTU is the port's IB MTU: rxe's rule on the netdev MTU, capped
	// by MaxFrame.
	ActiveMTU int
}

// String is the one line Open logs and devinfo prints.
func (f Features) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s XDP", f.XDPMode)
	if f.NativeXDP != "" {
		fmt.Fprintf(&b, " (native: %s)", f.NativeXDP)
	}
	if f.ZeroCopy {
		b.WriteString(", zero-copy")
	} else {
		fmt.Fprintf(&b, ", copy mode (zero-copy: %s)", f.NoZeroCopy)
	}
	switch {
	case f.MultiBuffer:
		b.WriteString(", multi-buffer")
	case f.NoMultiBuffer != "":
		fmt.Fprintf(&b, ", one chunk per frame (multi-buffer: %s)", f.NoMultiBuffer)
	}
	if f.BusyPoll {
		b.WriteString(", socket busy-poll")
	} else {
		fmt.Fprintf(&b, ", no socket busy-poll (%s)", f.NoBusyPoll)
	}
	fmt.Fprintf(&b, ", %d queue(s), frames up to %d bytes, active MTU %d", f.Queues, f.MaxFrame, f.ActiveMTU)
	if f.TXBudget > 0 {
		fmt.Fprintf(&b, ", TX budget %d", f.TXBudget)
	} else {
		b.WriteString(", TX budget 32 (kernel lacks XDP_MAX_TX_SKB_BUDGET)")
	}
	if !f.ZeroCopy && f.SendBuffer > 0 {
		fmt.Fprintf(&b, ", send buffer %d KiB", f.SendBuffer>>10)
	}
	return b.String()
}

// sgUnsupported says a bind failed because the kernel does not know
// XDP_USE_SG: before Linux 6.6 an unknown bind flag is EINVAL. (A bind
// with bad arguments otherwise fails the same way with the flag cleared,
// and that second failure is the one reported.)
func sgUnsupported(err error) bool { return errors.Is(err, unix.EINVAL) }

// frameRoom is the longest frame one chunk of rc receives.
func frameRoom(rc ring.Config) int {
	chunk := rc.ChunkSize
	if chunk == 0 {
		chunk = ring.MaxChunkSize
	}
	return chunk - ring.KernelHeadroom - rc.Headroom
}

// cappedMTU is the active IB MTU of a netdev MTU when frames can be at
// most maxFrame bytes long (VLAN tag included).
func cappedMTU(netdevMTU, maxFrame int) int {
	return ActiveMTU(min(netdevMTU, maxFrame-ethOverhead))
}
