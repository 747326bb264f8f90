package verbs

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// qpTransport is a QP's transport state, owned by the engine goroutine.
type qpTransport struct {
	state QPState
	attr  QPAttr

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
	pace      readPacer // READ responses' pace (pacing.go)
	// failAfterReplies: a class C error's NAK waits behind replies to
	// earlier requests; the QP enters the error state once they have all
	// left (respError), and takes no request meanwhile.
	failAfterReplies bool
}

// sendWQE is a posted send work request and its progress.
type sendWQE struct {
	wr       SendWR
	length   uint32
	segs     []span // the memory of its SG list, resolved when it starts
	single   bool   // one SGE, kept in sge1 and resolved into seg1 (no allocation)
	sge1     SGE
	seg1     span
	started  bool
	firstPSN uint32
	lastPSN  uint32
	sentOff  uint32 // SEND/WRITE bytes packetised
	sentAll  bool
	readDone uint32 // READ bytes received
	// respDone: every response of this READ or atomic has been placed; it
	// completes once the WQEs before it have.
	respDone bool
	// readFrom is the PSN the latest request of this READ or atomic asked
	// from; retried says it was asked again (see rerequest).
	readFrom uint32
	retried  bool
	inline   []byte // INLINE data, copied when posted
}

func (t *qpTransport) reset(qp *QP) {
	*t = qpTransport{attr: QPAttr{PathMTU: MTU256}, mtu: 256, res: make([]respResource, 1)}
	qp.state.Store(uint32(StateReset))
}

// npkts is how many packets (PSNs) a message of n bytes takes.
func (t *qpTransport) npkts(n uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + uint32(t.mtu) - 1) / uint32(t.mtu)
}

// requester sends what the QP's window allows; it reports whether it sent.
// In SQD it finishes (and retransmits) the WQEs already started and starts
// no new one.
func (e *engine) requester(qp *QP) bool {
	t := &qp.t
	if (t.state != StateRTS && t.state != StateSQD) || !t.rnrAt.IsZero() {
		return false
	}
	sent := false
	for t.reqIdx < len(t.sq) && e.nout < txBatch {
		if qp.typ == QPTypeRC && psnCmp(t.reqPSN, t.compPSN+t.window()) >= 0 {
			break
		}
		if t.probing && t.psnAfter(t.reqPSN, t.compPSN) {
			break // the probe is out: wait for its answer
		}
		w := &t.sq[t.reqIdx]
		if t.state == StateSQD && !w.started {
			break
		}
		if w.sentAll || w.respDone {
			// Go-back-N found nothing of it to resend, or a READ's or
			// atomic's responses all came in since: asking again would
			// send a request for nothing at the PSN after it.
			w.sentAll = true
			t.reqIdx++
			continue
		}
		if w.wr.Opcode.isLocal() {
			// A bind or local invalidate runs once every WR before it has
			// completed, so it is ordered after them and before the WRs
			// behind it (rxe runs it as the requester reaches it; both
			// complete in order).
			if t.reqIdx != 0 {
				break
			}
			e.localOp(qp, w)
			sent = true
			continue
		}
		if !w.started {
			rdAtomic := w.wr.Opcode.isReadOrAtomic()
			if w.wr.Flags&SendFence != 0 && t.rdAtomicOut > 0 {
				break
			}
			if rdAtomic && t.rdAtomicOut >= max(1, int(t.attr.MaxRdAtomic)) {
				break
			}
			n := uint32(1)
			if w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAdd {
				n = t.npkts(w.length)
			}
			if t.reqIdx > 0 && (t.nextPSN+n-t.sq[0].firstPSN)&0xffffff > maxOutstandingSpan {
				break // see psnAge: it waits for the WQEs before it
			}
			if !e.resolveLocal(qp, w) {
				return true
			}
			w.started = true
			w.firstPSN = t.nextPSN
			w.lastPSN = (w.firstPSN + n - 1) & 0xffffff
			t.nextPSN = (w.lastPSN + 1) & 0xffffff
			if rdAtomic {
				t.rdAtomicOut++
			}
		}
		e.sendNext(qp, w)
		sent = true
		if w.sentAll {
			t.reqIdx++
			if qp.typ != QPTypeRC {
				// UC and UD complete when the last packet is handed to the link.
				e.retireSent(qp)
			}
		}
		if qp.typ == QPTypeRC && t.timerAt.IsZero() && t.attr.Timeout > 0 {
			t.timerAt = e.dev.clock.Now().Add(t.rto())
		}
	}
	return sent
}

