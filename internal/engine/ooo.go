// The responder's out-of-order hold (docs/recovery.md): RC request packets
// that arrive past a hole are kept, up to OOOMaxHeld of them, instead of
// being dropped; once the hole fills, each is executed in turn as it
// becomes the expected PSN, through every check a packet arriving then
// would meet, and one ACK reports the highest PSN now contiguous. What a
// go-back-N requester (rxe) sees stays legal: the NAK for the hole is sent
// once, as before; data is placed, receives complete and the MSN moves
// exactly as if it had resent them; the packets it then resends are
// duplicates, acknowledged again and never executed twice (C9-105), READs
// among them replayed from the responder resources.

package engine

import (
	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// hold keeps p, which arrived past EPSN, unless it is too far ahead
// (counted) or already held.
func (e *Engine) hold(qp *queue.QP, p *wire.Packet) {
	t := &qp.Transport
	if e.dev.Cfg.Recovery&port.NoHold != 0 {
		return
	}
	d := (p.BTH.PSN - t.EPSN) & 0xffffff
	if d >= queue.OOOMaxHeld {
		e.Counters.OOODropped++
		return
	}
	h := &t.Held
	if h.Slots == nil {
		h.Slots = make([]queue.HeldPacket, queue.OOOMaxHeld)
	}
	s := &h.Slots[p.BTH.PSN%queue.OOOMaxHeld]
	if s.Valid && s.P.BTH.PSN == p.BTH.PSN {
		if !queue.SameRequest(&s.P, p) {
			// Two different packets for one PSN: one is forged. Neither
			// is kept; the requester resends the genuine one.
			s.Valid = false
			h.N--
			e.Counters.OOODropped++
		}
		return
	}
	if !s.Valid {
		h.N++
	}
	buf := append(append(s.Buf[:0], p.Payload...), p.PayloadTail...)
	s.Valid, s.P, s.Buf = true, *p, buf
	s.P.Payload, s.P.PayloadTail = buf, nil
	e.Counters.OOOHeld++
}

// drainHeld executes the held packets that have become in order, after
// the packet that filled the hole, and acknowledges the highest PSN now
// contiguous at the end of the receive batch.
func (e *Engine) drainHeld(qp *queue.QP) {
	t := &qp.Transport
	h := &t.Held
	start := t.EPSN
	if s := &h.Slots[start%queue.OOOMaxHeld]; s.Valid && s.P.BTH.PSN == start {
		// A go-back-N requester resends this held packet next; a
		// selective one does not (had it not been held, a selective
		// requester's next probe would be this PSN too).
		h.Watch, h.AfterFill = true, start
	}
	ack, rnr := false, false
	for h.N > 0 && !t.FailAfterReplies && (t.State == ibv.StateRTR || t.State == ibv.StateRTS || t.State == ibv.StateSQD) {
		s := &h.Slots[t.EPSN%queue.OOOMaxHeld]
		if !s.Valid || s.P.BTH.PSN != t.EPSN {
			break
		}
		s.Valid = false
		h.N--
		// Completions read the packet being handled from e.rx (immediate
		// data, SE): the held one is now that packet.
		e.rx = s.P
		info, _ := e.rx.BTH.Opcode.Info()
		e.respond1(qp, &e.rx, info)
		if t.EPSN == start {
			rnr = true
			break // not executed (an RNR NAK): the requester resends it
		}
		start = t.EPSN
		// READ responses and atomic ACKs acknowledge their requests
		// themselves; an ACK naming a READ's PSN could complete it at
		// a requester that lost its responses.
		ack = info.Flags&(wire.FlagSend|wire.FlagWrite) != 0
	}
	// Queued copies into a client's memory read the held buffers, which
	// the next hold may reuse: they are made now.
	e.pending.Flush()
	if h.N > 0 {
		// A READ or a forged packet may have moved EPSN past held ones.
		for i := range h.Slots {
			s := &h.Slots[i]
			if s.Valid && queue.PSNCmp(s.P.BTH.PSN, t.EPSN) < 0 {
				s.Valid = false
				h.N--
			}
		}
	}
	if t.FailAfterReplies || !(t.State == ibv.StateRTS || t.State == ibv.StateSQD || t.State == ibv.StateRTR) {
		return
	}
	if ack {
		e.ackNow(qp, (t.EPSN-1)&0xffffff)
	}
	if h.N > 0 && !rnr && h.Selective {
		// Held packets lie past a second hole the fill uncovered: NAK it
		// now, after the ACK, as a go-back-N responder does when a packet
		// past its expected PSN arrives (one NAK, until the hole fills).
		// Else the requester learns of it from the ACK alone if that
		// answers a probe, or from its timer; the NAK also acknowledges
		// everything before it, so either reaching it is enough.
		t.NAKSent = true
		e.Counters.OOOHoleNAKs++
		e.sendAck(qp, t.EPSN, wire.NAKSyndrome(wire.NAKPSNSequenceError))
	}
}

// ackNow acknowledges psn at the end of the receive batch, asked for or
// not: after a hole filled, the requester learns at once how far the
// responder has everything.
func (e *Engine) ackNow(qp *queue.QP, psn uint32) {
	t := &qp.Transport
	if !t.ACKDue {
		t.ACKDue = true
		e.acks = append(e.acks, qp)
	}
	t.ACKPSN = psn
}
