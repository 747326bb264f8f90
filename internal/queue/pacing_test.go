package queue

import (
	"testing"
	"time"
)

// TestReadPacer: the estimate comes only from a READ arriving with nothing
// queued, after a response of two packets or more; it keeps the highest
// recent sample, decaying, and ignores responses shorter than the path
// holds; and the pace lets a bounded burst go, then one packet per
// interval.
func TestReadPacer(t *testing.T) {
	var p ReadPacer
	t0 := time.Unix(1e9, 0)
	p.Started(t0, 0, 99, true)
	p.Requested(t0.Add(10*time.Millisecond), false) // a response still queued: no sample
	if p.rate != 0 {
		t.Fatalf("rate %v from a busy arrival", p.rate)
	}
	p.Requested(t0.Add(10*time.Millisecond), true) // 100 packets in 10 ms
	if p.rate != 10000 {
		t.Fatalf("rate %v, want 10000 packets/s", p.rate)
	}
	p.Started(t0, 0, 99, true)
	p.Requested(t0.Add(100*time.Millisecond), true) // a requester that paused: 1000/s
	if p.rate != 10000*paceDecay {
		t.Fatalf("rate %v after a low sample, want %v", p.rate, 10000*paceDecay)
	}
	p.Started(t0, 0, 0, true)
	p.Requested(t0.Add(time.Second), true) // one packet times the round trip
	if p.rate != 10000*paceDecay {
		t.Fatalf("rate %v after a one-packet response", p.rate)
	}
	p.Started(t0, 0, 99, false) // behind other responses: not a sample
	p.Requested(t0.Add(time.Second), true)
	if p.rate != 10000*paceDecay || p.Pacing() {
		t.Fatalf("rate %v, pacing %v", p.rate, p.Pacing())
	}
	p.safe = 200 // the path took 200 packets whole in one burst
	p.Started(t0, 0, 99, true)
	p.Requested(t0.Add(time.Millisecond), true) // shorter: its buffers took it
	if p.rate != 10000*paceDecay {
		t.Fatalf("rate %v after a response shorter than the path holds", p.rate)
	}
	p.Started(t0, 0, 199, true)
	p.Requested(t0.Add(10*time.Millisecond), true)
	if p.rate != 20000 {
		t.Fatalf("rate %v, want 20000 packets/s", p.rate)
	}

	p.rate, p.paced, p.safe = 8000/paceGain, true, 0 // paced at 8000 packets/s: 125 µs apart, bursts of 8
	now := t0
	burst := 0
	for p.Take(now) {
		burst++
	}
	if burst != 8 {
		t.Fatalf("a burst of %d packets, want 8", burst)
	}
	if due := p.Due(); due.Sub(now) != 125*time.Microsecond {
		t.Fatalf("next packet due after %v, want 125µs", due.Sub(now))
	}
	if p.Take(now.Add(124*time.Microsecond)) || !p.Take(now.Add(125*time.Microsecond)) {
		t.Fatal("the next packet did not leave at its interval")
	}

	// However low the estimate, packets leave at least every 500 µs; and
	// an eighth of what the path took whole in one burst always may.
	p = ReadPacer{rate: 10, paced: true, safe: 200}
	if interval, tolerance := p.interval(); interval != 500*time.Microsecond || tolerance != 24*interval {
		t.Fatalf("interval %v, tolerance %v: want 500µs and a burst of 25", interval, tolerance)
	}
}

// TestReadLossEpisode: the runs of one READ asked for again count
// together. A 128-packet READ that lost a few single packets (random loss)
// does not pace; one whose runs add up to an eighth of it (an overflow
// the receiver partly drained) does, once, however many runs follow; a
// new READ starts a new count; a run of paceLossMin at once paces alone.
func TestReadLossEpisode(t *testing.T) {
	var p ReadPacer
	t0 := time.Unix(1e9, 0)
	p.Started(t0, 0, 127, true)
	p.Ep = LossEpisode{First: 0, Pkts: 128}
	for _, from := range []uint32{10, 40, 77} {
		if p.AskedAgain(0, from, from, from) || p.paced {
			t.Fatalf("a single lost packet at %d turned pacing on", from)
		}
	}
	turned := 0
	for from := uint32(80); from < 120; from += 3 {
		if p.AskedAgain(0, from+1, from, from+1) {
			turned++
		}
	}
	if turned != 1 || !p.paced || p.safe != 10 {
		t.Fatalf("runs adding up to %d of 128: pacing turned on %d times (want 1), safe %d (want 10)", p.Ep.lost, turned, p.safe)
	}
	p = ReadPacer{}
	p.Ep = LossEpisode{First: 128, Pkts: 16}
	if p.AskedAgain(128, 130, 130, 130) || p.AskedAgain(128, 140, 140, 140) {
		t.Fatal("two lost packets of 16 turned pacing on")
	}
	p.Ep = LossEpisode{First: 144, Pkts: 1024}
	if !p.AskedAgain(144, 1167, 1000, 1003) {
		t.Fatal("a run of paceLossMin did not turn pacing on")
	}
}
