package queue

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// The responder's replies leave in request order (IBTA: responses in PSN
// order), and no QP sends more than ReplyBudget of them per engine step. A
// READ asks for up to 2 GiB, millions of packets at PMTU 256, and a
// requester that goes back asks again; sent in one go, one such request
// would hold the engine while every other QP, and every timer, waits. So a
// reply that does not fit the step's budget is queued and resumed on the
// next steps, round robin with the other QPs, and every response behind it
// (ACK, NAK, atomic ACK, further READ data) queues behind it. rxe's
// responder works the same way: one READ reply at a time, in slices, with
// the later requests waiting behind it. A QP whose path has lost a READ
// response's tail also waits for its pace (pacing.go).

const (
	// ReplyBudget is the packets one QP's responder sends per engine step.
	ReplyBudget = 64
	// MaxQueuedReplies bounds a QP's queue. A requester has at most
	// max_dest_rd_atomic READs and atomics outstanding, plus ACKs and a
	// NAK between them; beyond that only duplicates (a requester going
	// back again and again, or a forger) arrive. A reply that finds the
	// queue full is dropped and counted: a duplicate READ as if no
	// resource held it, an ACK covered by the next, cumulative one (or,
	// failing that, by the requester's timer).
	MaxQueuedReplies = 2*ibv.MaxRdAtomic + 8
)

// PendingReply is one queued response: the rest of a READ reply, or an
// acknowledgement (ACK, NAK or atomic ACK) to send after what precedes it.
type PendingReply struct {
	Read bool
	Res  RespResource // READ: a copy, as resources are reused meanwhile
	Next uint32       // READ: the next PSN to send
	// replay: the READ's response is sent again (counted as retransmitted).
	Replay bool
	// Acknowledgements.
	Op       wire.Opcode // RCAck or RCAtomicAck
	PSN      uint32
	Syndrome uint8
	MSN      uint32
	Orig     uint64
}

// Replying reports whether responses are waiting: a new one must queue.
func (t *Transport) Replying() bool { return t.ReplyHead < len(t.Replies) }

// DropReplies forgets qp's queued replies (the QP is leaving the states
// that send them).
func (t *Transport) DropReplies() {
	clear(t.Replies)
	t.Replies, t.ReplyHead = t.Replies[:0], 0
}
