package queue

import (
	"time"
)

// ACKTimeout is the local ACK timeout: 4.096 µs × 2^timeout.
func ACKTimeout(code uint8) time.Duration { return time.Duration(4096<<code) * time.Nanosecond }

// MaxBackoff caps the doubling of the transport timer: 2^4 times its
// first period.
const MaxBackoff = 4

// minRTO is the shortest period the adaptive timer uses: above a Go
// scheduler's or garbage collector's pauses, so that a spurious expiry
// stays rare (and costs one probe packet when it happens).
const minRTO = time.Millisecond

// RTO is the transport timer's current period. With a finite retry_cnt the
// application chose how soon a dead peer is reported, (retry_cnt+1) ×
// timeout, and the period is the local ACK timeout, fixed, as rxe's. With
// retry_cnt 7, which retries forever, the timer adapts as adaptive
// retransmission on hardware RNICs does: it starts at the measured round
// trip (srtt + 4·rttvar, at least minRTO, at most the local ACK timeout),
// so a loss nothing else reveals (a lost NAK, a lost last packet) costs
// about a round trip instead of perftest's 67 ms; and each expiry without
// progress doubles it, up to MaxBackoff doublings. Without the doubling a
// receiver slower than the timer (a deep queue, a loaded CPU) is fed
// retransmissions faster than it can drop them, and goodput collapses.
//
// A tail (at most TLPPkts outstanding: a ping-pong's message, the end of a
// burst) gets a shorter first period, a tail-loss probe as TCP's (RFC
// 8985): nothing sent behind it would draw a NAK for its loss, and the
// round trip is all a lost ACK or request should cost, not minRTO, ten
// round trips on veth. So does a probe resent after a NAK (recovery.go),
// alone in flight too. A probe that fires early costs one packet resent
// (the probe, retry_cnt 7) and no more.
func (t *Transport) RTO() time.Duration {
	d := ACKTimeout(t.Attr.Timeout)
	if t.Attr.RetryCnt != 7 {
		return d
	}
	if t.SRTT > 0 {
		d = min(d, max(t.SRTT+4*t.RTTVar, minRTO))
		if t.Timeouts == 0 && (t.Probing || t.Outstanding() <= TLPPkts) {
			d = min(d, t.PTO())
		}
	}
	return d << min(t.Timeouts, uint32(MaxBackoff))
}

// PTO is the probe timeout: how long a requester that sent its last packet
// waits for an answer before it probes (RFC 8985's PTO, see TLPPkts).
func (t *Transport) PTO() time.Duration {
	return max(2*t.SRTT, t.SRTT+4*t.RTTVar, tlpMin)
}

// Outstanding is how many PSNs are sent and not acknowledged.
func (t *Transport) Outstanding() uint32 { return (t.SentEnd - t.CompPSN) & 0xffffff }

// TLPPkts is the most packets outstanding that make a tail. The tail-loss
// probe's period is 2·srtt (RFC 8985's PTO), and at least srtt + 4·rttvar,
// so a host whose scheduling delays the answers (eight test sessions on
// two cores fired a fixed 200 µs probe spuriously in tests that count
// frames) shows it in rttvar and waits longer; tlpMin is its floor, above
// a wakeup's latency. A fixed floor of 500 µs, 3.6 times the loss-free
// p99 of a 4 KiB round trip on veth, was most of what a loss cost one
// (issue 33), and on the in-memory link, where a round trip takes tens of
// µs, each of the probes a 5% loss rate needs (a lost NAK, probe or ACK)
// cost twenty round trips.
const (
	TLPPkts = 2
	tlpMin  = 100 * time.Microsecond
)
