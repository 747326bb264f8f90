package queue

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
)

// The requester's AckReq policy. IBTA leaves it to the requester which
// packets ask for an ACK, and lets the responder coalesce; rxe's responder
// (and the XDP fast path's) ACKs exactly the packets that ask. So the
// requester asks where an ACK is needed for progress and nowhere else:
//
//   - within ibv.MaxPktsPerAck packets of the last ask, and on the packet
//     that fills the send window (internal/engine/requester.go): without
//     an ACK the window would not open before the retransmission timer;
//   - on a probe (recovery);
//   - on a message's last packet when the requester sends nothing more
//     right behind it: the send queue is drained, or the next WQE waits
//     for something only an ACK brings (SendsOnNow). So no completion ever
//     waits for a timer, and a lone operation asks as rxe's requester does
//     (golden captures stay byte-exact).
//
// A burst of WRITEs posted together then costs the responder one ACK and
// the requester one ACK to process, instead of one per WRITE: on the XDP
// fast path one XDP_TX and one consumed ACK per burst
// (docs/fastpath.md, "ACK coalescing"). It is on with the fast path
// (port.Config.AckCoalesce); without it every last packet asks, as rxe's
// requester, and the golden captures of several WRs posted together
// stay byte-exact.
//
// Lazy asks (AckCoalesce too, so only on a device with the fast path): a
// message whose completion nobody can wait for — an unsignaled WQE, with
// no signaled one before it unasked — does not ask even with nothing
// behind it. A WRITE ping-pong that signals every 16th WRITE then draws
// one ACK per 16 WRITEs instead of one per WRITE. What the requester
// still needs from an ACK (the WQEs' send-queue slots, the retransmission
// timer's knowledge that they arrived) is asked for
//
//   - by the next packet that asks for any reason above (ACKs are
//     cumulative), among them every signaled WQE's last packet with
//     nothing behind it: a completion never waits for a timer;
//   - at once when a WQE posted behind it cannot go out (a fence, a local
//     operation, the READ/atomic limit, the window, SQD): requester.go;
//   - when half the send queue's slots are taken (Lazy);
//   - and otherwise, the queue idle, a probe timeout (PTO, timer.go) after
//     the last packet: the requester sends its last packet again asking
//     (engine's timer.go, ask), which every responder answers as a
//     duplicate with an ACK. That is the tail-loss probe (RFC 8985) the
//     packets would have had had they asked: a loss among them is found
//     as soon as before, and the retransmission timer runs from the ask
//     (AskSent).
//
// The cost: an unsignaled WQE with nothing behind it keeps its send-queue
// slot a probe timeout (at least 100 µs) plus a round trip longer (the
// application cannot see that before half the queue is taken), and each
// ask is one more frame and a duplicate on the responder, which on the
// fast path the engine's Go responder answers (a takeover and a
// hand-back). Signaled WQEs are never lazy: the requester cannot know
// whether the application is about to wait on one (docs/fastpath.md,
// "Lazy asks").

// SendsOnNow reports whether the requester, having sent the last packet
// of the WQE at ReqIdx, sends the next WQE without waiting for an ACK: it
// is posted, the QP is in RTS, and none of the requester's gates that an
// ACK (or a response) opens holds it. Conservative: a fence or a
// READ/atomic limit counts as waiting even where a response would open it.
func (t *Transport) SendsOnNow() bool {
	if t.State != ibv.StateRTS || !t.RNRAt.IsZero() || t.ReqIdx+1 >= len(t.SQ) {
		return false
	}
	next := &t.SQ[t.ReqIdx+1]
	if next.Started {
		return !next.SentAll // go-back-N resends it next
	}
	op := next.WR.Opcode
	if IsLocalOp(op) || next.WR.Flags&ibv.SendFence != 0 {
		return false // runs once everything before it completed
	}
	if IsReadOrAtomic(op) && t.RdAtomicOut >= max(1, int(t.Attr.MaxRdAtomic)) {
		return false
	}
	n := uint32(1)
	if op != ibv.WRAtomicCmpAndSwp && op != ibv.WRAtomicFetchAdd {
		n = t.Npkts(next.Length)
	}
	return (t.NextPSN+n-t.SQ[0].FirstPSN)&0xffffff <= MaxOutstandingSpan
}

