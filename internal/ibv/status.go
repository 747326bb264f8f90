package ibv

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// QPStatus is a snapshot of one QP's transport state: what a stalled
// connection is waiting for, on both of its sides.
type QPStatus struct {
	QPN, DestQPN uint32
	Type         QPType
	State        QPState
	Peer         netip.Addr // the destination GID's address; invalid before RTR
	Queue        int        // the queue whose engine serves the QP

	// Requester and completer.
	SendQueued int // send WQEs posted and not yet completed
	// Head is the oldest send WQE, when it has started: its opcode, its
	// PSNs, and how far it got.
	HeadStarted          bool
	HeadOp               WROpcode
	HeadFirst, HeadLast  uint32
	HeadSent, HeadLength uint32 // SEND/WRITE bytes packetised; READ bytes received
	ReqPSN               uint32 // next PSN to transmit
	NextPSN              uint32 // first PSN of the next new WQE
	CompPSN              uint32 // oldest PSN not yet acknowledged
	Window               uint32 // PSNs that may be outstanding: the loss window (cwnd.go)
	Timeouts             uint32 // transport timer expiries since the responder last showed progress
	Retrying, Probing    bool
	TimerIn, RNRWaitIn   time.Duration // until the transport timer and the RNR wait end; 0 when off

	// Responder.
	EPSN, MSN  uint32
	InMessage  string // "SEND" or "WRITE" while a multi-packet message is arriving
	RecvQueued int    // receive WQEs waiting (not counting an SRQ's)
	NAKSent    bool   // a sequence NAK is out; no other until an in-order packet
}

// String is the one-line dump a stall report prints.
func (s QPStatus) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "QP %#x→%#x %v queue %d: requester req_psn %#x next_psn %#x comp_psn %#x sq %d",
		s.QPN, s.DestQPN, s.State, s.Queue, s.ReqPSN, s.NextPSN, s.CompPSN, s.SendQueued)
	if s.HeadStarted {
		fmt.Fprintf(&b, " head %v psn %#x-%#x at %d/%d", s.HeadOp, s.HeadFirst, s.HeadLast, s.HeadSent, s.HeadLength)
	}
	fmt.Fprintf(&b, " window %d timeouts %d", s.Window, s.Timeouts)
	if s.Retrying {
		b.WriteString(" retrying")
	}
	if s.Probing {
		b.WriteString(" probing")
	}
	if s.TimerIn > 0 {
		fmt.Fprintf(&b, " timer %v", s.TimerIn)
	}
	if s.RNRWaitIn > 0 {
		fmt.Fprintf(&b, " rnr_wait %v", s.RNRWaitIn)
	}
	fmt.Fprintf(&b, "; responder epsn %#x msn %#x rq %d", s.EPSN, s.MSN, s.RecvQueued)
	if s.InMessage != "" {
		fmt.Fprintf(&b, " in %s", s.InMessage)
	}
	if s.NAKSent {
		b.WriteString(" nak_sent")
	}
	return b.String()
}
