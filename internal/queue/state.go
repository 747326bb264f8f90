package queue

import (
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
)

// Transport is a QP's transport state, owned by the engine goroutine.
type Transport struct {
	State ibv.QPState
	Attr  ibv.QPAttr

	SMAC, DMAC [6]byte
	SIP, DIP   netip.Addr
	V6         bool
	SrcPort    uint16
	MTU        int

	// Requester and completer.
	SQ      []SendWQE // outstanding, oldest first
	SQBase  []SendWQE // sq's array (see appendQueue)
	ReqIdx  int       // next WQE of sq to transmit from
	ReqPSN  uint32    // next PSN to transmit (rewound by go-back-N)
	NextPSN uint32    // first PSN of the next new WQE (never rewound)
	CompPSN uint32    // oldest PSN not yet acknowledged
	// SentEnd is one past the last PSN sent (never rewound): responses
	// beyond it answer nothing this QP asked.
	SentEnd uint32
	// AckedReq is the last request PSN the responder is known to have
	// received, with every one before it: from an ACK, a NAK (the PSNs
	// before its own) or a READ response (the PSNs before its READ).
	AckedReq    uint32
	RdAtomicOut int // READs and atomics in flight
	NoAckPkts   int // packets since the last AckReq
	RetryLeft   uint8
	RNRLeft     uint8
	// StartedRetry: a retry episode is under way; until the responder shows
	// progress, NAKs neither count nor rewind again (rxe's started_retry).
	StartedRetry bool
	// Timeouts counts the transport timer's expiries since the responder
	// last showed progress; with retry_cnt 7 each one doubles the next
	// timeout (see rto), and many of them make the QP a stall suspect.
	Timeouts uint32
	// probing: the timer expired, and only the oldest unacknowledged packet
	// is resent (asking for an ACK) until a response shows where the
	// responder stands; then go-back-N resends the rest.
	Probing bool
	// NAKEpisode: the retry episode under way was started by a sequence
	// NAK for CompPSN; a second one for it means the resent packet was
	// lost too (the responder NAKs again only when it sees us go back).
	NAKEpisode bool
	// The round-trip estimate (Jacobson's, with Karn's rule: no sample
	// across a retransmission): RTTAt is when the packet RTTPSN left,
	// zero when no sample is being taken.
	SRTT, RTTVar time.Duration
	RTTPSN       uint32
	RTTAt        time.Time
	// The loss window (cwnd.go): cwnd PSNs may be outstanding, 0 meaning
	// MaxUnackedPSNs; cwndAcked counts acknowledged PSNs towards its next
	// growth; recoverPSN is SentEnd when it last shrank.
	cwnd, cwndAcked, recoverPSN uint32
	Draining                    bool      // in SQD, WQEs already started are not all complete yet
	TimerAt                     time.Time // retransmission deadline; zero when off
	PokeAt                      time.Time // a stalled requester's poke (engine's timer.go); zero when off
	PokedAt                     time.Time // when the poke or timer expiry under way probed; zero when none
	RNRAt                       time.Time // end of an RNR wait; zero when none
	// The lazy AckReq policy (ackpolicy.go): AskAt is when an idle
	// requester asks for the ACK its last packets did not ask for (zero:
	// nothing unasked); SigUnasked, a signaled WQE's last packet went
	// without AckReq and no packet has asked since; Asking, the packet
	// being sent is that ask; AskOut, an ask went and not everything sent
	// since has been acknowledged (RTO does not shorten).
	AskAt                      time.Time
	SigUnasked, Asking, AskOut bool

	// Responder.
	RQ      []RecvWQE
	RQBase  []RecvWQE // rq's array (see appendQueue)
	EPSN    uint32    // expected request PSN
	MSN     uint32
	RespOp  RespOp
	Recv    RecvState
	Write   WriteState
	NAKSent bool
	// NAKMax is the highest out-of-sequence PSN seen since the NAK: one at
	// or below it means the requester went back, so the packet the NAK
	// asked for was lost again, and the responder NAKs once more.
	NAKMax  uint32
	ACKDue  bool // an ACK of ACKPSN waits for the end of the receive batch
	ACKPSN  uint32
	Res     []RespResource
	ResNext int
	// The responses waiting to be sent, in order (replies.go): replies
	// [ReplyHead:]; ReplySent of them went out in engine step ReplyStep.
	Replies   []PendingReply
	ReplyHead int
	ReplyStep uint64
	ReplySent int
	Pace      ReadPacer     // READ responses' pace (pacing.go)
	Reo       ReorderWindow // how deep the path reorders READ responses (recovery.go)
	// ReadRTT is the shortest recent time from a READ request to its
	// answer's first response; ReadTailAt the deadline readTailProbe set
	// the timer to, if it did (recovery.go).
	ReadRTT    time.Duration
	ReadTailAt time.Time
	// FailAfterReplies: a class C error's NAK waits behind replies to
	// earlier requests; the QP enters the error state once they have all
	// left (respError), and takes no request meanwhile.
	FailAfterReplies bool
	// held: request packets that arrived past a hole (ooo.go).
	Held OOOHold
	// FastXDP: the XDP fast path owns the responder (EPSN and MSN are the
	// program's); FastConfigured: it has the QP's addresses and ACK.
	FastXDP, FastConfigured bool
	// FastReq: the program takes the requester's ACKs; FastAckCount is
	// the count of the last one the engine ran.
	FastReq      bool
	FastAckCount uint16
	// FastHandPSN is the EPSN the responder was handed to the program
	// with; fastExec the PSNs [FastHandPSN, FastExecEnd) it then executed.
	FastHandPSN, FastExecEnd uint32
}

