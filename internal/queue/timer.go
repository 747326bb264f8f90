package queue

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
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
// A tail (at most TLPPkts outstanding and nothing left to send: a
// ping-pong's message, the end of a burst; not a burst's first packet,
// whose stall is the poke's) gets a shorter first period, a tail-loss probe as TCP's (RFC
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
		if t.Timeouts == 0 && (t.Probing || t.Outstanding() <= TLPPkts && t.ReqIdx >= len(t.SQ)) {
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

// A stalled requester's poke (issue 33, docs/recovery.md). A requester
// that cannot send more (its loss window is full, or nothing is left to
// send) with more than a tail outstanding waits for ACKs that only the
// responder's answer to its last packets, or a NAK, would bring. When one
// of those is lost (a NAK is sent once per hole; the packet that filled
// the window, or its ACK) the RTO, at least minRTO, ten or more round
// trips on veth, was what a loss cost: one loss episode in six at 5%. So,
// armed at the requester's last send or the responder's last progress,
// once a probe timeout has passed without an ACK the requester probes with
// its oldest unacknowledged packet, asking for an ACK, as after a sequence
// NAK: the ACK says how far the responder has everything. Unlike a timer
// expiry it neither halves the loss window nor counts a timeout, so its
// probe also times out after a probe timeout; a poke that fires early
// costs one packet. A go-back-N responder (rxe) sees what the timer would
// have sent it, sooner.

// Pokeable: retry_cnt 7 (a finite count keeps rxe's timer alone), a round
// trip measured, and no retry under way (its probe has its own timing).
func (t *Transport) Pokeable() bool {
	return t.Attr.RetryCnt == 7 && t.SRTT > 0 && !t.StartedRetry && !t.Probing && t.Timeouts == 0
}

// Stalled reports whether the requester can send no more with more than a
// tail outstanding (a tail has the tail-loss probe) of a SEND or WRITE at
// the head (a READ's or atomic's answers are asked for again by PSN).
func (t *Transport) Stalled() bool {
	if t.Outstanding() <= TLPPkts || len(t.SQ) == 0 || !t.SQ[0].Started || IsReadOrAtomic(t.SQ[0].WR.Opcode) {
		return false
	}
	return t.ReqIdx >= len(t.SQ) || PSNCmp(t.ReqPSN, t.CompPSN+t.Window()) >= 0
}

// CountTimeout counts a timer expiry by what was outstanding: a probe, the
// whole loss window, or less with nothing left to send.
func (t *Transport) CountTimeout(c *ibv.Counters) {
	switch {
	case t.Probing:
		c.TimeoutProbe++
	case t.Outstanding() >= t.Window():
		c.TimeoutWindow++
	case t.ReqIdx >= len(t.SQ):
		c.TimeoutTail++
	}
}

// Resume puts the requester back where a poke's go-back-N found it, at
// SentEnd: what it sent before the poke is still on its way, and an ACK
// that was merely late must neither resend it nor probe it PSN by PSN.
func (t *Transport) Resume() {
	t.ReqIdx, t.ReqPSN = 0, t.SentEnd
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started {
			break
		}
		w.Seek(t.SentEnd, uint32(t.MTU))
		if w.SentAll && t.ReqIdx == i {
			t.ReqIdx++ // as the requester passes it: Stalled reads ReqIdx
		}
	}
}
