package queue

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/ibv"
)

// TestTailLossProbePeriod: with retry_cnt 7 and a round-trip estimate, a
// tail (at most TLPPkts outstanding) and a probe resent after a NAK are
// timed out after two round trips, not after minRTO; a longer flight keeps
// the adaptive RTO, and so does a tail once the timer has expired (the
// doubling resumes from the RTO).
func TestTailLossProbePeriod(t *testing.T) {
	tr := Transport{Attr: ibv.QPAttr{RetryCnt: 7, Timeout: 14}, SRTT: 400 * time.Microsecond, RTTVar: 20 * time.Microsecond}
	tr.CompPSN, tr.SentEnd = 100, 101
	if got := tr.RTO(); got != 800*time.Microsecond {
		t.Fatalf("one packet outstanding: period %v, want 2 × srtt = 800µs", got)
	}
	tr.SRTT = 20 * time.Microsecond
	if got := tr.RTO(); got != tlpMin {
		t.Fatalf("one packet outstanding, srtt 20µs: period %v, want tlpMin %v", got, tlpMin)
	}
	tr.SRTT, tr.RTTVar = 60*time.Microsecond, 50*time.Microsecond
	if got := tr.RTO(); got != 260*time.Microsecond {
		t.Fatalf("one packet outstanding, srtt 60µs, rttvar 50µs: period %v, want srtt + 4·rttvar = 260µs", got)
	}
	tr.RTTVar = 20 * time.Microsecond
	tr.SRTT, tr.SentEnd = 400*time.Microsecond, 100+TLPPkts+1
	if got := tr.RTO(); got != minRTO {
		t.Fatalf("%d packets outstanding: period %v, want minRTO %v", TLPPkts+1, got, minRTO)
	}
	tr.Probing = true
	if got := tr.RTO(); got != 800*time.Microsecond {
		t.Fatalf("a probe alone in flight after a NAK: period %v, want 2 × srtt", got)
	}
	tr.Probing = false
	tr.SentEnd, tr.Timeouts = 101, 1
	if got := tr.RTO(); got != 2*minRTO {
		t.Fatalf("a tail after one expiry: period %v, want 2 × minRTO", got)
	}
	tr.Timeouts, tr.SQ = 0, make([]SendWQE, 1)
	if got := tr.RTO(); got != minRTO {
		t.Fatalf("one packet outstanding and more to send (a burst's first): period %v, want minRTO", got)
	}
	tr.SQ, tr.Attr.RetryCnt = nil, 6
	if got := tr.RTO(); got != ACKTimeout(14) {
		t.Fatalf("retry_cnt 6: period %v, want the local ACK timeout %v", got, ACKTimeout(14))
	}
}
