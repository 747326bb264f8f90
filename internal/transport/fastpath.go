package transport

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// The XDP responder fast path (docs/fastpath.md): while a QP's responder is
// idle — no message in progress, no reply queued, no NAK outstanding, no
// packet held — the XDP program owns it and executes small in-order WRITEs
// into device memory itself. Any frame it does not execute reaches this
// engine as before, which then takes the responder back (its ePSN and MSN
// from the shared state) before running it, and hands the QP back at the
// end of the receive batch if it is idle again.
//
// The requester side: for a QP in RTS the program also takes plain ACKs
// (not NAKs) addressed to it, publishes the last one's PSN and MSN in the
// QP's record, and drops the frame; each step the engine runs the ACKs so
// published through its completer, for the QPs it has work for. While any
// engine sleeps the program passes the ACK on as well, to wake it.

// FastPath is the responder state shared with the XDP program
// (loader.FastPath, adapted by internal/inproc). Its methods are called on
// the engine goroutine or in control operations.
type FastPath interface {
	// Configure writes what the program checks of qpn's requests and the
	// ACK it sends; only while Go owns the QP.
	Configure(qpn uint32, q FastQP) error
	// HandBack gives the program qpn's responder, expecting ePSN, with
	// MSN msn.
	HandBack(qpn, ePSN, msn uint32) error
	// TakeOver makes Go the owner and returns the program's ePSN and MSN;
	// wasXDP is false when Go owned the QP already.
	TakeOver(qpn uint32) (ePSN, msn uint32, wasXDP bool, err error)
	// Acked is the last ACK the program took for qpn's requester: a count
	// that moves on with each, its PSN and MSN.
	Acked(qpn uint32) (count uint16, psn, msn uint32, err error)
	// Sleeping counts an engine going to sleep (asleep) or waking.
	Sleeping(asleep bool)
}

// FastQP is a QP's responder as the program needs it.
type FastQP struct {
	Src, Dst    [4]byte // the QP's IPv4 address and its peer's
	PD          uint32
	MTU         uint32
	RemoteWrite bool
	Requester   bool   // the program takes the requester's ACKs
	Ack         []byte // the ACK this responder sends, PSN 0, MSN 0
}

// fastEligible: an RC QP over IPv4 that accepts requests, on a device with
// the fast path.
func (e *engine) fastEligible(qp *QP) bool {
	t := &qp.t
	return e.dev.cfg.FastPath != nil && !e.fastOff && qp.typ == ibv.QPTypeRC && !t.v6 && t.sip.Is4() &&
		(t.state == ibv.StateRTR || t.state == ibv.StateRTS || t.state == ibv.StateSQD)
}

// fastIdle: nothing of the responder's depends on state the program does
// not keep.
func (t *qpTransport) fastIdle() bool {
	return t.respOp == respNone && !t.recv.active && !t.nakSent && t.held.n == 0 &&
		!t.replying() && !t.ackDue && !t.failAfterReplies
}

// fastTakeOver makes the responder of qp Go's again, with the program's
// ePSN and MSN. A failure to (it cannot happen unless the shared map is
// gone) leaves the QP in error: the two sides' PSNs would diverge.
func (e *engine) fastTakeOver(qp *QP) {
	t := &qp.t
	if !t.fastXDP {
		return
	}
	t.fastXDP = false
	epsn, msn, was, err := e.dev.cfg.FastPath.TakeOver(qp.qpn)
	if err != nil {
		e.counters.FastPathErr++
		e.fatal(qp)
		return
	}
	if was {
		t.fastExecEnd = epsn
		e.fastExecuted += uint64((epsn - t.fastHandPSN) & 0xffffff)
		t.ePSN, t.msn = epsn, msn
		e.counters.FastTakeOvers++
	}
	e.fastTaken = append(e.fastTaken, qp)
}

// fastHandBack gives the program qp's responder if the QP can have it and
// its responder is idle; configure writes its addresses and ACK first (a
// modify may have changed them).
func (e *engine) fastHandBack(qp *QP, configure bool) {
	t := &qp.t
	if t.fastXDP || !e.fastEligible(qp) || !t.fastIdle() {
		if configure {
			t.fastConfigured = false // the modify's changes go at the next hand-back
		}
		return
	}
	f := e.dev.cfg.FastPath
	if configure || !t.fastConfigured {
		q, err := e.fastQP(qp)
		if err == nil {
			err = f.Configure(qp.qpn, q)
		}
		if err != nil {
			e.counters.FastPathErr++
			return
		}
		t.fastConfigured = true
		if t.fastReq = q.Requester; t.fastReq {
			// What the program published before is not this QP's.
			n, _, _, err := f.Acked(qp.qpn)
			t.fastReq, t.fastAckCount = err == nil, n
		}
	}
	if err := f.HandBack(qp.qpn, t.ePSN, t.msn); err != nil {
		e.counters.FastPathErr++
		return
	}
	t.fastXDP, t.fastHandPSN, t.fastExecEnd = true, t.ePSN, t.ePSN
}

