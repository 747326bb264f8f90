package verbs

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// engine is the transport of one device. Only the device's engine goroutine
// touches it.
type engine struct {
	dev     *Device
	qps     []*QP  // by QPN; nil where free
	live    []*QP  // QPs that exist, in creation order
	active  []*QP  // QPs with send work or timers: the only ones a step visits
	posted  []*QP  // spare list for Device.takePosted
	acks    []*QP  // QPs with an ACK deferred to the end of the receive batch
	nextQPN uint32 // a QPN to use next if free (the golden tests pin the captures' QPNs); 0: random
	mrs     mrTable
	// mrMu lets posters read the MR table (inline sends copy their data at
	// post time) while the engine, its only writer, changes it: the engine
	// reads it without the lock.
	mrMu     sync.RWMutex
	pdSeq    uint32
	counters Counters
	events   eventQueue // asynchronous events, read by Device.GetAsyncEvent

	rx   wire.Packet  // the packet being handled
	tx   wire.Packet  // the packet being built
	bufs [][]byte     // frame buffers, one per frame of a flush
	rxFn func([]byte) // e.handleFrame, bound once: a method value per step would allocate
	// splitter is the link when it hands frames over in their pieces
	// (AF_XDP multi-buffer), rxSplitFn e.handleSplit, gather a buffer for
	// the rare frame whose headers cross a piece.
	splitter  splitReceiver
	rxSplitFn func(head, tail []byte)
	gather    []byte
	out       [][]byte // frames built in bufs, for Send
	nout      int      // frames queued since the last flush
	steps     uint64   // engine steps so far: the responders' budgets are per step
	// nacks of the nout frames are positive ACKs; while they are all there
	// is, the batch may wait (holding) until holdEnd for a reply to join it.
	nacks      int
	holding    bool
	holdEnd    time.Time
	holdSkip   int
	holdCredit int
	// lender is the link when it lends transmit buffers (then bufs and out
	// are unused and each frame is built in place).
	lender frameLender
	// selector is the link when it has several transmit queues.
	selector txSelector
}

// txSelector is a Link with several transmit queues: the frames built
// after SelectTX go out on the queue of their flow, the UDP source port.
type txSelector interface{ SelectTX(flow uint16) }

// rxBatch and txBatch bound the frames handled per step.
const (
	rxBatch = 64
	txBatch = 128
)

func (e *engine) init(d *Device) {
	e.dev = d
	e.events.ready = make(chan struct{}, 1)
	e.rxFn = e.handleFrame
	e.rxSplitFn = e.handleSplit
	if s, ok := d.link.(splitReceiver); ok {
		e.splitter = s
		e.gather = make([]byte, 0, 2*d.link.MaxFrame())
	}
	e.selector, _ = d.link.(txSelector)
	if l, ok := d.link.(frameLender); ok {
		e.lender = l
		return
	}
	e.bufs = make([][]byte, txBatch)
	for i := range e.bufs {
		e.bufs[i] = make([]byte, d.link.MaxFrame())
	}
	e.out = make([][]byte, 0, txBatch)
}

// pickQPN chooses a free QPN at random (rxe numbers them from 0x11 up, so
// an off-path attacker knows them; here a forged frame must guess one of
// MaxQP-0x11 as well as the PSN window), or 0 when all are in use. A
// pinned QPN (the golden tests replay captures) is taken first.
func (e *engine) pickQPN() uint32 {
	free := func(c uint32) bool { return int(c) >= len(e.qps) || e.qps[c] == nil }
	if c := e.nextQPN; c != 0 {
		e.nextQPN = 0
		if c >= firstUserQPN && c < MaxQP && free(c) {
			return c
		}
	}
	span := MaxQP - firstUserQPN
	start := firstUserQPN + uint32(e.dev.rng.IntN(span))
	for i := range uint32(span) {
		if c := firstUserQPN + (start-firstUserQPN+i)%uint32(span); free(c) {
			return c
		}
	}
	return 0
}