// localOp executes the BIND_MW or LOCAL_INV at the head of the send queue
// and completes it; a failure completes it with rxe's status (MW_BIND_ERR,
// LOC_QP_OP_ERR) and moves the QP to the error state.
func (e *engine) localOp(qp *QP, w *sendWQE) {
	ok := false
	status := WCMWBindErr
	switch w.wr.Opcode {
	case WRBindMW:
		ok = e.bindMW(qp, w.wr.Bind)
	case WRLocalInv:
		ok, status = e.invalidateRKey(qp, w.wr.InvRKey), WCLocQPOpErr
	}
	w.started, w.sentAll = true, true
	if !ok {
		e.failHead(qp, status)
		return
	}
	e.retire(qp, WCSuccess)
}

// retireSent completes UC WQEs whose packets all left.
func (e *engine) retireSent(qp *QP) {
	for len(qp.t.sq) > 0 && qp.t.sq[0].sentAll && qp.t.reqIdx > 0 {
		e.retire(qp, WCSuccess)
	}
}

// ackTimeout is the local ACK timeout: 4.096 µs × 2^timeout.
func ackTimeout(code uint8) time.Duration { return time.Duration(4096<<code) * time.Nanosecond }

// maxBackoff caps the doubling of the transport timer: 2^4 times its
// first period.
const maxBackoff = 4

// minRTO is the shortest period the adaptive timer uses: above a Go
// scheduler's or garbage collector's pauses, so that a spurious expiry
// stays rare (and costs one probe packet when it happens).
const minRTO = time.Millisecond

// rto is the transport timer's current period. With a finite retry_cnt the
// application chose how soon a dead peer is reported, (retry_cnt+1) ×
// timeout, and the period is the local ACK timeout, fixed, as rxe's. With
// retry_cnt 7, which retries forever, the timer adapts as adaptive
// retransmission on hardware RNICs does: it starts at the measured round
// trip (srtt + 4·rttvar, at least minRTO, at most the local ACK timeout),
// so a loss nothing else reveals (a lost NAK, a lost last packet) costs
// about a round trip instead of perftest's 67 ms; and each expiry without
// progress doubles it, up to maxBackoff doublings. Without the doubling a
// receiver slower than the timer (a deep queue, a loaded CPU) is fed
// retransmissions faster than it can drop them, and goodput collapses.
func (t *qpTransport) rto() time.Duration {
	d := ackTimeout(t.attr.Timeout)
	if t.attr.RetryCnt != 7 {
		return d
	}
	if t.srtt > 0 {
		d = min(d, max(t.srtt+4*t.rttvar, minRTO))
	}
	return d << min(t.timeouts, uint32(maxBackoff))
}

// rttStart times the packet psn, sent now for the first time, unless a
// sample is already being taken.
func (e *engine) rttStart(t *qpTransport, psn uint32) {
	if t.rttAt.IsZero() && t.attr.RetryCnt == 7 && psnCmp(psn, t.sentEnd) >= 0 {
		t.rttPSN, t.rttAt = psn, e.dev.clock.Now()
	}
}

// rttSample ends the sample once compPSN has passed the timed packet.
func (e *engine) rttSample(t *qpTransport) {
	if t.rttAt.IsZero() || psnCmp(t.compPSN, t.rttPSN) <= 0 {
		return
	}
	r := e.dev.clock.Now().Sub(t.rttAt)
	t.rttAt = time.Time{}
	if t.srtt == 0 {
		t.srtt, t.rttvar = r, r/2
		return
	}
	t.rttvar += (max(t.srtt-r, r-t.srtt) - t.rttvar) / 4
	t.srtt += (r - t.srtt) / 8
}

// resolveLocal checks the WQE's SG list against the local keys and fetches
// its memory. On a bad key the WQE completes with LOC_PROT_ERR and the QP
// goes to the error state, as rxe.
func (e *engine) resolveLocal(qp *QP, w *sendWQE) bool {
	if w.wr.Flags&SendInline != 0 {
		// Inline data was copied at post time.
		w.segs, w.seg1, w.single = nil, span{b: w.inline}, true
		return true
	}
	needWrite := w.wr.Opcode.isReadOrAtomic()
	w.segs = w.segs[:0]
	sgl := w.wr.SGList
	if w.single {
		sgl = []SGE{w.sge1}
	}
	for _, s := range sgl {
		mr := e.lookupMR(s.LKey)
		if mr == nil || mr.pd != qp.pd || (needWrite && mr.access&AccessLocalWrite == 0) {
			e.failHead(qp, WCLocProtErr)
			return false
		}
		b, ok := mr.span(s.Addr, s.Length)
		if !ok {
			e.failHead(qp, WCLocProtErr)
			return false
		}
		if w.single {
			w.seg1 = b
		} else {
			w.segs = append(w.segs, b)
		}
	}
	return true
}

// local returns the WQE's resolved local memory; buf backs the single-SGE case.
func (w *sendWQE) local(buf *[1]span) []span {
	if !w.single {
		return w.segs
	}
	buf[0] = w.seg1
	return buf[:]
}

