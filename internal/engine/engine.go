package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/internal/engine/handoff"
	"github.com/xdproce/xdproce/internal/engine/idle"
	"github.com/xdproce/xdproce/internal/engine/tables"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/wire"
)

// Engine runs the transport of the QPs of one of the device's queues. Only
// the holder of its mutex (its goroutine, an application in Progress, or a
// control operation holding every engine's mutex) touches it.
type Engine struct {
	*tables.Objects // the device's shared tables
	dev             *Device
	Link            link.Link // this engine's queue
	Index           int       // its queue's index among the device's engines
	Mu              sync.Mutex
	// Drives counts the rounds applications ran (Progress); while it grows,
	// the engine's goroutine skips its own (Device.run, DroveSince).
	Drives atomic.Uint64
	// stepNow is the time read once per step (now); nowSet says it is valid.
	stepNow time.Time
	nowSet  bool
	// The doorbell. A poster sets work and wakes the link only when the
	// engine said it is going to sleep; the engine says so, then looks at
	// work once more before sleeping, so no post is missed and a busy engine
	// costs posters no system call.
	work     atomic.Bool
	sleeping atomic.Bool
	// QPs with new posts, appended once per engine pass (QP.queued guards).
	postedMu sync.Mutex
	posted   []*queue.QP
	spare    []*queue.QP // the engine's other list, swapped with posted
	// inbox holds frames another engine received for this engine's QPs.
	inbox    handoff.Inbox
	inFrames [][]byte    // the engine's batch taken from inbox
	Active   []*queue.QP // QPs with send work or timers: the only ones a step visits
	acks     []*queue.QP // QPs with an ACK deferred to the end of the receive batch
	Counters ibv.Counters
	spin     idle.Spinner // whether the engine's goroutine spins when idle
	wakeups  uint64       // sleeps the engine's goroutine woke from (its own)
	// Watcher is the link when it can wait on a daemon's clients'
	// doorbells too (NIC.WatchDoorbell).
	Watcher link.Watcher

	// fastTaken: QPs whose responder a frame took back from the XDP fast
	// path during this receive batch (fastpath.go).
	fastTaken []*queue.QP
	fastAck   wire.Packet // an ACK the program took, as the completer reads it
	// fastExecuted and fastLost count the WRITEs the program executed for
	// this engine's QPs and those of them the requester sent again (their
	// ACK lost); fastOff: too many were, the program's ACKs do not reach
	// the peer, and responders stay the engine's (fastpath.go).
	fastExecuted, fastLost uint64
	fastOff                bool

	rx   wire.Packet  // the packet being handled
	tx   wire.Packet  // the packet being built
	bufs [][]byte     // frame buffers, one per frame of a flush
	rxFn func([]byte) // e.handleFrame, bound once: a method value per step would allocate
	// splitter is the link when it hands frames over in their pieces
	// (AF_XDP multi-buffer), rxSplitFn e.handleSplit, gather a buffer for
	// the rare frame whose headers cross a piece.
	splitter  link.SplitReceiver
	rxSplitFn func(head, tail []byte)
	capBuf    []byte // a split frame gathered for the capture
	// pending are writes into daemon clients' own memory that received
	// frames carry, made once per receive batch (ProcCopies): before the
	// link releases the batch's frames, and before anything could let the
	// data be seen — a completion, a frame sent — or read.
	pending queue.ProcCopies
	// reads are the payloads of frames being sent that come from daemon
	// clients' own memory, read once per transmit batch; unsealed are
	// those frames, committed with their final length and sealed once the
	// reads are made, before the batch is submitted (sealDeferred).
	reads    queue.ProcCopies
	unsealed []unsealedFrame
	gather   []byte
	// rxHead and rxTail are the frame being handled as it arrived, to hand
	// it to another engine.
	rxHead, rxTail []byte
	out            [][]byte // frames built in bufs, for Send
	nout           int      // frames queued since the last flush
	steps          uint64   // engine steps so far: the responders' budgets are per step
	// nacks of the nout frames are positive ACKs; while they are all there
	// is, the batch may wait (holding) until holdEnd for a reply to join it.
	nacks      int
	holding    bool
	holdEnd    time.Time
	holdSkip   int
	holdCredit int
	// paceDue is when, on the real clock, the earliest READ response this
	// step held back for its QP's pace may leave (pacing.go); zero if none.
	paceDue time.Time
	// lender is the link when it lends transmit buffers (then bufs and out
	// are unused and each frame is built in place).
	lender link.FrameLender
	// loop are the frames of this batch addressed to one of the device's
	// own GIDs, built in loopBufs (allocated at the first): flush hands
	// them to the receive path instead of the link (rxe_loopback). txLocal
	// says the frame being built is one of them.
	loop     [][]byte
	loopBufs [][]byte
	txLocal  bool
	// mcLoop are the batch's frames to groups the device is a member of,
	// which flush also hands to the engines' inboxes (mcast.go). While
	// handingOff the engine handles frames other engines handed it, and a
	// multicast frame goes to its own QPs only; McHanded marks, per
	// engine, those a multicast frame was handed to.
	mcLoop     [][]byte
	handingOff bool
	McHanded   []bool
	// fastSlice: a requester queued a packet asking for an ACK that the XDP
	// program takes, and sends no more of its QP until it is kicked
	// (streamSlices).
	fastSlice bool
}