func (e *engine) addQP(qp *QP) error {
	qpn := e.pickQPN()
	if qpn == 0 {
		return fmt.Errorf("verbs: all %d QPs in use: %w", MaxQP, ErrNoMem)
	}
	for int(qpn) >= len(e.qps) {
		e.qps = append(e.qps, nil)
	}
	qp.qpn = qpn
	qp.t.reset(qp)
	e.qps[qpn] = qp
	e.live = append(e.live, qp)
	return nil
}

// removeQP forgets qp; ErrInvalid if it is not one of the device's QPs
// (destroyed already: uverbs rejects a stale handle the same way).
func (e *engine) removeQP(qp *QP) error {
	if int(qp.qpn) >= len(e.qps) || e.qps[qp.qpn] != qp {
		return fmt.Errorf("verbs: QP %#x was destroyed: %w", qp.qpn, ErrInvalid)
	}
	e.qps[qp.qpn] = nil
	for i, q := range e.live {
		if q == qp {
			e.live = append(e.live[:i], e.live[i+1:]...)
			break
		}
	}
	if qp.active {
		for i, q := range e.active {
			if q == qp {
				e.active = append(e.active[:i], e.active[i+1:]...)
				break
			}
		}
		qp.active = false
	}
	qp.t.state = StateReset
	qp.state.Store(uint32(StateReset))
	return nil
}

// step does one round of work and reports whether there was any.
func (e *engine) step() bool {
	// Posted receives are taken before packets are handled, so a SEND that
	// follows its receive's post never meets an empty queue.
	e.steps++
	posted := e.dev.takePosted(e.posted)
	for _, qp := range posted {
		qp.queued.Store(false)
		if int(qp.qpn) < len(e.qps) && e.qps[qp.qpn] == qp {
			e.takePosts(qp)
		}
	}
	clear(posted)
	e.posted = posted
	var n int
	if e.splitter != nil {
		n, _ = e.splitter.ReceiveSplit(rxBatch, e.rxSplitFn)
	} else {
		n, _ = e.dev.link.Receive(rxBatch, e.rxFn)
	}
	e.sendDueAcks()
	busy := n > 0
	now := e.dev.clock.Now()
	for _, qp := range e.active {
		e.checkTimers(qp, now)
		if e.requester(qp) {
			busy = true
		}
		if e.pumpReplies(qp) {
			busy = true
		}
	}
	e.pruneActive()
	if e.nout > 0 {
		if !e.holdAcks() {
			e.flush()
		}
		busy = true
	}
	return busy
}

// holdAcks reports whether the frames queued, all ACKs, should wait for
// a reply: a ping-pong's answer then leaves in the same kick as the ACK of
// the request it answers, and a round trip costs two kicks instead of four.
// Holds earn credit when a reply joins them and lose it when none does; with
// none left, the next holdBackoff batches go at once before a hold is tried
// again, so a requester waiting for its ACK with nothing to answer is rarely
// delayed. The hold uses the real clock, not the transport's (a test's fake
// clock may stand still).
func (e *engine) holdAcks() bool {
	if e.nacks != e.nout || e.dev.cfg.AckHold < 0 {
		return false
	}
	now := time.Now()
	if !e.holding {
		if e.holdCredit == 0 {
			if e.holdSkip > 0 {
				e.holdSkip--
				return false
			}
			e.holdCredit = 1 // try once more
		}
		e.holding, e.holdEnd = true, now.Add(e.dev.cfg.AckHold)
		e.counters.AckHeld++
		return true
	}
	if now.Before(e.holdEnd) {
		return true
	}
	e.counters.AckHoldMissed++
	e.holdCredit = max(e.holdCredit-holdCreditMax/2, 0)
	if e.holdCredit == 0 {
		e.holdSkip = holdBackoff
	}
	return false
}

const (
	// holdCreditMax is a hold's credit after a reply joined it: two misses
	// in a row use it up.
	holdCreditMax = 8
	// holdBackoff is how many ACK batches go unheld once credit is gone.
	holdBackoff = 64
)

// activate makes the steps visit qp.
func (e *engine) activate(qp *QP) {
	if !qp.active {
		qp.active = true
		e.active = append(e.active, qp)
	}
}

