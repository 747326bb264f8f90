package queue

import "time"

// READ responses are the one stream a responder sends with nothing coming
// back to slow it: a requester's loss window (cwnd.go) holds its requests
// back when ACKs stop, but the answer to one READ is a burst of up to the
// whole message. A path that holds less than that burst (a guest slower
// than the host, behind a tap's queue of 1000 packets) loses the burst's
// tail, and rxe's requester asks for it again only when its transport timer
// expires: 2.1 s at rdma_cm's timeout, READ after READ (docs/interop.md,
// "READ responses paced after a tail loss").
//
// So each QP's responder learns the rate its READ responses are taken in
// at, and once its requester has asked again for part of a response that
// had left whole, from past its first packet (its head arrived, its tail
// did not: the path overflowed), it paces that QP's READ responses a
// little above that rate. A requester that lost a packet in the middle of
// a burst still being sent asks while it is being sent; a duplicated
// request, or a timer that found nothing at all, asks from the start:
// neither turns pacing on.
//
// The rate comes from the requester itself: a new READ that finds the
// previous response sent and nothing queued means the requester took that
// response in at most the time since its first packet left (rxe's
// requester keeps one large READ in flight at a time). A re-read starts a
// new sample, so none spans the wait for a timer. The estimate keeps the
// highest recent sample, decaying, so a requester that pauses between
// READs does not drag it down at once; once there is one, only responses
// longer than the path's buffers make samples. Pacing 1/8 above it lets
// the pace follow a faster path within a few READs and overflows a queue
// only with a response nine times longer than the queue; a tail lost while
// paced takes the estimate down by a quarter. The pace never falls below
// paceFloor, and a burst of an eighth of what the path took whole may
// always leave at once, so short READs and the ACKs queued behind them are
// not held long. The pacer uses the real clock, as the ACK hold does: a
// test's fake transport clock may stand still.
//
// Only a request that resumes the READ exactly, at the address and with
// the length of its rest, counts as asked again: a forged duplicate with
// a held READ's rkey and a PSN inside it is answered but never paces.
//
// In-memory tests: TestReadResponsesPacedAfterTailLoss, TestReadLossEpisode,
// TestDuplicatedReadRequestsDoNotPace, TestForgedDuplicateReadDoesNotPace;
// against rxe in a guest, docs/results/2026-11-26-read-pacing.md.
type ReadPacer struct {
	// startAt is when the newest READ response began, if it began with
	// nothing queued before it (a sample); pkts is its length.
	startAt time.Time
	pkts    uint32
	// first and last are the PSNs the newest response was sent from and
	// to (a re-read's response starts past its READ's first PSN).
	first, last uint32
	// rate is the estimate, in packets a second; zero before any sample.
	rate float64
	// paced is set once a response that had left whole was asked for
	// again from past its first packet.
	paced bool
	// safe is how many packets of the response that lost its tail the
	// path took whole, in one burst: an eighth of that may always leave
	// at once.
	safe uint32
	// nextAt is the next packet's theoretical departure (GCRA).
	nextAt time.Time
	// Ep is the newest READ's loss episode: the runs of it asked for
	// again, counted together.
	Ep LossEpisode
}

// LossEpisode counts what a requester asked for again of one READ's
// response. A requester that asks for holes only (recovery.go) asks for a
// burst's scattered losses run by run, lowest first, each perhaps shorter
// than paceLossMin: a path that overflowed in front of a slow receiver
// loses many runs of one response, random loss a few packets of it. So
// the runs of one READ count together: once they reach paceLossMin packets
// and an eighth of the READ (1% or 5% random loss stays below that), the
// path overflowed.
type LossEpisode struct {
	First, Pkts uint32 // the READ's first PSN and length in packets
	lost        uint32 // packets asked for again, alone, from past its start
	safe        uint32 // what the path took whole before its first hole
	counted     bool   // pacing turned on (or cut) for this READ already
}

