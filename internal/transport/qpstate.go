// A QP's transport state (qpTransport), PSN arithmetic, and the state
// changes the engine makes: Modify's effects, the error state and the
// flush of the queues.

package transport

import (
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// qpTransport is a QP's transport state, owned by the engine goroutine.
type qpTransport struct {
	state ibv.QPState
	attr  ibv.QPAttr

	smac, dmac [6]byte
	sip, dip   netip.Addr
	v6         bool
	sport      uint16
	mtu        int

	// Requester and completer.
	sq      []sendWQE // outstanding, oldest first
	sqBase  []sendWQE // sq's array (see appendQueue)
	reqIdx  int       // next WQE of sq to transmit from
	reqPSN  uint32    // next PSN to transmit (rewound by go-back-N)
	nextPSN uint32    // first PSN of the next new WQE (never rewound)
	compPSN uint32    // oldest PSN not yet acknowledged
	// sentEnd is one past the last PSN sent (never rewound): responses
	// beyond it answer nothing this QP asked.
	sentEnd uint32
	// ackedReq is the last request PSN the responder is known to have
	// received, with every one before it: from an ACK, a NAK (the PSNs
	// before its own) or a READ response (the PSNs before its READ).
	ackedReq    uint32
	rdAtomicOut int // READs and atomics in flight
	noackPkts   int // packets since the last AckReq
	retryLeft   uint8
	rnrLeft     uint8
	// startedRetry: a retry episode is under way; until the responder shows
	// progress, NAKs neither count nor rewind again (rxe's started_retry).
	startedRetry bool
	// timeouts counts the transport timer's expiries since the responder
	// last showed progress; with retry_cnt 7 each one doubles the next
	// timeout (see rto), and many of them make the QP a stall suspect.
	timeouts uint32
	// probing: the timer expired, and only the oldest unacknowledged packet
	// is resent (asking for an ACK) until a response shows where the
	// responder stands; then go-back-N resends the rest.
	probing bool
	// nakEpisode: the retry episode under way was started by a sequence
	// NAK for compPSN; a second one for it means the resent packet was
	// lost too (the responder NAKs again only when it sees us go back).
	nakEpisode bool
	// The round-trip estimate (Jacobson's, with Karn's rule: no sample
	// across a retransmission): rttAt is when the packet rttPSN left,
	// zero when no sample is being taken.
	srtt, rttvar time.Duration
	rttPSN       uint32
	rttAt        time.Time
	// The loss window (cwnd.go): cwnd PSNs may be outstanding, 0 meaning
	// MaxUnackedPSNs; cwndAcked counts acknowledged PSNs towards its next
	// growth; recoverPSN is sentEnd when it last shrank.
	cwnd, cwndAcked, recoverPSN uint32
	draining                    bool      // in SQD, WQEs already started are not all complete yet
	timerAt                     time.Time // retransmission deadline; zero when off
	rnrAt                       time.Time // end of an RNR wait; zero when none

	// Responder.
	rq      []recvWQE
	rqBase  []recvWQE // rq's array (see appendQueue)
	ePSN    uint32    // expected request PSN
	msn     uint32
	respOp  respOp
	recv    recvState
	write   writeState
	nakSent bool
	// nakMax is the highest out-of-sequence PSN seen since the NAK: one at
	// or below it means the requester went back, so the packet the NAK
	// asked for was lost again, and the responder NAKs once more.
	nakMax  uint32
	ackDue  bool // an ACK of ackPSN waits for the end of the receive batch
	ackPSN  uint32
	res     []respResource
	resNext int
	// The responses waiting to be sent, in order (replies.go): replies
	// [replyHead:]; replySent of them went out in engine step replyStep.
	replies   []pendingReply
	replyHead int
	replyStep uint64
	replySent int
	pace      readPacer     // READ responses' pace (pacing.go)
	reo       reorderWindow // how deep the path reorders READ responses (recovery.go)
	// failAfterReplies: a class C error's NAK waits behind replies to
	// earlier requests; the QP enters the error state once they have all
	// left (respError), and takes no request meanwhile.
	failAfterReplies bool
	// held: request packets that arrived past a hole (ooo.go).
	held oooHold
	// fastXDP: the XDP fast path owns the responder (ePSN and MSN are the
	// program's); fastConfigured: it has the QP's addresses and ACK.
	fastXDP, fastConfigured bool
	// fastReq: the program takes the requester's ACKs; fastAckCount is
	// the count of the last one the engine ran.
	fastReq      bool
	fastAckCount uint16
	// fastHandPSN is the ePSN the responder was handed to the program
	// with; fastExec the PSNs [fastHandPSN, fastExecEnd) it then executed.
	fastHandPSN, fastExecEnd uint32
}

func (t *qpTransport) reset(qp *QP) {
	t.dropHeld()
	*t = qpTransport{attr: ibv.QPAttr{PathMTU: ibv.MTU256}, mtu: 256, res: make([]respResource, 1), held: t.held}
	qp.state.Store(uint32(ibv.StateReset))
}

// npkts is how many packets (PSNs) a message of n bytes takes.
func (t *qpTransport) npkts(n uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + uint32(t.mtu) - 1) / uint32(t.mtu)
}