// RxBatch and txBatch bound the frames handled per step.
const (
	RxBatch = 64
	txBatch = 128
)

func (e *Engine) Init(d *Device, l link.Link, index int) {
	e.Objects, e.dev, e.Link, e.Index = &d.Objs, d, l, index
	e.rxFn = e.receiveFrame
	e.rxSplitFn = e.receiveSplit
	e.reads.Read = true
	if h, ok := l.(link.ReleaseHooker); ok {
		h.SetReleaseHook(e.pending.Flush)
	}
	e.inbox.Max = l.MaxFrame()
	if s, ok := l.(link.SplitReceiver); ok {
		e.splitter = s
		e.gather = make([]byte, 0, 2*l.MaxFrame())
	}
	if w, ok := l.(link.Watcher); ok {
		e.Watcher = w
	}
	if l, ok := l.(link.FrameLender); ok {
		e.lender = l
		return
	}
	e.bufs = make([][]byte, txBatch)
	for i := range e.bufs {
		e.bufs[i] = make([]byte, l.MaxFrame())
	}
	e.out = make([][]byte, 0, txBatch)
}

// Deactivate takes qp off the engine's active list.
func (e *Engine) Deactivate(qp *queue.QP) {
	if !qp.Active {
		return
	}
	for i, q := range e.Active {
		if q == qp {
			e.Active = append(e.Active[:i], e.Active[i+1:]...)
			break
		}
	}
	qp.Active = false
}

// Step does one round of work and reports whether there was any.
func (e *Engine) Step() bool {
	// Posted receives are taken before packets are handled, so a SEND that
	// follows its receive's post never meets an empty queue.
	e.steps++
	e.paceDue = time.Time{}
	e.nowSet = false
	defer func() { e.nowSet = false }() // a control path outside Step reads the clock afresh
	fed := len(e.SharedQPs) > 0 && e.pumpShared()
	if len(e.SharedSRQs) > 0 && e.pumpSharedSRQs() {
		fed = true
	}
	e.takeNewPosts()
	acked := e.fastAcks() // ACKs the XDP program took (fastpath.go)
	n := e.receiveHandedOff()
	if e.splitter != nil {
		k, _ := e.splitter.ReceiveSplit(RxBatch, e.rxSplitFn)
		n += k
	} else {
		k, _ := e.Link.Receive(RxBatch, e.rxFn)
		n += k
	}
	e.sendDueAcks()
	e.fastHandBacks()
	busy := n > 0 || fed || acked
	for _, qp := range e.Active {
		e.checkTimers(qp)
		if e.requester(qp) {
			busy = true
		}
		if e.pumpReplies(qp) {
			busy = true
		}
	}
	e.streamSlices()
	e.pruneActive()
	e.pending.Flush() // nothing stays queued between steps (control operations run there)
	if len(e.SharedQPs) > 0 {
		e.publishShared()
	}
	if e.nout > 0 {
		if !e.holdAcks() {
			e.Flush()
		}
		busy = true
	}
	return busy
}

