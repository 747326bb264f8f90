package queue

import (
	"bytes"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// OOOMaxHeld bounds the packets a QP's responder holds, and how far past
// the expected PSN it holds one: a requester keeps at most
// MaxUnackedPSNs PSNs outstanding, so one hole never costs a packet
// sent behind it. Past it packets are dropped (ooo_dropped) as before. A
// QP that held packets keeps the buffers (at most OOOMaxHeld path MTUs)
// for the next loss.
const OOOMaxHeld = ibv.MaxUnackedPSNs

// HeldPacket is a request packet kept past a hole: its decoded headers,
// with the payload copied out of the receive buffer.
type HeldPacket struct {
	Valid bool
	P     wire.Packet
	Buf   []byte
}

// OOOHold is a QP's held packets, a ring indexed by PSN.
type OOOHold struct {
	Slots []HeldPacket // OOOMaxHeld of them once anything was held
	N     int
	// Selective is what the requester showed after the last fill: the
	// request that followed it was not the PSN after the filling packet,
	// so it resends what was NAKed, not everything behind it. Only then
	// does a fill that uncovers a second hole NAK it: a go-back-N
	// requester (rxe) is already resending it, and a NAK would make it go
	// back again over what it resent.
	Selective bool
	// Watch: the next request arriving shows whether the requester goes
	// back N: a go-back-N one sends AfterFill, the PSN after the filling
	// packet, when that one was held.
	Watch     bool
	AfterFill uint32
}

// DropHeld forgets qp's held packets (the QP left the states that take
// requests).
func (t *Transport) DropHeld() {
	for i := range t.Held.Slots {
		t.Held.Slots[i].Valid = false
	}
	t.Held.N = 0
}

// SameRequest reports whether q carries the request held as h: a copy
// resent (go-back-N, a probe) is identical; a forged one differs.
func SameRequest(h, q *wire.Packet) bool {
	if h.BTH.Opcode != q.BTH.Opcode || h.RETH != q.RETH || h.AtomicETH != q.AtomicETH || h.ImmDt != q.ImmDt || h.IETH != q.IETH ||
		len(h.Payload) != len(q.Payload)+len(q.PayloadTail) {
		return false
	}
	n := len(q.Payload)
	return bytes.Equal(h.Payload[:n], q.Payload) && bytes.Equal(h.Payload[n:], q.PayloadTail)
}