// markSent moves sentEnd up to end (one past a PSN just sent). A new READ
// moves it by up to 2^23 PSNs (2 GiB at PMTU 256), the one distance whose
// sign psnCmp cannot tell: ahead too.
func (t *qpTransport) markSent(end uint32) {
	if d := (end - t.sentEnd) & 0xffffff; d != 0 && d <= 1<<23 {
		t.sentEnd = end
	}
}

// maxOutstandingSpan bounds the PSNs from the oldest outstanding WQE's
// first to sentEnd: a WQE that would take it further waits for the ones
// before it. One message alone may span 2^23 PSNs (a 2^31-byte READ or
// WRITE at PMTU 256).
const maxOutstandingSpan = 1 << 23

// psnAge is how far psn lies behind nextPSN, one past the last PSN given to
// a WQE (0 for nextPSN itself). Every PSN the requester keeps (compPSN,
// ackedReq, reqPSN, sentEnd, its WQEs') lies less than 2^24 behind it
// (maxOutstandingSpan, plus ackedReq one before the oldest WQE), so ages
// order them where serial arithmetic cannot: a 2^23-PSN READ puts its
// first PSN, and compPSN, 2^23 behind sentEnd, where psnCmp's sign flips
// and its own responses looked out of window.
func (t *qpTransport) psnAge(psn uint32) uint32 { return (t.nextPSN - psn) & 0xffffff }

// psnAfter reports whether a comes after b, both PSNs the requester keeps.
func (t *qpTransport) psnAfter(a, b uint32) bool { return t.psnAge(a) < t.psnAge(b) }

