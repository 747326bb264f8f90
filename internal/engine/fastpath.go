package engine

import (
	"fmt"

	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// The XDP responder fast path (docs/fastpath.md): while a QP's responder is
// idle — no message in progress, no reply queued, no NAK outstanding, no
// packet held — the XDP program owns it and executes small in-order WRITEs
// into device memory itself. Any frame it does not execute reaches this
// engine as before, which then takes the responder back (its EPSN and MSN
// from the shared state) before running it, and hands the QP back at the
// end of the receive batch if it is idle again.
//
// The requester side: for a QP in RTS the program also takes plain ACKs
// (not NAKs) addressed to it, publishes the last one's PSN and MSN in the
// QP's record, and drops the frame; each step the engine runs the ACKs so
// published through its completer, for the QPs it has work for. While any
// engine sleeps the program passes the ACK on as well, to wake it.

// fastEligible: an RC QP over IPv4 that accepts requests, on a device with
// the fast path.
func (e *Engine) fastEligible(qp *queue.QP) bool {
	t := &qp.Transport
	return e.dev.Cfg.FastPath != nil && !e.fastOff && qp.QPType == ibv.QPTypeRC && !t.V6 && t.SIP.Is4() &&
		(t.State == ibv.StateRTR || t.State == ibv.StateRTS || t.State == ibv.StateSQD)
}

// FastTakeOver makes the responder of qp Go's again, with the program's
// EPSN and MSN. A failure to (it cannot happen unless the shared map is
// gone) leaves the QP in error: the two sides' PSNs would diverge.
func (e *Engine) FastTakeOver(qp *queue.QP) {
	t := &qp.Transport
	if !t.FastXDP {
		return
	}
	t.FastXDP = false
	epsn, msn, was, err := e.dev.Cfg.FastPath.TakeOver(qp.Number)
	if err != nil {
		e.Counters.FastPathErr++
		e.fatal(qp)
		return
	}
	if was {
		t.FastExecEnd = epsn
		e.fastExecuted += uint64((epsn - t.FastHandPSN) & 0xffffff)
		t.EPSN, t.MSN = epsn, msn
		e.Counters.FastTakeOvers++
	}
	e.fastTaken = append(e.fastTaken, qp)
}

// FastHandBack gives the program qp's responder if the QP can have it and
// its responder is idle; configure writes its addresses and ACK first (a
// modify may have changed them).
func (e *Engine) FastHandBack(qp *queue.QP, configure bool) {
	t := &qp.Transport
	if t.FastXDP || !e.fastEligible(qp) || !t.FastIdle() {
		if configure {
			t.FastConfigured = false // the modify's changes go at the next hand-back
		}
		return
	}
	f := e.dev.Cfg.FastPath
	if configure || !t.FastConfigured {
		q, err := e.fastQP(qp)
		if err == nil {
			err = f.Configure(qp.Number, q)
		}
		if err != nil {
			e.Counters.FastPathErr++
			return
		}
		t.FastConfigured = true
		if t.FastReq = q.Requester; t.FastReq {
			// What the program published before is not this QP's.
			n, _, _, err := f.Acked(qp.Number)
			if err == nil {
				err = f.SendWindow(qp.Number, t.CompPSN, t.SentEnd, true)
			}
			t.FastReq, t.FastAckCount = err == nil, n
		}
	}
	if err := f.HandBack(qp.Number, t.EPSN, t.MSN); err != nil {
		e.Counters.FastPathErr++
		return
	}
	t.FastXDP, t.FastHandPSN, t.FastExecEnd = true, t.EPSN, t.EPSN
}

// fastLostMin and fastLostShare: the engine gives up on the responder fast
// path once at least fastLostMin of the WRITEs the program executed, and
// a quarter of them, were sent again by their requester.
const fastLostMin = 4

// FastDuplicate notes a duplicate request: one the program executed means
// its ACK never reached the requester. On a veth whose peer runs no XDP
// program (a bridge port) every ACK sent with XDP_TX is lost so; then the
// engine stops handing responders to the program (counter
// fast_responder_off), and the requester side, which sends nothing, goes on.
//
// A duplicate of a PSN after the last ACK the program sent is no such sign:
// nothing asked for its ACK, and a lazy requester asks with that duplicate
// (queue/ackpolicy.go).
func (e *Engine) fastDuplicate(qp *queue.QP, psn uint32) {
	t := &qp.Transport
	if e.fastOff || t.FastExecEnd == t.FastHandPSN ||
		queue.PSNCmp(psn, t.FastHandPSN) < 0 || queue.PSNCmp(psn, t.FastExecEnd) >= 0 {
		return
	}
	if acked, ok, err := e.dev.Cfg.FastPath.SentAck(qp.Number); err != nil || !ok || queue.PSNCmp(psn, acked) > 0 {
		return
	}
	e.fastLost++
	e.Counters.FastAckLost++
	if e.fastLost >= fastLostMin && 4*e.fastLost >= e.fastExecuted {
		e.fastOff = true
		e.Counters.FastResponderOff = 1
	}
}

// fastHandBacks ends a receive batch: the QPs taken over during it go back
// to the program if they are idle.
func (e *Engine) fastHandBacks() {
	for _, qp := range e.fastTaken {
		if int(qp.Number) < len(e.Qps) && e.Qps[qp.Number] == qp {
			e.FastHandBack(qp, false)
		}
	}
	clear(e.fastTaken)
	e.fastTaken = e.fastTaken[:0]
}

// fastQP describes qp's responder: its ACK is what sendAckNow builds.
func (e *Engine) fastQP(qp *queue.QP) (port.FastQP, error) {
	t := &qp.Transport
	p := e.header(qp, wire.RCAck, 0, false)
	p.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(ackCreditsInval)}
	ack := make([]byte, p.FrameLen())
	if _, err := wire.Encode(ack, p); err != nil {
		return port.FastQP{}, fmt.Errorf("verbs: fast path ACK of QP %#x: %w", qp.Number, err)
	}
	return port.FastQP{Src: t.SIP.As4(), Dst: t.DIP.As4(), PD: qp.PD.ID(), MTU: uint32(t.MTU),
		RemoteWrite: t.Attr.AccessFlags&ibv.AccessRemoteWrite != 0,
		Requester:   t.State == ibv.StateRTS || t.State == ibv.StateSQD, Ack: ack}, nil
}