// failHead completes the oldest WQE with an error status and moves the QP to
// the error state, which flushes the rest.
func (e *engine) failHead(qp *QP, status WCStatus) {
	// An application that polls the error completion and then queries the
	// QP must find it in the error state already.
	qp.state.Store(uint32(StateErr))
	if len(qp.t.sq) > 0 {
		e.retire(qp, status)
	}
	e.toError(qp)
}

// sendNext emits the next packet of w (a READ or atomic request is one packet).
func (e *engine) sendNext(qp *QP, w *sendWQE) {
	t := &qp.t
	wr := &w.wr
	if wr.Opcode.isReadOrAtomic() {
		e.sendReadAtomic(qp, w)
		w.sentAll = true
		t.reqPSN = (w.lastPSN + 1) & 0xffffff
		t.noackPkts = 0
		return
	}
	mtu := uint32(t.mtu)
	off := w.sentOff
	n := min(mtu, w.length-off)
	first, last := off == 0, off+n == w.length
	op := dataOpcode(wr.Opcode, first, last, qp.typ == QPTypeUC)
	if qp.typ == QPTypeUD {
		op = wire.UDSendOnly // one packet: checkSendWR bounds it by the MTU
		if wr.Opcode == WRSendWithImm {
			op = wire.UDSendOnlyImm
		}
	}
	psn := (w.firstPSN + off/mtu) & 0xffffff
	t.noackPkts++
	// The packet that fills the window asks for an ACK: nothing else
	// would open it before the timer.
	fills := psnCmp((psn+1)&0xffffff, t.compPSN+t.window()) >= 0
	ackReq := qp.typ == QPTypeRC && (last || t.noackPkts > MaxPktsPerAck || t.probing || fills)
	if ackReq {
		t.noackPkts = 0
	}
	e.rttStart(t, psn)
	var p *wire.Packet
	if qp.typ == QPTypeUD {
		p = e.udHeader(qp, wr, op, psn)
	} else {
		p = e.header(qp, op, psn, ackReq)
	}
	info, _ := op.Info()
	if info.Headers&wire.HasRETH != 0 {
		p.RETH = wire.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, Len: w.length}
	}
	if info.Headers&wire.HasImmDt != 0 {
		p.ImmDt = wr.ImmData
	}
	if info.Headers&wire.HasIETH != 0 {
		p.IETH = wr.InvRKey
	}
	if last && wr.Flags&SendSolicited != 0 && (wr.Opcode != WRRDMAWrite) {
		p.BTH.SE = true
	}
	var one [1]span
	segs := w.local(&one)
	e.send(int(n), func(dst []byte) { gather(dst, segs, off, &e.reads) })
	w.sentOff = off + n
	w.sentAll = last
	t.reqPSN = (psn + 1) & 0xffffff
	t.markSent(t.reqPSN)
	if first && wr.Opcode != WRRDMAWrite && wr.Opcode != WRRDMAWriteWithImm {
		e.counters.RDMASends++
	}
}

// sendReadAtomic sends the request of a READ or atomic WQE. A READ asks
// for what has not arrived yet: after a loss it resumes at the first
// missing byte, with RETH adjusted (a responder treats it as a duplicate
// and replays from there).
func (e *engine) sendReadAtomic(qp *QP, w *sendWQE) {
	t := &qp.t
	wr := &w.wr
	e.rttStart(t, w.firstPSN)
	if wr.Opcode == WRRDMARead {
		psn := w.nextRespPSN(t.mtu)
		p := e.header(qp, wire.RCReadRequest, psn, true)
		p.RETH = wire.RETH{VA: wr.RemoteAddr + uint64(w.readDone), RKey: wr.RKey, Len: w.length - w.readDone}
		w.readFrom = psn
	} else {
		p := e.header(qp, wire.RCFetchAdd, w.firstPSN, true)
		p.AtomicETH = wire.AtomicETH{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.CompareAdd}
		if wr.Opcode == WRAtomicCmpAndSwp {
			p.BTH.Opcode = wire.RCCompareSwap
			p.AtomicETH.SwapAdd, p.AtomicETH.Compare = wr.Swap, wr.CompareAdd
		}
		w.readFrom = w.firstPSN
	}
	e.send(0, nil)
	t.markSent((w.lastPSN + 1) & 0xffffff)
}

