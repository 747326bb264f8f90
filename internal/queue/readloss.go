package queue

import (
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
)

// The READ requester's loss detection past what responses show
// (docs/recovery.md): which READs go-back-N leaves alone, the READ round
// trip, and the tail probe's deadline. The engine's recovery.go uses them.

// AskingHole reports whether go-back-N, outside a timer episode, leaves
// READ w alone: its lowest hole's request is out and its answer may be on
// its way (at most one request per hole per round trip). A NAK or an ACK
// past w says nothing of that answer, which the responder sends after
// whatever it queued before the request came; asking again duplicated it
// (a NAK for a READ behind a hole sent every READ again, each answered in
// full). A lost request or answer is the timer's.
func (t *Transport) AskingHole(w *SendWQE) bool {
	return t.Timeouts == 0 && w.WR.Opcode == ibv.WRRDMARead && w.Retried && !w.RespDone && w.ReadFrom == w.NextRespPSN(t.MTU)
}

// ReadRTTSample takes, when a response of READ w's latest request's
// answer arrives at now and is the first of it, the time from that
// request into ReadRTT: the lowest recent one, which is the path's round
// trip and the responder's turnaround without a queue in front of the
// answer (most answers wait behind others'). A higher sample moves it up
// by a sixteenth of the difference, so a path that slowed is followed.
func (t *Transport) ReadRTTSample(w *SendWQE, now time.Time) {
	if w.AskSeen != w.ReadFrom || w.AskAt.IsZero() {
		return
	}
	switch d := now.Sub(w.AskAt); {
	case d <= 0:
	case t.ReadRTT == 0 || d < t.ReadRTT:
		t.ReadRTT = d
	default:
		t.ReadRTT += (d - t.ReadRTT) / 16
	}
}

// readTailMin is the least a READ tail probe waits past the answer's due
// time: above an engine's wakeup latency (the tail-loss probe's floor).
const readTailMin = tlpMin

// ReadTailDue is the READ tail probe's deadline at now (a response just
// placed), zero if there is none. Once every READ outstanding waits only
// for the answer to its hole's request (AskingHole), or for the rest of
// an answer already begun, nothing else is on its way: the responder
// queues an answer behind what it was sending when the request came, so
// it is due one READ round trip after the request left, or at once if
// responses were still arriving then; past that by half a round trip (at
// least readTailMin) it was lost, or the request was. The rest of an
// answer begun comes back to back: it is due within a round trip. Without
// this such a stall waited the RTO (at least minRTO, srtt counting each
// READ's wait behind the others'), at 5% loss a third of a 64 KiB READ
// stream's time. The expiry is the timer's (retry: the oldest READ's hole
// asked again, the timer backed off until a response comes). Only with
// retry_cnt 7: a finite one counts each expiry against the application's
// retries. A READ whose original request is unanswered is never a tail:
// a slow responder (rxe in a guest starts a 1 MiB READ's answer after a
// second) would be asked again.
func (t *Transport) ReadTailDue(now time.Time) time.Time {
	var at time.Time
	if t.Attr.RetryCnt != 7 || t.ReadRTT == 0 || t.TimerAt.IsZero() || t.Timeouts > 0 {
		return at
	}
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started {
			break
		}
		if w.RespDone {
			continue
		}
		var due time.Time
		switch {
		case w.WR.Opcode != ibv.WRRDMARead || !w.SentAll:
			return time.Time{}
		case w.AskSeen != w.ReadFrom:
			due = now.Add(max(t.ReadRTT, readTailMin))
		case t.AskingHole(w):
			due = w.AskAt.Add(t.ReadRTT)
			if due.Before(now) {
				due = now
			}
			due = due.Add(max(t.ReadRTT/2, readTailMin))
		default:
			return time.Time{} // an answer not begun yet: perhaps a slow responder's
		}
		if due.After(at) {
			at = due
		}
	}
	return at
}

// ArmReadTail shortens the transport timer to the READ tail probe's
// deadline at now, if there is one, and notes it in ReadTailAt (the
// expiry then counts as a tail probe).
func (t *Transport) ArmReadTail(now time.Time) {
	t.ReadTailAt = time.Time{}
	if at := t.ReadTailDue(now); !at.IsZero() && at.Before(t.TimerAt) {
		t.TimerAt, t.ReadTailAt = at, at
	}
}

// ShortReadsFrom reports whether every WQE started from PSN psn on is a
// READ answered by one packet.
func (t *Transport) ShortReadsFrom(psn uint32) bool {
	for i := range t.SQ {
		w := &t.SQ[i]
		if !w.Started {
			break
		}
		if PSNCmp(w.LastPSN, psn) < 0 {
			continue
		}
		if w.WR.Opcode != ibv.WRRDMARead || w.FirstPSN != w.LastPSN {
			return false
		}
	}
	return true
}