// pruneActive drops the QPs with nothing left to send or time.
func (e *engine) pruneActive() {
	keep := e.active[:0]
	for _, qp := range e.active {
		t := &qp.t
		if len(t.sq) > 0 || !t.timerAt.IsZero() || !t.rnrAt.IsZero() || t.replying() {
			keep = append(keep, qp)
		} else {
			qp.active = false
		}
	}
	clear(e.active[len(keep):])
	e.active = keep
}

// nextTimer is how long the engine may sleep.
func (e *engine) nextTimer() time.Duration {
	wait := idleWait
	if due := e.nextDeadline(); !due.IsZero() {
		wait = min(wait, max(due.Sub(e.dev.clock.Now()), 0))
	}
	return wait
}

// nextDeadline is the earliest armed timer of the active QPs; zero if none.
func (e *engine) nextDeadline() time.Time {
	var due time.Time
	for _, qp := range e.active {
		for _, at := range [2]time.Time{qp.t.timerAt, qp.t.rnrAt} {
			if !at.IsZero() && (due.IsZero() || at.Before(due)) {
				due = at
			}
		}
	}
	return due
}

// takePosts moves what the application posted into the engine's queues.
func (e *engine) takePosts(qp *QP) {
	qp.postMu.Lock()
	if len(qp.postSend) == 0 && len(qp.postRecv) == 0 {
		qp.postMu.Unlock()
		return
	}
	qp.t.sq = appendQueue(&qp.t.sqBase, qp.t.sq, qp.postSend)
	qp.t.rq = appendQueue(&qp.t.rqBase, qp.t.rq, qp.postRecv)
	clear(qp.postSend)
	qp.postSend = qp.postSend[:0]
	qp.postRecv = qp.postRecv[:0]
	qp.postMu.Unlock()
	if qp.t.state == StateErr {
		e.flushQueues(qp)
	}
	if len(qp.t.sq) > 0 {
		e.activate(qp)
	}
}

// appendQueue appends add to the queue q, which is consumed from the front
// (q = q[1:]). When q's capacity runs out it first slides q back to the start
// of its array, base, so a queue in steady state never allocates.
func appendQueue[T any](base *[]T, q, add []T) []T {
	if len(q)+len(add) > cap(q) && len(q)+len(add) <= cap(*base) {
		b := (*base)[:cap(*base)]
		n := copy(b, q)
		clear(b[n:]) // no stale references to memory regions
		q = b[:n]
	}
	q = append(q, add...)
	if cap(q) > cap(*base) { // a new array: it is the base from now on
		*base = q[:0]
	}
	return q
}

// frame returns a buffer for the next outgoing frame, flushing if needed:
// the link's own transmit buffer when it lends them, else one of e.bufs.
// nil means the link has no buffer free: the frame is lost, as on a
// congested NIC, and the transport recovers.
func (e *engine) frame() []byte {
	if e.nout == txBatch {
		e.flush()
	}
	if e.lender != nil {
		return e.lender.TXBuffer()
	}
	return e.bufs[e.nout]
}

// queue adds the frame of n bytes built in the last frame() buffer.
func (e *engine) queue(buf []byte, n int) {
	if n < wire.MinFrameLen {
		clear(buf[n:wire.MinFrameLen]) // the pad; a lent buffer holds old bytes
		n = wire.MinFrameLen
	}
	if e.lender != nil {
		e.lender.CommitTX(n)
	} else {
		e.out = append(e.out, buf[:n])
	}
	e.nout++
	e.counters.SentPkts++
}

func (e *engine) flush() {
	if e.holding && e.nout > e.nacks {
		e.holdCredit = holdCreditMax // a reply joined the ACKs
	}
	e.nacks, e.holding = 0, false
	if e.nout == 0 {
		return
	}
	// A failed send is a lost packet: the transport recovers.
	if e.lender != nil {
		_ = e.lender.FlushTX()
	} else {
		_ = e.dev.link.Send(e.out)
		e.out = e.out[:0]
	}
	e.nout = 0
}