// takeNewPosts moves the work requests posted since the last look into the
// send queues of the engine's QPs.
func (e *Engine) takeNewPosts() {
	posted := e.takePosted()
	for _, qp := range posted {
		qp.Queued.Store(false)
		if owner := e.dev.EngineOf(qp); owner != e {
			owner.NotePosted(qp) // moved to another engine since it was posted to
			continue
		}
		if int(qp.Number) < len(e.Qps) && e.Qps[qp.Number] == qp {
			e.TakePosts(qp)
		}
	}
	clear(posted)
	e.spare = posted
}

// streamSlices keeps a fast-path requester streaming. The requester stops
// a QP's pass after a packet asking for an ACK the XDP program takes
// (fastSlice); the frames up to it are kicked at once. In copy mode the peer's program
// answers, and this host's program takes the ACK, inside that kick, so the
// completions reach the application while the rest of its window is still
// to be sent, and what it posts meanwhile joins the stream in this step
// instead of after a round trip through sleep and wake-up.
func (e *Engine) streamSlices() {
	for range streamRounds {
		if !e.fastSlice {
			return
		}
		e.fastSlice = false
		e.Flush()
		if !e.fastAcks() {
			return // not answered within the kick (a NIC that sends later): the next step looks
		}
		if len(e.SharedQPs) > 0 {
			e.publishShared()
			e.pumpShared()
		}
		e.takeNewPosts()
		for _, qp := range e.Active {
			e.requester(qp)
		}
	}
}

// streamRounds bounds the slices of one step, so that received frames and
// timers are looked at between them.
const streamRounds = 8

