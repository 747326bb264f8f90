package verbs

import (
	"time"
)

// status snapshots qp (engine goroutine).
func (e *engine) status(qp *QP, now time.Time) QPStatus {
	t := &qp.t
	s := QPStatus{
		QPN: qp.qpn, DestQPN: t.attr.DestQPN, Type: qp.typ, State: t.state, Peer: t.attr.AH.DGID.Unmap(), Queue: e.index,
		SendQueued: len(t.sq), ReqPSN: t.reqPSN, NextPSN: t.nextPSN, CompPSN: t.compPSN, Window: t.window(),
		Timeouts: t.timeouts, Retrying: t.startedRetry, Probing: t.probing,
		EPSN: t.ePSN, MSN: t.msn, RecvQueued: len(t.rq), NAKSent: t.nakSent,
	}
	if len(t.sq) > 0 && t.sq[0].started {
		w := &t.sq[0]
		s.HeadStarted, s.HeadOp, s.HeadFirst, s.HeadLast, s.HeadLength = true, w.wr.Opcode, w.firstPSN, w.lastPSN, w.length
		s.HeadSent = w.sentOff
		if w.wr.Opcode == WRRDMARead {
			s.HeadSent = w.readDone
		}
	}
	if !t.timerAt.IsZero() {
		s.TimerIn = max(t.timerAt.Sub(now), time.Nanosecond)
	}
	if !t.rnrAt.IsZero() {
		s.RNRWaitIn = max(t.rnrAt.Sub(now), time.Nanosecond)
	}
	switch t.respOp {
	case respSend:
		s.InMessage = "SEND"
	case respWrite:
		s.InMessage = "WRITE"
	}
	return s
}

// QPStatus returns a snapshot of every QP of the device, in creation order.
func (d *Device) QPStatus() ([]QPStatus, error) {
	var out []QPStatus
	err := d.do(func() error {
		now := d.clock.Now()
		for _, qp := range d.objs.live {
			out = append(out, qp.eng.Load().status(qp, now))
		}
		return nil
	})
	return out, err
}

// StalledQPs returns the QPs whose transport timer has expired at least
// minTimeouts times since their responder last showed progress: with
// retransmissions that never get through, these are what a hung
// application waits for.
func (d *Device) StalledQPs(minTimeouts uint32) ([]QPStatus, error) {
	all, err := d.QPStatus()
	keep := all[:0]
	for _, s := range all {
		if s.SendQueued > 0 && s.Timeouts >= minTimeouts {
			keep = append(keep, s)
		}
	}
	return keep, err
}