// header prepares e.tx for a packet of qp with the given BTH fields.
func (e *engine) header(qp *QP, op wire.Opcode, psn uint32, ackReq bool) *wire.Packet {
	p := &e.tx
	t := &qp.t
	p.Eth = wire.Ethernet{Dst: t.dmac, Src: t.smac}
	p.IP = wire.IP{V6: t.v6, Src: t.sip, Dst: t.dip, TOS: t.attr.AH.TrafficClass, TTL: 64, DF: !t.v6}
	p.UDP = wire.UDP{SrcPort: t.sport, DstPort: wire.UDPPort}
	if e.selector != nil {
		e.selector.SelectTX(t.sport)
	}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: t.attr.DestQPN, AckReq: ackReq, PSN: psn & 0xffffff}
	p.Payload = nil
	return p
}

// send encodes e.tx with payloadLen bytes gathered by fill and queues it.
func (e *engine) send(payloadLen int, fill func(dst []byte)) {
	buf := e.frame()
	if buf == nil {
		e.counters.SendErr++
		return
	}
	hdr, err := wire.EncodeHeaders(buf, &e.tx, payloadLen)
	if err != nil {
		panic(fmt.Sprintf("verbs: building a %v packet: %v", e.tx.BTH.Opcode, err)) // a transport bug, not input
	}
	if payloadLen > 0 {
		fill(buf[hdr : hdr+payloadLen])
	}
	n, err := wire.Seal(buf, hdr, payloadLen)
	if err != nil {
		panic(fmt.Sprintf("verbs: sealing a %v packet: %v", e.tx.BTH.Opcode, err))
	}
	e.queue(buf, n)
}

// handleFrame is called for every received frame.
func (e *engine) handleFrame(frame []byte) {
	if err := wire.Decode(frame, &e.rx); err != nil {
		e.counters.DroppedMalformed++
		return
	}
	e.dispatch()
}

// handleSplit is called for a frame that arrived in two pieces (tail empty
// when it did not): it is decoded in place, and its payload is copied once,
// from the pieces into registered memory. A frame whose headers cross the
// pieces (never one a peer's NIC sends: the first piece holds thousands of
// bytes) is gathered first.
func (e *engine) handleSplit(head, tail []byte) {
	if len(tail) == 0 {
		e.handleFrame(head)
		return
	}
	err := wire.DecodeSplit(head, tail, &e.rx)
	if errors.Is(err, wire.ErrSplitHeaders) && len(head)+len(tail) <= cap(e.gather) {
		e.gather = append(append(e.gather[:0], head...), tail...)
		e.handleFrame(e.gather)
		return
	}
	if err != nil {
		e.counters.DroppedMalformed++
		return
	}
	e.dispatch()
}

// splitReceiver is a Link that can hand over a frame in its pieces.
type splitReceiver interface {
	ReceiveSplit(max int, fn func(head, tail []byte)) (int, error)
}

// dispatch hands the packet just decoded into e.rx to its QP.
func (e *engine) dispatch() {
	p := &e.rx
	qpn := p.BTH.DestQP
	if int(qpn) >= len(e.qps) || e.qps[qpn] == nil {
		e.counters.DroppedNoQP++
		return
	}
	// rxe's check_keys: the BTH P_Key must match the port's only P_Key,
	// the default 0xffff, in its low 15 bits (either membership).
	if p.BTH.PKey&0x7fff != 0x7fff {
		e.counters.DroppedBadPKey++
		return
	}
	qp := e.qps[qpn]
	info, _ := p.BTH.Opcode.Info()
	t := &qp.t
	wantTransport := wire.TransportRC
	if qp.typ == QPTypeUC {
		wantTransport = wire.TransportUC
	}
	// rxe's check_type_state and check_addr: the right transport, from the
	// connected peer to our address; anything else is dropped silently.
	if p.BTH.Opcode.Transport() != wantTransport || p.IP.Src != t.dip || p.IP.Dst != t.sip {
		e.counters.DroppedNoQP++
		return
	}
	e.counters.RcvdPkts++
	if info.Flags&wire.FlagRequest != 0 {
		if t.state == StateRTR || t.state == StateRTS || t.state == StateSQD {
			e.responder(qp, p, info)
		}
		return
	}
	if t.state == StateRTS || t.state == StateSQD {
		e.completer(qp, p, info)
	}
}