// holdAcks reports whether the frames queued, all ACKs, should wait for
// a reply: a ping-pong's answer then leaves in the same kick as the ACK of
// the request it answers, and a round trip costs two kicks instead of four.
// Holds earn credit when a reply joins them and lose it when none does; with
// none left, the next holdBackoff batches go at once before a hold is tried
// again, so a requester waiting for its ACK with nothing to answer is rarely
// delayed. The hold uses the real clock, not the transport's (a test's fake
// clock may stand still).
func (e *Engine) holdAcks() bool {
	if e.nacks != e.nout || e.dev.Cfg.AckHold < 0 {
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
		e.holding, e.holdEnd = true, now.Add(e.dev.Cfg.AckHold)
		e.Counters.AckHeld++
		return true
	}
	if now.Before(e.holdEnd) {
		return true
	}
	e.Counters.AckHoldMissed++
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

// Activate makes the steps visit qp.
func (e *Engine) Activate(qp *queue.QP) {
	if !qp.Active {
		qp.Active = true
		e.Active = append(e.Active, qp)
	}
}

// pruneActive drops the QPs with nothing left to send or time.
func (e *Engine) pruneActive() {
	keep := e.Active[:0]
	for _, qp := range e.Active {
		t := &qp.Transport
		if len(t.SQ) > 0 || !t.TimerAt.IsZero() || !t.RNRAt.IsZero() || !t.PokeAt.IsZero() || !t.AskAt.IsZero() || t.Replying() {
			keep = append(keep, qp)
		} else {
			qp.Active = false
		}
	}
	clear(e.Active[len(keep):])
	e.Active = keep
}

// now is the transport's time for this step: the clock is read once per
// step, and again after a kick (Flush), rather than for every packet,
// timer and RTT sample (issue 34: 50 ns each, several per WRITE). A time
// up to a step old only arms timers and starts RTT samples that much
// earlier.
func (e *Engine) now() time.Time {
	if !e.nowSet {
		e.stepNow, e.nowSet = e.dev.Clock.Now(), true
	}
	return e.stepNow
}

// NextTimer is how long the engine may sleep.
func (e *Engine) NextTimer() time.Duration {
	due := e.nextDeadline()
	if due.IsZero() && e.paceDue.IsZero() {
		return quietWait
	}
	wait := idleWait
	if !due.IsZero() {
		wait = min(wait, max(due.Sub(e.dev.Clock.Now()), 0))
	}
	if !e.paceDue.IsZero() { // the real clock's (pacing.go)
		wait = min(wait, max(time.Until(e.paceDue), 0))
	}
	return wait
}

// nextDeadline is the earliest armed timer of the active QPs; zero if none.
func (e *Engine) nextDeadline() time.Time {
	var due time.Time
	for _, qp := range e.Active {
		for _, at := range [4]time.Time{qp.Transport.TimerAt, qp.Transport.RNRAt, qp.Transport.PokeAt, qp.Transport.AskAt} {
			if !at.IsZero() && (due.IsZero() || at.Before(due)) {
				due = at
			}
		}
	}
	return due
}

// TakePosts moves what the application posted into the engine's queues.
func (e *Engine) TakePosts(qp *queue.QP) {
	qp.PostMu.Lock()
	if len(qp.PostedSend) == 0 && len(qp.PostedRecv) == 0 {
		qp.PostMu.Unlock()
		return
	}
	qp.Transport.SQ = appendQueue(&qp.Transport.SQBase, qp.Transport.SQ, qp.PostedSend)
	qp.Transport.RQ = appendQueue(&qp.Transport.RQBase, qp.Transport.RQ, qp.PostedRecv)
	clear(qp.PostedSend)
	qp.PostedSend = qp.PostedSend[:0]
	qp.PostedRecv = qp.PostedRecv[:0]
	qp.PostMu.Unlock()
	if qp.Transport.State == ibv.StateErr {
		e.FlushQueues(qp)
	}
	if len(qp.Transport.SQ) > 0 {
		e.Activate(qp)
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
func (e *Engine) frame() []byte {
	e.pending.Flush() // what was received is placed before anything leaves
	if e.nout == txBatch {
		e.Flush()
	}
	if e.txLocal = e.dev.isLocal(e.tx.IP.Dst); e.txLocal {
		if e.loopBufs == nil {
			e.loopBufs = make([][]byte, txBatch)
			e.loop = make([][]byte, 0, txBatch)
		}
		if e.loopBufs[len(e.loop)] == nil {
			e.loopBufs[len(e.loop)] = make([]byte, e.Link.MaxFrame())
		}
		return e.loopBufs[len(e.loop)]
	}
	if e.lender != nil {
		return e.lender.TXBuffer()
	}
	return e.bufs[e.nout]
}

// queue adds the frame of n bytes built in the last frame() buffer.
func (e *Engine) queue(buf []byte, n int) { e.queueFrame(buf, n, true) }

// queueFrame is queue; sealed false leaves the capture to sealDeferred.
func (e *Engine) queueFrame(buf []byte, n int, sealed bool) {
	if n < wire.MinFrameLen {
		clear(buf[n:wire.MinFrameLen]) // the pad; a lent buffer holds old bytes
		n = wire.MinFrameLen
	}
	if c := e.dev.Capture.Load(); c != nil && sealed {
		(*c)(buf[:n], true)
	}
	switch {
	case e.txLocal:
		e.loop = append(e.loop, buf[:n])
	case e.lender != nil:
		e.noteMcast(buf[:n])
		e.lender.CommitTX(n)
	default:
		e.noteMcast(buf[:n])
		e.out = append(e.out, buf[:n])
	}
	e.nout++
	e.Counters.SentPkts++
}

func (e *Engine) Flush() {
	e.nowSet = false // the kick takes microseconds: an RTT sample ending after it reads the clock again
	e.sealDeferred() // before the frames are submitted
	if e.holding && e.nout > e.nacks {
		e.holdCredit = holdCreditMax // a reply joined the ACKs
	}
	e.nacks, e.holding = 0, false
	e.loopMcast() // sealed now, and not yet the link's
	e.nout -= e.loopBack()
	if e.nout == 0 {
		return
	}
	// A failed send is a lost packet: the transport recovers.
	if e.lender != nil {
		_ = e.lender.FlushTX()
	} else {
		_ = e.Link.Send(e.out)
		e.out = e.out[:0]
	}
	e.nout = 0
}

// loopBack hands the batch's frames for the device's own GIDs to this
// engine's inbox, as a frame received from the wire would reach it: the
// next step decodes them (checking the ICRC) and dispatches them to their
// QP, or to its engine's inbox when another engine serves it. It returns
// how many frames there were.
func (e *Engine) loopBack() int {
	n := len(e.loop)
	if n == 0 {
		return 0
	}
	for _, f := range e.loop {
		// A full inbox loses the frame, as a full RX ring would: the
		// transport recovers.
		if e.inbox.Put(f, nil) {
			e.Counters.LoopbackPkts++
		} else {
			e.Counters.SendErr++
		}
	}
	clear(e.loop)
	e.loop = e.loop[:0]
	e.ring()
	return n
}

// header prepares e.tx for a packet of qp with the given BTH fields.
func (e *Engine) header(qp *queue.QP, op wire.Opcode, psn uint32, ackReq bool) *wire.Packet {
	p := &e.tx
	t := &qp.Transport
	p.Eth = wire.Ethernet{Dst: t.DMAC, Src: t.SMAC}
	p.IP = wire.IP{V6: t.V6, Src: t.SIP, Dst: t.DIP, TOS: t.Attr.AH.TrafficClass, TTL: 64, DF: !t.V6}
	p.UDP = wire.UDP{SrcPort: t.SrcPort, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: t.Attr.DestQPN, AckReq: ackReq, PSN: psn & 0xffffff}
	p.Payload = nil
	return p
}

// send encodes e.tx with PayloadLen bytes gathered by fill and queues it.
func (e *Engine) send(payloadLen int, fill func(dst []byte)) {
	buf := e.frame()
	if buf == nil {
		e.Counters.SendErr++
		return
	}
	hdr, err := wire.EncodeHeaders(buf, &e.tx, payloadLen)
	if err != nil {
		panic(fmt.Sprintf("verbs: building a %v packet: %v", e.tx.BTH.Opcode, err)) // a transport bug, not input
	}
	if payloadLen > 0 {
		fill(buf[hdr : hdr+payloadLen])
	}
	if e.reads.N > 0 || len(e.unsealed) > 0 {
		// Its payload, or an earlier frame's, is still to be read from a
		// daemon client's memory: committed now, sealed with the batch.
		n := wire.SealedLen(hdr, payloadLen)
		e.unsealed = append(e.unsealed, unsealedFrame{buf: buf, hdr: hdr, payload: payloadLen, n: n})
		e.queueFrame(buf, n, false)
		return
	}
	n, err := wire.Seal(buf, hdr, payloadLen)
	if err != nil {
		panic(fmt.Sprintf("verbs: sealing a %v packet: %v", e.tx.BTH.Opcode, err))
	}
	e.queue(buf, n)
}

// unsealedFrame is a committed frame waiting for its payload (send).
type unsealedFrame struct {
	buf             []byte
	hdr, payload, n int
}

// sealDeferred reads the batch's payloads from daemon clients' memory, one
// call per client, and seals the frames that waited for them.
func (e *Engine) sealDeferred() {
	if len(e.unsealed) == 0 {
		return
	}
	e.reads.Flush()
	c := e.dev.Capture.Load()
	for i := range e.unsealed {
		u := &e.unsealed[i]
		if n, err := wire.Seal(u.buf, u.hdr, u.payload); err != nil || n != u.n {
			panic(fmt.Sprintf("verbs: sealing a deferred frame: %d bytes, %v", n, err))
		}
		if c != nil {
			(*c)(u.buf[:max(u.n, wire.MinFrameLen)], true)
		}
		u.buf = nil
	}
	e.unsealed = e.unsealed[:0]
}

// receiveFrame is the link's receive callback: the capture, if one is on,
// sees the frame first. Frames handed over from another engine skip it
// (that engine's capture saw them).
func (e *Engine) receiveFrame(frame []byte) {
	if c := e.dev.Capture.Load(); c != nil {
		(*c)(frame, false)
	}
	e.handleFrame(frame)
}

// receiveSplit is receiveFrame for links that deliver frames in pieces.
func (e *Engine) receiveSplit(head, tail []byte) {
	if c := e.dev.Capture.Load(); c != nil {
		e.capBuf = append(append(e.capBuf[:0], head...), tail...)
		(*c)(e.capBuf, false)
	}
	e.handleSplit(head, tail)
}

// handleFrame is called for every received frame.
func (e *Engine) handleFrame(frame []byte) {
	e.rxHead, e.rxTail = frame, nil
	if err := wire.Decode(frame, &e.rx); err != nil {
		e.Counters.DroppedMalformed++
		return
	}
	e.dispatch()
}

// handleSplit is called for a frame that arrived in two pieces (tail empty
// when it did not): it is decoded in place, and its payload is copied once,
// from the pieces into registered memory. A frame whose headers cross the
// pieces (never one a peer's NIC sends: the first piece holds thousands of
// bytes) is gathered first.
func (e *Engine) handleSplit(head, tail []byte) {
	if len(tail) == 0 {
		e.handleFrame(head)
		return
	}
	e.rxHead, e.rxTail = head, tail
	err := wire.DecodeSplit(head, tail, &e.rx)
	if errors.Is(err, wire.ErrSplitHeaders) && len(head)+len(tail) <= cap(e.gather) {
		e.gather = append(append(e.gather[:0], head...), tail...)
		e.handleFrame(e.gather)
		return
	}
	if err != nil {
		e.Counters.DroppedMalformed++
		return
	}
	e.dispatch()
}

// dispatch hands the packet just decoded into e.rx to its QP.
func (e *Engine) dispatch() {
	p := &e.rx
	qpn := p.BTH.DestQP
	if qpn == wire.MulticastQPN {
		if p.BTH.PKey&0x7fff != 0x7fff {
			e.Counters.DroppedBadPKey++
			return
		}
		e.dispatchMcast(p)
		return
	}
	if int(qpn) >= len(e.Qps) || e.Qps[qpn] == nil {
		e.Counters.DroppedNoQP++
		return
	}
	// rxe's check_keys: the BTH P_Key must match the port's only P_Key,
	// the default 0xffff, in its low 15 bits (either membership).
	if p.BTH.PKey&0x7fff != 0x7fff {
		e.Counters.DroppedBadPKey++
		return
	}
	qp := e.Qps[qpn]
	info, _ := p.BTH.Opcode.Info()
	t := &qp.Transport
	if qp.QPType == ibv.QPTypeUD {
		e.dispatchUD(qp, p)
		return
	}
	wantTransport := wire.TransportRC
	if qp.QPType == ibv.QPTypeUC {
		wantTransport = wire.TransportUC
	}
	// rxe's check_type_state and check_addr: the right transport, from the
	// connected peer to our address; anything else is dropped silently.
	if p.BTH.Opcode.Transport() != wantTransport || p.IP.Src != t.DIP || p.IP.Dst != t.SIP {
		e.Counters.DroppedNoQP++
		return
	}
	// The QP's type and addresses change only in control operations, so
	// any engine may check them; its transport state is its engine's. A
	// frame that came in on another queue than the QP's (a NIC's RSS hash
	// picks the queue, not the QP's flow) goes to that engine, and only
	// once it passed the checks above: a forged frame costs no copy and no
	// room in the other engine's inbox.
	if owner := e.dev.EngineOf(qp); owner != e {
		e.handOff(owner)
		return
	}
	e.Counters.RcvdPkts++
	if info.Flags&wire.FlagRequest != 0 {
		if t.State == ibv.StateRTR || t.State == ibv.StateRTS || t.State == ibv.StateSQD {
			e.FastTakeOver(qp) // the program passed it on: the responder is Go's again
			e.responder(qp, p, info)
		}
		return
	}
	if t.State == ibv.StateRTS || t.State == ibv.StateSQD {
		e.completer(qp, p, info)
	}
}