func (t *Transport) Reset(qp *QP) {
	t.DropHeld()
	*t = Transport{Attr: ibv.QPAttr{PathMTU: ibv.MTU256}, MTU: 256, Res: make([]RespResource, 1), Held: t.Held}
	qp.StateMirror.Store(uint32(ibv.StateReset))
}

// Npkts is how many packets (PSNs) a message of n bytes takes.
func (t *Transport) Npkts(n uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + uint32(t.MTU) - 1) / uint32(t.MTU)
}

// MarkSent moves SentEnd up to end (one past a PSN just sent). A new READ
// moves it by up to 2^23 PSNs (2 GiB at PMTU 256), the one distance whose
// sign PSNCmp cannot tell: ahead too.
func (t *Transport) MarkSent(end uint32) {
	if d := (end - t.SentEnd) & 0xffffff; d != 0 && d <= 1<<23 {
		t.SentEnd = end
	}
}

// MaxOutstandingSpan bounds the PSNs from the oldest outstanding WQE's
// first to SentEnd: a WQE that would take it further waits for the ones
// before it. One message alone may span 2^23 PSNs (a 2^31-byte READ or
// WRITE at PMTU 256).
const MaxOutstandingSpan = 1 << 23

// PSNAge is how far psn lies behind NextPSN, one past the last PSN given to
// a WQE (0 for NextPSN itself). Every PSN the requester keeps (CompPSN,
// AckedReq, ReqPSN, SentEnd, its WQEs') lies less than 2^24 behind it
// (MaxOutstandingSpan, plus AckedReq one before the oldest WQE), so ages
// order them where serial arithmetic cannot: a 2^23-PSN READ puts its
// first PSN, and CompPSN, 2^23 behind SentEnd, where PSNCmp's sign flips
// and its own responses looked out of window.
func (t *Transport) PSNAge(psn uint32) uint32 { return (t.NextPSN - psn) & 0xffffff }

// PSNAfter reports whether a comes after b, both PSNs the requester keeps.
func (t *Transport) PSNAfter(a, b uint32) bool { return t.PSNAge(a) < t.PSNAge(b) }

// PSNCmp compares 24-bit PSNs as rxe's psn_compare: <0, 0 or >0.
func PSNCmp(a, b uint32) int32 { return int32((a - b) << 8) }

// RespOp is the message the responder is in the middle of.
type RespOp uint8

const (
	RespNone RespOp = iota
	RespSend
	RespWrite
)

// RecvState is the receive WQE a multi-packet SEND is filling.
type RecvState struct {
	Active  bool
	WR      RecvWQE
	Segs    []Span
	Written uint32
}

// Reset ends the receive, keeping the segment slice's capacity so that the
// next one allocates nothing.
func (r *RecvState) Reset() {
	clear(r.Segs)
	*r = RecvState{Segs: r.Segs[:0]}
}

// WriteState is where a multi-packet RDMA WRITE is going.
type WriteState struct {
	MR    *memory.MR
	VA    uint64
	Resid uint32
	Total uint32
	// RKey is the key the WRITE named: a window's is checked again for
	// every packet, since LOCAL_INV, SEND_WITH_INV, Dealloc or a rebind
	// may revoke it between two of them (rxe checks the rkey per packet).
	RKey uint32
	// revoked: the region was deregistered while the WRITE was arriving;
	// the rest of it fails with a remote access error (revokeWrites).
	Revoked bool
}

// RespResource remembers a READ or atomic request so that a duplicate is
// replayed (READ, re-reading memory) or answered from the saved result
// (atomics, never executed twice), as rxe's responder resources.
type RespResource struct {
	Valid    bool
	Atomic   bool
	FirstPSN uint32
	LastPSN  uint32
	VA       uint64
	RKey     uint32
	Length   uint32
	MR       *memory.MR
	Orig     uint64
}