// fastLostMin and fastLostShare: the engine gives up on the responder fast
// path once at least fastLostMin of the WRITEs the program executed, and
// a quarter of them, were sent again by their requester.
const fastLostMin = 4

// fastDuplicate notes a duplicate request: one the program executed means
// its ACK never reached the requester. On a veth whose peer runs no XDP
// program (a bridge port) every ACK sent with XDP_TX is lost so; then the
// engine stops handing responders to the program (counter
// fast_responder_off), and the requester side, which sends nothing, goes on.
func (e *engine) fastDuplicate(qp *QP, psn uint32) {
	t := &qp.t
	if e.fastOff || t.fastExecEnd == t.fastHandPSN ||
		psnCmp(psn, t.fastHandPSN) < 0 || psnCmp(psn, t.fastExecEnd) >= 0 {
		return
	}
	e.fastLost++
	e.counters.FastAckLost++
	if e.fastLost >= fastLostMin && 4*e.fastLost >= e.fastExecuted {
		e.fastOff = true
		e.counters.FastResponderOff = 1
	}
}

// fastHandBacks ends a receive batch: the QPs taken over during it go back
// to the program if they are idle.
func (e *engine) fastHandBacks() {
	for _, qp := range e.fastTaken {
		if int(qp.qpn) < len(e.qps) && e.qps[qp.qpn] == qp {
			e.fastHandBack(qp, false)
		}
	}
	clear(e.fastTaken)
	e.fastTaken = e.fastTaken[:0]
}

// fastQP describes qp's responder: its ACK is what sendAckNow builds.
func (e *engine) fastQP(qp *QP) (FastQP, error) {
	t := &qp.t
	p := e.header(qp, wire.RCAck, 0, false)
	p.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(ackCreditsInval)}
	ack := make([]byte, p.FrameLen())
	if _, err := wire.Encode(ack, p); err != nil {
		return FastQP{}, fmt.Errorf("verbs: fast path ACK of QP %#x: %w", qp.qpn, err)
	}
	return FastQP{Src: t.sip.As4(), Dst: t.dip.As4(), PD: qp.pd.ID(), MTU: uint32(t.mtu),
		RemoteWrite: t.attr.AccessFlags&ibv.AccessRemoteWrite != 0,
		Requester:   t.state == ibv.StateRTS || t.state == ibv.StateSQD, Ack: ack}, nil
}

// fastAcks runs the ACKs the program took for the requesters of the QPs
// this engine has work for, as if they had arrived; true if any did.
func (e *engine) fastAcks() bool {
	f := e.dev.cfg.FastPath
	if f == nil {
		return false
	}
	ran := false
	for _, qp := range e.active {
		t := &qp.t
		if !t.fastReq || (t.state != ibv.StateRTS && t.state != ibv.StateSQD) {
			continue
		}
		n, psn, msn, err := f.Acked(qp.qpn)
		if err != nil || n == t.fastAckCount {
			continue
		}
		t.fastAckCount = n
		p := &e.fastAck
		*p = wire.Packet{BTH: wire.BTH{Opcode: wire.RCAck, PKey: 0xffff, DestQP: qp.qpn, PSN: psn},
			AETH: wire.AETH{Syndrome: wire.ACKSyndrome(ackCreditsInval), MSN: msn}}
		info, _ := wire.RCAck.Info()
		e.counters.FastAcks++
		e.completer(qp, p, info)
		ran = true
	}
	return ran
}

// fastSleep says the engine goes to sleep; false (and awake again) if an
// ACK the program took meanwhile is waiting (it passes ACKs on only once
// it has seen the engine asleep).
func (e *engine) fastSleep() bool {
	f := e.dev.cfg.FastPath
	if f == nil {
		return true
	}
	f.Sleeping(true)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, qp := range e.active {
		if t := &qp.t; t.fastReq {
			if n, _, _, err := f.Acked(qp.qpn); err == nil && n != t.fastAckCount {
				f.Sleeping(false)
				return false
			}
		}
	}
	return true
}

// fastWake says the engine is awake again (after fastSleep said it sleeps).
func (e *engine) fastWake() {
	if f := e.dev.cfg.FastPath; f != nil {
		f.Sleeping(false)
	}
}