// fastAcks runs the ACKs the program took for the requesters of the QPs
// this engine has work for, as if they had arrived; true if any did.
func (e *Engine) fastAcks() bool {
	f := e.dev.Cfg.FastPath
	if f == nil {
		return false
	}
	ran := false
	for _, qp := range e.Active {
		t := &qp.Transport
		if !t.FastReq || (t.State != ibv.StateRTS && t.State != ibv.StateSQD) {
			continue
		}
		n, psn, msn, err := f.Acked(qp.Number)
		if err != nil || n == t.FastAckCount {
			continue
		}
		t.FastAckCount = n
		p := &e.fastAck
		*p = wire.Packet{BTH: wire.BTH{Opcode: wire.RCAck, PKey: 0xffff, DestQP: qp.Number, PSN: psn},
			AETH: wire.AETH{Syndrome: wire.ACKSyndrome(ackCreditsInval), MSN: msn}}
		info, _ := wire.RCAck.Info()
		e.Counters.FastAcks++
		e.completer(qp, p, info)
		ran = true
	}
	return ran
}

// fastSleep says the engine goes to sleep; false (and awake again) if an
// ACK the program took meanwhile is waiting (it passes ACKs on only once
// it has seen the engine asleep).
func (e *Engine) fastSleep() bool {
	f := e.dev.Cfg.FastPath
	if f == nil {
		return true
	}
	f.Sleeping(true)
	e.Mu.Lock()
	defer e.Mu.Unlock()
	for _, qp := range e.Active {
		if t := &qp.Transport; t.FastReq {
			if n, _, _, err := f.Acked(qp.Number); err == nil && n != t.FastAckCount {
				f.Sleeping(false)
				return false
			}
		}
	}
	return true
}

// fastWake says the engine is awake again (after fastSleep said it sleeps).
func (e *Engine) fastWake() {
	if f := e.dev.Cfg.FastPath; f != nil {
		f.Sleeping(false)
	}
}

// fastSending publishes qp's requester window before a packet ending at end
// (one past its last PSN) goes out, so that the program takes its ACK.
func (e *Engine) fastSending(qp *queue.QP, end uint32) {
	if t := &qp.Transport; t.FastReq && e.dev.Cfg.FastPath.SendWindow(qp.Number, t.CompPSN, t.WindowEnd(end), false) != nil {
		e.Counters.FastPathErr++ // the program passes the ACKs on, to the completer
	}
}
