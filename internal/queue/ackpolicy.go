package queue

import "github.com/xdproce/xdproce/internal/ibv"

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