// WindowEnd is one past the last PSN sent once a packet ending at end (one
// past its last PSN) has gone out: end, or SentEnd if a retransmission
// leaves it behind that.
func (t *Transport) WindowEnd(end uint32) uint32 {
	if PSNCmp(end, t.SentEnd) < 0 {
		return t.SentEnd
	}
	return end
}

// Lazy reports whether the last packet of the WQE at ReqIdx, with nothing
// posted behind it, may go without AckReq: nobody waits for its
// completion (it is unsignaled, on a QP without sq_sig_all, and no
// signaled WQE before it went unasked), the requester is not retrying,
// and at least half of the send queue's maxSendWR slots stay free.
func (t *Transport) Lazy(sigAll bool, maxSendWR int) bool {
	if t.State != ibv.StateRTS || t.SigUnasked || t.StartedRetry || t.Probing || t.Timeouts > 0 ||
		t.ReqIdx+1 != len(t.SQ) || 2*len(t.SQ) > maxSendWR {
		return false
	}
	w := &t.SQ[t.ReqIdx]
	return !sigAll && w.WR.Flags&ibv.SendSignaled == 0 && !w.Retried && !IsReadOrAtomic(w.WR.Opcode)
}

// NoteAsk keeps the lazy policy's state once a packet went out: ask, it
// asked for an ACK; lazy, Lazy let it go without; signaled, it is the
// last packet of a WQE that completes. An ask after lazy packets, which no
// responder could answer before it, starts the retransmission timer over;
// NoteAsk then reports true, for the caller to re-arm the poke.
func (t *Transport) NoteAsk(ask, lazy, signaled bool, now time.Time) (restart bool) {
	switch {
	case ask:
		restart = !t.AskAt.IsZero()
		t.AskAt, t.SigUnasked = time.Time{}, false
		if restart && t.Attr.Timeout > 0 {
			t.TimerAt = now.Add(t.RTO())
		}
	case lazy:
		t.AskAt = now.Add(t.PTO())
	case signaled:
		t.SigUnasked = true
	}
	return restart
}

// AskSent arms what follows the ask (engine's timer.go): it was the lazy
// packets' tail-loss probe, so the retransmission timer runs from it
// without the probe's shortening (RFC 8985), and no poke; its answer may
// come from a slower path than the RTT samples' (on the fast path, the Go
// responder answers duplicates).
func (t *Transport) AskSent(now time.Time) {
	t.PokeAt = time.Time{}
	if t.Attr.Timeout == 0 {
		return
	}
	d := ACKTimeout(t.Attr.Timeout)
	if t.Attr.RetryCnt == 7 && t.SRTT > 0 {
		d = min(d, max(t.SRTT+4*t.RTTVar, minRTO))
	}
	t.TimerAt = now.Add(d)
}

// AskWith readies the ask (engine's timer.go): the last WQE sent, to send
// its last packet again with AckReq (Asking), which every responder
// answers as a duplicate with an ACK of all it has. Nil if nothing is
// unacknowledged, or the last WQE is a READ or atomic (those always ask).
func (t *Transport) AskWith() *SendWQE {
	if t.ReqIdx == 0 || t.ReqIdx > len(t.SQ) || t.Outstanding() == 0 {
		return nil
	}
	w := &t.SQ[t.ReqIdx-1]
	if !w.SentAll || IsReadOrAtomic(w.WR.Opcode) || IsLocalOp(w.WR.Opcode) {
		return nil
	}
	w.Seek(w.LastPSN, uint32(t.MTU))
	t.Asking = true
	return w
}
