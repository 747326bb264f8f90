// The responder's out-of-order hold (docs/recovery.md): RC request packets
// that arrive past a hole are kept, up to oooMaxHeld of them, instead of
// being dropped; once the hole fills, each is executed in turn as it
// becomes the expected PSN, through every check a packet arriving then
// would meet, and one ACK reports the highest PSN now contiguous. What a
// go-back-N requester (rxe) sees stays legal: the NAK for the hole is sent
// once, as before; data is placed, receives complete and the MSN moves
// exactly as if it had resent them; the packets it then resends are
// duplicates, acknowledged again and never executed twice (C9-105), READs
// among them replayed from the responder resources.

package transport

import (
	"bytes"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// oooMaxHeld bounds the packets a QP's responder holds, and how far past
// the expected PSN it holds one: a requester keeps at most
// MaxUnackedPSNs PSNs outstanding, so one hole never costs a packet
// sent behind it. Past it packets are dropped (ooo_dropped) as before. A
// QP that held packets keeps the buffers (at most oooMaxHeld path MTUs)
// for the next loss.
const oooMaxHeld = ibv.MaxUnackedPSNs

// heldPacket is a request packet kept past a hole: its decoded headers,
// with the payload copied out of the receive buffer.
type heldPacket struct {
	valid bool
	p     wire.Packet
	buf   []byte
}

// oooHold is a QP's held packets, a ring indexed by PSN.
type oooHold struct {
	slots []heldPacket // oooMaxHeld of them once anything was held
	n     int
}

// hold keeps p, which arrived past ePSN, unless it is too far ahead
// (counted) or already held.
func (e *engine) hold(qp *QP, p *wire.Packet) {
	t := &qp.t
	if e.dev.cfg.Recovery&NoHold != 0 {
		return
	}
	d := (p.BTH.PSN - t.ePSN) & 0xffffff
	if d >= oooMaxHeld {
		e.counters.OOODropped++
		return
	}
	h := &t.held
	if h.slots == nil {
		h.slots = make([]heldPacket, oooMaxHeld)
	}
	s := &h.slots[p.BTH.PSN%oooMaxHeld]
	if s.valid && s.p.BTH.PSN == p.BTH.PSN {
		if !sameRequest(&s.p, p) {
			// Two different packets for one PSN: one is forged. Neither
			// is kept; the requester resends the genuine one.
			s.valid = false
			h.n--
			e.counters.OOODropped++
		}
		return
	}
	if !s.valid {
		h.n++
	}
	buf := append(append(s.buf[:0], p.Payload...), p.PayloadTail...)
	s.valid, s.p, s.buf = true, *p, buf
	s.p.Payload, s.p.PayloadTail = buf, nil
	e.counters.OOOHeld++
}

// drainHeld executes the held packets that have become in order, after
// the packet that filled the hole, and acknowledges the highest PSN now
// contiguous at the end of the receive batch.
func (e *engine) drainHeld(qp *QP) {
	t := &qp.t
	h := &t.held
	start := t.ePSN
	ack := false
	for h.n > 0 && !t.failAfterReplies && (t.state == ibv.StateRTR || t.state == ibv.StateRTS || t.state == ibv.StateSQD) {
		s := &h.slots[t.ePSN%oooMaxHeld]
		if !s.valid || s.p.BTH.PSN != t.ePSN {
			break
		}
		s.valid = false
		h.n--
		// Completions read the packet being handled from e.rx (immediate
		// data, SE): the held one is now that packet.
		e.rx = s.p
		info, _ := e.rx.BTH.Opcode.Info()
		e.respond1(qp, &e.rx, info)
		if t.ePSN == start {
			break // not executed (an RNR NAK): the requester resends it
		}
		start = t.ePSN
		// READ responses and atomic ACKs acknowledge their requests
		// themselves; an ACK naming a READ's PSN could complete it at
		// a requester that lost its responses.
		ack = info.Flags&(wire.FlagSend|wire.FlagWrite) != 0
	}
	// Queued copies into a client's memory read the held buffers, which
	// the next hold may reuse: they are made now.
	e.pending.flush()
	if h.n > 0 {
		// A READ or a forged packet may have moved ePSN past held ones.
		for i := range h.slots {
			s := &h.slots[i]
			if s.valid && psnCmp(s.p.BTH.PSN, t.ePSN) < 0 {
				s.valid = false
				h.n--
			}
		}
	}
	if ack && !t.failAfterReplies && (t.state == ibv.StateRTS || t.state == ibv.StateSQD || t.state == ibv.StateRTR) {
		e.ackNow(qp, (t.ePSN-1)&0xffffff)
	}
}

// dropHeld forgets qp's held packets (the QP left the states that take
// requests).
func (t *qpTransport) dropHeld() {
	for i := range t.held.slots {
		t.held.slots[i].valid = false
	}
	t.held.n = 0
}

// ackNow acknowledges psn at the end of the receive batch, asked for or
// not: after a hole filled, the requester learns at once how far the
// responder has everything.
func (e *engine) ackNow(qp *QP, psn uint32) {
	t := &qp.t
	if !t.ackDue {
		t.ackDue = true
		e.acks = append(e.acks, qp)
	}
	t.ackPSN = psn
}

// sameRequest reports whether q carries the request held as h: a copy
// resent (go-back-N, a probe) is identical; a forged one differs.
func sameRequest(h, q *wire.Packet) bool {
	if h.BTH.Opcode != q.BTH.Opcode || h.RETH != q.RETH || h.AtomicETH != q.AtomicETH || h.ImmDt != q.ImmDt || h.IETH != q.IETH ||
		len(h.Payload) != len(q.Payload)+len(q.PayloadTail) {
		return false
	}
	n := len(q.Payload)
	return bytes.Equal(h.Payload[:n], q.Payload) && bytes.Equal(h.Payload[n:], q.PayloadTail)
}