const (
	// paceGain is how far above the estimate the pace runs, so that a
	// paced response shows whether the path takes more (BBR's probing
	// gain).
	paceGain = 1.125
	// paceDecay is what the estimate keeps of itself at each lower sample,
	// paceBackoff what it keeps when a paced response lost its tail.
	paceDecay, paceBackoff = 0.875, 0.75
	// paceBurst is the time's worth of packets that may leave at once:
	// an engine that wakes late catches up by a bounded burst, not by the
	// overflow the pacing is there to avoid.
	paceBurst                  = time.Millisecond
	paceBurstMin, paceBurstMax = 4, 32
	// paceFloor is the slowest pace, in packets a second: a gap between
	// packets near a requester's transport timer (xdproce's adapts down to
	// 1 ms) would have it ask again for what is still coming.
	paceFloor = 2000
	// paceSampleMin is the shortest response that makes a sample: below
	// it the time to a requester's next READ is mostly the round trip (an
	// application that thinks between READs makes low samples too: the
	// floor and the burst bound what they cost).
	paceSampleMin = 8
	// paceLossMin is the fewest packets a request, or one READ's
	// requests together (LossEpisode), must ask for again to count as an
	// overflow: a path that overflowed loses runs of a burst, a lossy one
	// single packets (a requester asks for holes alone: recovery.go),
	// which pacing would only slow down.
	paceLossMin = 4
)

// Requested notes a new READ arriving at now; idle says no response was
// queued, so the newest one has been sent and, the requester asking again,
// taken in.
func (p *ReadPacer) Requested(now time.Time, idle bool) {
	// A response shorter than what the path has taken whole in one burst
	// went into its buffers at once and out as fast as the receiver could
	// go for a moment: its sample overestimates (by half, in a guest
	// behind a tap), and serves only for a first estimate.
	least := uint32(paceSampleMin)
	if p.rate > 0 {
		least = max(least, p.safe)
	}
	if !idle || p.startAt.IsZero() || p.pkts < least {
		return
	}
	d := now.Sub(p.startAt)
	if d <= 0 {
		return
	}
	p.rate = max(float64(p.pkts)/d.Seconds(), p.rate*paceDecay)
}

// Started notes a READ response of PSNs first through last beginning at
// now; alone says nothing was queued before it.
func (p *ReadPacer) Started(now time.Time, first, last uint32, alone bool) {
	p.startAt, p.pkts = time.Time{}, (last-first+1)&0xffffff
	p.first, p.last = first, last
	if alone {
		p.startAt = now
	}
}

// Pacing reports whether the QP's READ responses wait for their pace.
func (p *ReadPacer) Pacing() bool { return p.paced && p.rate > 0 }

// interval is the time between paced packets, and tolerance how far ahead
// of its theoretical time a packet may leave (the burst).
func (p *ReadPacer) interval() (interval, tolerance time.Duration) {
	pace := max(p.rate*paceGain, paceFloor)
	interval = time.Duration(float64(time.Second) / pace)
	burst := min(max(int(pace*paceBurst.Seconds()), paceBurstMin), paceBurstMax)
	burst = max(burst, int(p.safe/8))
	return interval, time.Duration(burst-1) * interval
}

// Take reports whether a packet may leave at now, and counts it if so.
func (p *ReadPacer) Take(now time.Time) bool {
	interval, tolerance := p.interval()
	if p.nextAt.Before(now) {
		p.nextAt = now
	}
	if p.nextAt.Sub(now) > tolerance {
		return false
	}
	p.nextAt = p.nextAt.Add(interval)
	return true
}

// Due is when the next packet may leave.
func (p *ReadPacer) Due() time.Time {
	_, tolerance := p.interval()
	return p.nextAt.Add(-tolerance)
}

// AskedAgain notes a request, alone, for PSNs from through last of the READ
// starting at first (whose answer ends at resLast), from past its start;
// it reports whether that turned pacing on (or, already on, cut it).
func (p *ReadPacer) AskedAgain(first, resLast, from, last uint32) bool {
	n := (last-from)&0xffffff + 1
	if first != p.Ep.First {
		p.Ep = LossEpisode{First: first} // an older READ's: its length unknown here
	}
	if p.Ep.lost == 0 {
		burstFrom := first
		if PSNCmp(from, p.first) > 0 && PSNCmp(p.first, first) > 0 && PSNCmp(p.first, resLast) <= 0 {
			burstFrom = p.first // the newest response, itself a re-read's
		}
		p.Ep.safe = (from - burstFrom) & 0xffffff
	}
	p.Ep.lost += n
	overflow := n >= paceLossMin || p.Ep.lost >= paceLossMin && p.Ep.lost*8 >= p.Ep.Pkts
	if !overflow || p.Ep.counted {
		return false
	}
	// If the pace was on, it ran too fast: once per READ.
	if p.paced {
		p.rate *= paceBackoff
	}
	p.Ep.counted = true
	p.paced, p.safe = true, p.Ep.safe
	return true
}
