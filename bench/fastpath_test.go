package bench

import (
	"context"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// portCounters sums the named port counters (the XDP program's) of devs.
func portCounters(t *testing.T, names []string, devs ...*verbs.Device) map[string]uint64 {
	t.Helper()
	out := make(map[string]uint64, len(names))
	for _, d := range devs {
		c, err := d.PortCounters()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range c {
			for _, n := range names {
				if f.Name == n {
					out[n] += f.Value
				}
			}
		}
	}
	return out
}

// TestWritePingPongFewAcks: the bench's 8 B WRITE ping-pong into device
// memory with the XDP fast path on both sides, busy-polled (what `xdproce
// bench --dm` measures against the floor's frame ping-pong) draws far fewer ACK frames
// than WRITEs: only every pingPongSignal-th WRITE is signaled, and the
// others, whose completion nobody waits for, ask for no ACK
// (internal/queue/ackpolicy.go, Lazy). The programs place every WRITE and
// send an ACK (XDP_TX) only for those that asked; before, every WRITE drew
// one.
func TestWritePingPongFewAcks(t *testing.T) {
	netns.RequireRoot(t)
	hosts, closeHosts, err := buildHosts(1500, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := closeHosts(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := openDMPair(ctx, hosts, 64, verbs.Options{FastPath: true, BusyPoll: true})
	if err != nil {
		t.Skipf("no device memory or fast path here: %v", err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	names := []string{"xdp_fast_placed", "xdp_fast_acked"}
	before := portCounters(t, names, p.a.dev, p.b.dev)
	lat, err := p.writeLatency(ctx, 10*time.Millisecond, 300*time.Millisecond, 8)
	if err != nil || lat.N == 0 {
		t.Fatalf("round trips: %+v %v", lat, err)
	}
	after := portCounters(t, names, p.a.dev, p.b.dev)
	placed := after["xdp_fast_placed"] - before["xdp_fast_placed"]
	acked := after["xdp_fast_acked"] - before["xdp_fast_acked"]
	var asks, timeouts uint64
	for _, d := range []*verbs.Device{p.a.dev, p.b.dev} {
		c, err := d.Counters()
		if err != nil {
			t.Fatal(err)
		}
		asks += c.AckAsks
		timeouts += c.TransportTimeouts
	}
	t.Logf("%d round trips (median %v): the programs placed %d WRITEs and sent %d ACKs; %d asks after idle time, %d transport timeouts",
		lat.N, lat.P50, placed, acked, asks, timeouts)
	if placed < 2*uint64(lat.N) {
		t.Fatalf("the programs placed %d WRITEs for %d round trips: the fast path is not on", placed, lat.N)
	}
	// One in pingPongSignal asks, and an ask when a turn took longer
	// than a probe timeout (a loaded machine); every WRITE asked before.
	if 4*acked > placed {
		t.Errorf("%d ACKs for %d WRITEs placed; want under a quarter", acked, placed)
	}
}