// nextRespPSN is the PSN of the next response a READ or atomic WQE waits for.
func (w *sendWQE) nextRespPSN(mtu int) uint32 {
	return (w.firstPSN + w.readDone/uint32(mtu)) & 0xffffff
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

// dataOpcode picks the SEND or WRITE opcode for a packet's place in its message.
func dataOpcode(op WROpcode, first, last, uc bool) wire.Opcode {
	var o wire.Opcode
	switch op {
	case WRSend, WRSendWithImm, WRSendWithInv:
		o = segmentOpcode(first, last, wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast)
		if last && op == WRSendWithImm {
			o++ // SEND_LAST → LAST_WITH_IMM, SEND_ONLY → ONLY_WITH_IMM
		}
		if last && op == WRSendWithInv {
			o = wire.RCSendLastInv
			if first {
				o = wire.RCSendOnlyInv
			}
		}
	default:
		o = segmentOpcode(first, last, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast)
		if last && op == WRRDMAWriteWithImm {
			o++
		}
	}
	if uc {
		o |= 0x20
	}
	return o
}

// segmentOpcode picks ONLY, FIRST, MIDDLE or LAST for a packet's place in its message.
func segmentOpcode(first, last bool, only, firstOp, middle, lastOp wire.Opcode) wire.Opcode {
	switch {
	case first && last:
		return only
	case first:
		return firstOp
	case last:
		return lastOp
	}
	return middle
}

// gather copies len(dst) bytes of the message, starting at offset off, from
// segs; reads from another process's memory are queued in pending (dst is a
// frame being built, see engine.send).
func gather(dst []byte, segs []span, off uint32, pending *remoteCopies) {
	for _, s := range segs {
		if len(dst) == 0 {
			return
		}
		if s.len() <= off {
			off -= s.len()
			continue
		}
		n := s.read(dst, off, pending)
		dst = dst[n:]
		off = 0
	}
}

// payloadLen is a received packet's payload length, both pieces (see
// wire.DecodeSplit).
func payloadLen(p *wire.Packet) uint32 { return uint32(len(p.Payload) + len(p.PayloadTail)) }

// scatterPayload copies a received packet's payload, both pieces, into segs
// at message offset off; false if it does not fit.
// Writes into another process's memory are queued in pending (the
// payload is a received frame's).
func scatterPayload(segs []span, off uint32, p *wire.Packet, pending *remoteCopies) bool {
	return scatter(segs, off, p.Payload, pending) && scatter(segs, off+uint32(len(p.Payload)), p.PayloadTail, pending)
}

// scatter copies src into segs starting at message offset off; false if it
// does not fit. pending: see span.write.
func scatter(segs []span, off uint32, src []byte, pending *remoteCopies) bool {
	for _, s := range segs {
		if len(src) == 0 {
			return true
		}
		if s.len() <= off {
			off -= s.len()
			continue
		}
		n := s.write(src, off, pending)
		src = src[n:]
		off = 0
	}
	return len(src) == 0
}

// retire completes the oldest send WQE with status.
func (e *engine) retire(qp *QP, status WCStatus) {
	t := &qp.t
	w := t.sq[0]
	if w.started && w.wr.Opcode.isReadOrAtomic() && t.rdAtomicOut > 0 {
		t.rdAtomicOut--
	}
	// The slot is free before the completion is visible: an application
	// that polls it and posts at once must find room, as with ibverbs.
	t.sq[0] = sendWQE{}
	t.sq = t.sq[1:]
	qp.sqUsed.Add(-1)
	qp.freeSharedSlots()
	if t.reqIdx > 0 {
		t.reqIdx--
	}
	if status != WCSuccess || qp.sigAll || w.wr.Flags&SendSignaled != 0 {
		wc := WorkCompletion{WRID: w.wr.ID, Status: status, Opcode: w.wr.Opcode.completion(), QPNum: qp.qpn}
		if status == WCSuccess {
			wc.ByteLen = w.length
			// rxe flags a send's completion WITH_IMM too (rc_imm.jsonl, ud_imm.jsonl).
			if w.wr.Opcode == WRSendWithImm || w.wr.Opcode == WRRDMAWriteWithImm {
				wc.Flags = WCWithImm
			}
		}
		e.pending.flush() // a READ's data before its completion
		if !qp.scq.push(wc, false) && t.state != StateErr {
			e.fatal(qp)
		}
	}
	if status == WCSuccess {
		e.checkDrained(qp) // an error completion moves the QP to ERR instead
	}
}

// checkDrained ends an SQD drain once every WQE started before it has
// completed, raising EventSQDrained if the QP asked for it
// (en_sqd_async_notify).
func (e *engine) checkDrained(qp *QP) {
	t := &qp.t
	if !t.draining || t.state != StateSQD || (len(t.sq) > 0 && t.sq[0].started) {
		return
	}
	t.draining = false
	if t.attr.EnSQDAsyncNotify {
		e.events.post(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

// putAtomicResult stores an atomic's original value into its 8-byte SGE.
func putAtomicResult(w *sendWQE, orig uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], orig)
	var one [1]span
	scatter(w.local(&one), 0, b[:], nil) // b is on the stack: written at once
}
