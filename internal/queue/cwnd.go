package queue

import "github.com/xdproce/xdproce/internal/ibv"

// The requester's loss window. An RC responder drops every packet behind a
// lost one (it accepts only the PSN it expects), so each loss costs the
// packets in flight behind it: up to the whole 128-PSN window when a queue
// (a slow forwarder, a busy peer) holds them. At 1% loss that alone halves
// goodput. So, as TCP does and as hardware RNICs pace after a NAK, a loss
// that rewinds the requester (a sequence NAK, a timer expiry) halves the
// PSNs it keeps outstanding, and each window's worth of acknowledged PSNs
// opens it again by a few. A lost READ response does not shrink it: it
// costs the rest of its READ (asked again from the gap) whatever the
// window. Without loss the window stays at MaxUnackedPSNs (rxe's): the
// wire behaviour and the loss-free speed are unchanged.

const (
	// minWindow is the smallest loss window, in PSNs. A message longer
	// than the window is sent in pieces, the packet that fills the window
	// asking for an ACK (sendNext).
	minWindow = 8
	// windowGrowth is how many PSNs a window's worth of acknowledged PSNs
	// adds back: the loss here is a lossy link, not congestion to back
	// off from for long.
	windowGrowth = 4
)

// Window is how many PSNs past CompPSN the requester may send.
func (t *Transport) Window() uint32 {
	if t.cwnd == 0 {
		return ibv.MaxUnackedPSNs
	}
	return t.cwnd
}

// ShrinkWindow halves the window after a loss, once per window of packets:
// losses among the packets already in flight when the first was found are
// the same episode.
func (t *Transport) ShrinkWindow() {
	if t.cwnd != 0 && PSNCmp(t.CompPSN, t.recoverPSN) < 0 {
		return
	}
	t.cwnd = max(t.Window()/2, minWindow)
	t.cwndAcked = 0
	t.recoverPSN = t.SentEnd
}

// GrowWindow opens the window again as PSNs are acknowledged.
func (t *Transport) GrowWindow(acked uint32) {
	if t.cwnd == 0 || t.cwnd >= ibv.MaxUnackedPSNs {
		return
	}
	t.cwndAcked += acked
	for t.cwndAcked >= t.cwnd && t.cwnd < ibv.MaxUnackedPSNs {
		t.cwndAcked -= t.cwnd
		t.cwnd = min(t.cwnd+windowGrowth, ibv.MaxUnackedPSNs)
	}
}