// modify applies a validated Modify on the engine goroutine.
func (e *engine) modify(qp *QP, a ibv.QPAttr, mask ibv.AttrMask, next ibv.QPState, dmac net.HardwareAddr) {
	t := &qp.t
	e.fastTakeOver(qp)
	defer e.fastHandBack(qp, true)
	prev := t.state
	if qp.typ == ibv.QPTypeUD {
		// Datagrams leave from one port per QP (rxe's) and are one packet
		// of up to the port's MTU; each names its destination itself.
		t.sport, t.mtu = wire.UDSourcePort(qp.qpn), e.dev.cfg.ActiveMTU
		copy(t.smac[:], e.dev.cfg.MAC)
	}
	if mask&ibv.AttrEnSQDAsyncNotify != 0 {
		t.attr.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&ibv.AttrAccessFlags != 0 {
		t.attr.AccessFlags = a.AccessFlags
	}
	if mask&ibv.AttrQKey != 0 {
		t.attr.QKey = a.QKey
	}
	if mask&ibv.AttrAV != 0 {
		t.attr.AH = a.AH
		copy(t.dmac[:], dmac)
		copy(t.smac[:], e.dev.cfg.MAC)
		t.sip = gidAddr(e.dev.cfg.GIDs[a.AH.SGIDIndex])
		t.dip = gidAddr(a.AH.DGID)
		t.v6 = !t.dip.Is4()
	}
	if mask&ibv.AttrPathMTU != 0 {
		t.attr.PathMTU = a.PathMTU
		t.mtu = a.PathMTU.Bytes()
	}
	if mask&ibv.AttrTimeout != 0 {
		t.attr.Timeout = a.Timeout
	}
	if mask&ibv.AttrRetryCnt != 0 {
		t.attr.RetryCnt, t.retryLeft = a.RetryCnt, a.RetryCnt
	}
	if mask&ibv.AttrRNRRetry != 0 {
		t.attr.RNRRetry, t.rnrLeft = a.RNRRetry, a.RNRRetry
	}
	if mask&ibv.AttrRQPSN != 0 {
		t.attr.RQPSN, t.ePSN = a.RQPSN, a.RQPSN
	}
	if mask&ibv.AttrSQPSN != 0 {
		t.attr.SQPSN, t.reqPSN, t.nextPSN, t.compPSN, t.sentEnd = a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN
		t.ackedReq = (a.SQPSN - 1) & 0xffffff
	}
	if mask&ibv.AttrMaxQPRdAtomic != 0 {
		t.attr.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&ibv.AttrMaxDestRdAtomic != 0 {
		t.attr.MaxDestRdAtomic = a.MaxDestRdAtomic
		t.res = make([]respResource, max(1, roundPow2(int(a.MaxDestRdAtomic))))
	}
	if mask&ibv.AttrMinRNRTimer != 0 {
		t.attr.MinRNRTimer = a.MinRNRTimer
	}
	if mask&ibv.AttrDestQPN != 0 {
		t.attr.DestQPN = a.DestQPN
	}
	if mask&(ibv.AttrAV|ibv.AttrDestQPN) != 0 {
		t.sport = wire.UDPSourcePort(t.attr.AH.FlowLabel, qp.qpn, t.attr.DestQPN)
	}
	switch next {
	case ibv.StateReset:
		t.reset(qp)
		qp.postMu.Lock()
		qp.postSend, qp.postRecv = qp.postSend[:0], qp.postRecv[:0]
		qp.sqUsed.Store(0)
		qp.rqUsed.Store(0)
		qp.postMu.Unlock()
	case ibv.StateErr:
		t.state = ibv.StateErr
		t.draining, t.failAfterReplies = false, false
		// A QP in the error state sends nothing: the queued READ
		// responses would keep reading application memory after Modify
		// returned.
		t.dropReplies()
		t.dropHeld()
		qp.state.Store(uint32(ibv.StateErr))
		e.takePosts(qp)
		e.flushQueues(qp)
		return
	}
	t.state = next
	qp.state.Store(uint32(next))
	switch {
	case prev == ibv.StateRTS && next == ibv.StateSQD:
		// Drain: the WQEs already started finish, then EventSQDrained.
		t.draining = true
		e.checkDrained(qp)
	case prev == ibv.StateSQD && next == ibv.StateRTS && len(t.sq) > 0:
		e.activate(qp)
	}
}

func roundPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// toError moves a QP to the error state and flushes its queues.
func (e *engine) toError(qp *QP) {
	if qp.t.state == ibv.StateErr {
		return
	}
	e.fastTakeOver(qp)
	qp.t.state = ibv.StateErr
	qp.t.draining, qp.t.failAfterReplies = false, false
	qp.t.dropReplies()
	qp.t.dropHeld()
	qp.state.Store(uint32(ibv.StateErr))
	e.flushQueues(qp)
}

// flushQueues completes every outstanding work request with WR_FLUSH_ERR
// (always, signaled or not), as a QP in the error state does.
func (e *engine) flushQueues(qp *QP) {
	t := &qp.t
	for len(t.sq) > 0 {
		e.retire(qp, ibv.WCWRFlushErr)
	}
	if t.recv.active {
		qp.recvRetired()
		qp.rcq.push(ibv.WorkCompletion{WRID: t.recv.wr.ID, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPNum: qp.qpn}, false)
	}
	for _, r := range t.rq {
		qp.rqUsed.Add(-1)
		qp.freeSharedSlots()
		qp.rcq.push(ibv.WorkCompletion{WRID: r.ID, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPNum: qp.qpn}, false)
	}
	t.rq = t.rq[:0]
	t.timerAt, t.rnrAt = time.Time{}, time.Time{}
	t.reqIdx, t.rdAtomicOut = 0, 0
	t.recv.reset()
	t.respOp = respNone
}

// psnCmp compares 24-bit PSNs as rxe's psn_compare: <0, 0 or >0.
func psnCmp(a, b uint32) int32 { return int32((a - b) << 8) }

// fatal moves a QP to the error state on a transport error that no
// completion of its own send queue reports (a request the responder
// rejected, a CQ overflow) and raises EventQPFatal, once per transition.
// Errors reported by an error completion (a NAK received, retries
// exhausted, a local protection error) move the QP to the error state
// without an event, as ibverbs devices report them through the CQ.
func (e *engine) fatal(qp *QP) {
	if qp.t.state == ibv.StateErr {
		return
	}
	e.toError(qp)
	e.events.post(Event{Type: ibv.EventQPFatal, QP: qp})
}
