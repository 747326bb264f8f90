package impair

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Limits and defaults of Config.
const (
	DefaultReorderDistance = 3
	MaxReorderDistance     = 64
	DefaultHoldTimeout     = 20 * time.Millisecond
	MaxLogLimit            = 1 << 20
)

// ErrBadConfig is wrapped by every Config validation error.
var ErrBadConfig = errors.New("impair: bad config")

// Config says what to do to the RoCEv2 packets (UDP destination port 4791)
// that cross the impaired port. Each probability is drawn independently
// for every packet from a counter-based generator keyed by Seed and the
// packet's index, so the same seed and the same packet sequence give the
// same decisions (see Decide).
type Config struct {
	Drop      float64 // probability of dropping the packet, 0..1
	Duplicate float64 // probability of sending it twice, back to back
	Corrupt   float64 // probability of flipping one bit of the UDP payload
	Reorder   float64 // probability of holding it back (see ReorderDistance)

	// Seed selects the decision stream.
	Seed uint64

	// ReorderDistance is how many later packets must arrive before a held
	// packet is sent: a reordered packet is overtaken by that many packets
	// (fewer if some of them are dropped). 0 means DefaultReorderDistance;
	// at most MaxReorderDistance.
	ReorderDistance int

	// HoldTimeout sends a held packet anyway after this long, so the tail
	// of a burst arrives late instead of never. 0 means DefaultHoldTimeout.
	HoldTimeout time.Duration

	// LogLimit is how many decisions the injector records for Log (those
	// of the first LogLimit packets). 0 records none. Read by Attach only.
	LogLimit int
}

// Validate reports a wrapped ErrBadConfig for out-of-range fields.
func (c Config) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"Drop", c.Drop}, {"Duplicate", c.Duplicate}, {"Corrupt", c.Corrupt}, {"Reorder", c.Reorder}} {
		if math.IsNaN(p.v) || p.v < 0 || p.v > 1 {
			return fmt.Errorf("%w: %s = %v, want 0..1", ErrBadConfig, p.name, p.v)
		}
	}
	if c.ReorderDistance < 0 || c.ReorderDistance > MaxReorderDistance {
		return fmt.Errorf("%w: ReorderDistance = %d, want 0..%d", ErrBadConfig, c.ReorderDistance, MaxReorderDistance)
	}
	if c.HoldTimeout < 0 {
		return fmt.Errorf("%w: HoldTimeout = %v, want >= 0", ErrBadConfig, c.HoldTimeout)
	}
	if c.LogLimit < 0 || c.LogLimit > MaxLogLimit {
		return fmt.Errorf("%w: LogLimit = %d, want 0..%d", ErrBadConfig, c.LogLimit, MaxLogLimit)
	}
	return nil
}

// Action is the set of things done to one packet.
type Action uint8

// Actions. Dropped excludes the others; the rest combine (a duplicated
// packet that is also corrupted is sent twice with the same corruption; a
// reordered duplicate is held and sent twice).
const (
	Dropped Action = 1 << iota
	Duplicated
	Corrupted
	Reordered
)

// String returns e.g. "pass", "drop" or "dup|corrupt".
func (a Action) String() string {
	if a == 0 {
		return "pass"
	}
	var parts []string
	for _, n := range []struct {
		a    Action
		name string
	}{{Dropped, "drop"}, {Duplicated, "dup"}, {Corrupted, "corrupt"}, {Reordered, "reorder"}} {
		if a&n.a != 0 {
			parts = append(parts, n.name)
		}
	}
	if rest := a &^ (Dropped | Duplicated | Corrupted | Reordered); rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint8(rest)))
	}
	return strings.Join(parts, "|")
}

// Decision is what the injector did to one packet.
type Decision struct {
	Seq    uint64 // index of the packet since Attach, from 0
	Action Action
	Offset int  // Corrupted: index of the changed byte in the UDP payload
	Mask   byte // Corrupted: the single bit XORed into that byte
	Len    int  // UDP payload length as received
	// Digest is the CRC-32C of the UDP payload as received (before
	// corruption): equal logs mean equal decisions on equal packets.
	Digest uint32
}

// Counters are the injector's running totals since Attach.
type Counters struct {
	Diverted  uint64 // RoCEv2 packets the tc program sent to the injector
	Received  uint64 // packets the injector read (and decided on)
	Sent      uint64 // packets put back on the wire, duplicates included
	Dropped   uint64
	Duplicate uint64 // packets sent twice
	Corrupted uint64
	Reordered uint64
	TimedOut  uint64 // held packets released by HoldTimeout, not by count
	Held      uint64 // packets held at the moment

	// Not decisions: packets lost by the machinery itself. All zero unless
	// the injector cannot keep up or a packet is bigger than its buffers.
	Lost       uint64 // kernel queue overflows on the way through the injector
	Truncated  uint64 // larger than the receive buffer (e.g. GSO), dropped
	SendErrors uint64 // sendmmsg failures, packet dropped
	Unparsed   uint64 // diverted but not recognised in Go: sent unchanged, no decision
}
