package bench

import (
	"context"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bench/report"
	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// TestLoopbackPair: the loopback row's pair is one device whose two ends
// stream WRITEs and ping-pong through its own GID, every frame looped back
// inside it, none on the veth.
func TestLoopbackPair(t *testing.T) {
	netns.RequireRoot(t)
	hosts, closeHosts, err := buildHosts(4200, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeHosts()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := openLoopbackPair(ctx, hosts, 64<<10, verbs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	if p.a.dev != p.b.dev || p.a.pd == p.b.pd {
		t.Fatal("want one device with a PD for each end")
	}
	win, err := p.stream(ctx, 20*time.Millisecond, 200*time.Millisecond, report.OpWrite, 64<<10, 1, 8)
	if err != nil || win.msgs == 0 {
		t.Fatalf("stream: %+v %v", win, err)
	}
	lat, err := p.writeLatency(ctx, 10*time.Millisecond, 100*time.Millisecond, 8)
	if err != nil || lat.N == 0 {
		t.Fatalf("round trips: %+v %v", lat, err)
	}
	c, err := p.a.dev.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var looped, sent uint64
	for _, f := range c.Named() {
		switch f.Name {
		case "loopback_pkts":
			looped = f.Value
		case "sent_pkts":
			sent = f.Value
		}
	}
	// 64 KiB at path MTU 4096 is 16 packets, and each round trip two WRITEs.
	if want := uint64(win.msgs)*16 + 2*uint64(lat.N); looped < want {
		t.Errorf("loopback_pkts %d, want at least %d", looped, want)
	}
	t.Logf("%d WRITEs of 64 KiB, %d round trips, loopback_pkts %d, sent_pkts %d", win.msgs, lat.N, looped, sent)
}