// modify applies a validated Modify on the engine goroutine.
func (e *engine) modify(qp *QP, a QPAttr, mask AttrMask, next QPState, dmac net.HardwareAddr) {
	t := &qp.t
	prev := t.state
	if mask&AttrEnSQDAsyncNotify != 0 {
		t.attr.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&AttrAccessFlags != 0 {
		t.attr.AccessFlags = a.AccessFlags
	}
	if mask&AttrQKey != 0 {
		t.attr.QKey = a.QKey
	}
	if mask&AttrAV != 0 {
		t.attr.AH = a.AH
		copy(t.dmac[:], dmac)
		copy(t.smac[:], e.dev.cfg.MAC)
		t.sip = gidAddr(e.dev.cfg.GIDs[a.AH.SGIDIndex])
		t.dip = gidAddr(a.AH.DGID)
		t.v6 = !t.dip.Is4()
	}
	if mask&AttrPathMTU != 0 {
		t.attr.PathMTU = a.PathMTU
		t.mtu = a.PathMTU.Bytes()
	}
	if mask&AttrTimeout != 0 {
		t.attr.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		t.attr.RetryCnt, t.retryLeft = a.RetryCnt, a.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		t.attr.RNRRetry, t.rnrLeft = a.RNRRetry, a.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		t.attr.RQPSN, t.ePSN = a.RQPSN, a.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		t.attr.SQPSN, t.reqPSN, t.nextPSN, t.compPSN, t.sentEnd = a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN
		t.ackedReq = (a.SQPSN - 1) & 0xffffff
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		t.attr.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		t.attr.MaxDestRdAtomic = a.MaxDestRdAtomic
		t.res = make([]respResource, max(1, roundPow2(int(a.MaxDestRdAtomic))))
	}
	if mask&AttrMinRNRTimer != 0 {
		t.attr.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrDestQPN != 0 {
		t.attr.DestQPN = a.DestQPN
	}
	if mask&(AttrAV|AttrDestQPN) != 0 {
		t.sport = wire.UDPSourcePort(t.attr.AH.FlowLabel, qp.qpn, t.attr.DestQPN)
	}
	switch next {
	case StateReset:
		t.reset(qp)
		qp.postMu.Lock()
		qp.postSend, qp.postRecv = qp.postSend[:0], qp.postRecv[:0]
		qp.sqUsed.Store(0)
		qp.rqUsed.Store(0)
		qp.postMu.Unlock()
	case StateErr:
		t.state = StateErr
		t.draining = false
		qp.state.Store(uint32(StateErr))
		e.takePosts(qp)
		e.flushQueues(qp)
		return
	}
	t.state = next
	qp.state.Store(uint32(next))
	switch {
	case prev == StateRTS && next == StateSQD:
		// Drain: the WQEs already started finish, then EventSQDrained.
		t.draining = true
		e.checkDrained(qp)
	case prev == StateSQD && next == StateRTS && len(t.sq) > 0:
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
	if qp.t.state == StateErr {
		return
	}
	qp.t.state = StateErr
	qp.t.draining = false
	qp.t.dropReplies()
	qp.state.Store(uint32(StateErr))
	e.flushQueues(qp)
}

// flushQueues completes every outstanding work request with WR_FLUSH_ERR
// (always, signaled or not), as a QP in the error state does.
func (e *engine) flushQueues(qp *QP) {
	t := &qp.t
	for len(t.sq) > 0 {
		e.retire(qp, WCWRFlushErr)
	}
	if t.recv.active {
		qp.recvRetired()
		qp.rcq.push(WorkCompletion{WRID: t.recv.wr.ID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.qpn}, false)
	}
	for _, r := range t.rq {
		qp.rqUsed.Add(-1)
		qp.rcq.push(WorkCompletion{WRID: r.ID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.qpn}, false)
	}
	t.rq = t.rq[:0]
	t.timerAt, t.rnrAt = time.Time{}, time.Time{}
	t.reqIdx, t.rdAtomicOut = 0, 0
	t.recv.reset()
	t.respOp = respNone
}

// psnCmp compares 24-bit PSNs as rxe's psn_compare: <0, 0 or >0.
func psnCmp(a, b uint32) int32 { return int32((a - b) << 8) }
