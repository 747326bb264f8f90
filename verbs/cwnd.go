package verbs

// The requester's loss window. An RC responder drops every packet behind a
// lost one (it accepts only the PSN it expects), so each loss costs the
// packets in flight behind it: up to the whole 128-PSN window when a queue
// (a slow forwarder, a busy peer) holds them. At 1% loss that alone halves
// goodput. So, as TCP does and as hardware RNICs pace after a NAK, a loss
// halves the number of PSNs the requester keeps outstanding, and every
// window's worth of acknowledged PSNs opens it again by a few. Without loss
// it stays at MaxUnackedPSNs (rxe's window): the wire behaviour and the
// loss-free speed are unchanged.

const (
	// minWindow is the smallest loss window, in PSNs: a 64 KiB message at
	// PMTU 4096, so one message always fits.
	minWindow = 8
	// windowGrowth is how many PSNs a window's worth of acknowledged PSNs
	// adds back: the loss here is a lossy link, not congestion to back
	// off from for long.
	windowGrowth = 4
)

// window is how many PSNs past compPSN the requester may send.
func (t *qpTransport) window() uint32 {
	if t.cwnd == 0 {
		return MaxUnackedPSNs
	}
	return t.cwnd
}

// shrinkWindow halves the window after a loss, once per window of packets:
// losses among the packets already in flight when the first was found are
// the same episode.
func (t *qpTransport) shrinkWindow() {
	if t.cwnd != 0 && psnCmp(t.compPSN, t.recoverPSN) < 0 {
		return
	}
	t.cwnd = max(t.window()/2, minWindow)
	t.cwndAcked = 0
	t.recoverPSN = t.sentEnd
}

// growWindow opens the window again as PSNs are acknowledged.
func (t *qpTransport) growWindow(acked uint32) {
	if t.cwnd == 0 || t.cwnd >= MaxUnackedPSNs {
		return
	}
	t.cwndAcked += acked
	for t.cwndAcked >= t.cwnd && t.cwnd < MaxUnackedPSNs {
		t.cwndAcked -= t.cwnd
		t.cwnd = min(t.cwnd+windowGrowth, MaxUnackedPSNs)
	}
}
