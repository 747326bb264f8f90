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
}

// FastQP is a QP's responder as the program needs it.
type FastQP struct {
	Src, Dst    [4]byte // the QP's IPv4 address and its peer's
	PD          uint32
	MTU         uint32
	RemoteWrite bool
	Ack         []byte // the ACK this responder sends, PSN 0, MSN 0
}

// fastEligible: an RC QP over IPv4 that accepts requests, on a device with
// the fast path.
func (e *engine) fastEligible(qp *QP) bool {
	t := &qp.t
	return e.dev.cfg.FastPath != nil && qp.typ == ibv.QPTypeRC && !t.v6 && t.sip.Is4() &&
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
	}
	if err := f.HandBack(qp.qpn, t.ePSN, t.msn); err != nil {
		e.counters.FastPathErr++
		return
	}
	t.fastXDP = true
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
		RemoteWrite: t.attr.AccessFlags&ibv.AccessRemoteWrite != 0, Ack: ack}, nil
}
