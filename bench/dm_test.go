package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// TestDMPair: the device-memory rows' pair has each side's region in
// device memory (zero-based, the memory's own mapping), and the round trip
// and the message rate run on it; closing frees the memory.
func TestDMPair(t *testing.T) {
	netns.RequireRoot(t)
	hosts, closeHosts, err := buildHosts(4200, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeHosts()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := openDMPair(ctx, hosts, 1<<20, verbs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dms := []*verbs.DM{p.a.dm, p.b.dm}
	for _, r := range []*rnic{p.a, p.b} {
		if r.dm == nil || r.mr.Addr() != 0 || r.mr.Len() != 2*dmHalf || r.half != dmHalf {
			t.Fatalf("region at %#x of %d bytes (half %d), device memory %v: want a zero-based %d bytes of it", r.mr.Addr(), r.mr.Len(), r.half, r.dm != nil, 2*dmHalf)
		}
	}
	lat, err := p.writeLatency(ctx, 10*time.Millisecond, 100*time.Millisecond, 8)
	if err != nil || lat.N == 0 {
		t.Fatalf("round trips: %+v %v", lat, err)
	}
	win, err := p.stream(ctx, 10*time.Millisecond, 100*time.Millisecond, OpWrite, 64, 1, 8)
	if err != nil || win.msgs == 0 {
		t.Fatalf("message rate: %+v %v", win, err)
	}
	// What the peer's last WRITE left is in B's device memory, as a copy
	// out of it reads it.
	got := make([]byte, 64)
	if err := p.b.dm.CopyFrom(got, 0); err != nil || !bytes.Equal(got, p.b.dst(64)) {
		t.Fatalf("device memory %x (%v), region %x", got, err, p.b.dst(64))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dm := range dms {
		if err := dm.CopyTo(0, make([]byte, 4)); err == nil {
			t.Error("device memory not freed with the pair")
		}
	}
}

// TestDMTargets: the targets show device memory's round trip and message
// rate against the AF_XDP floor, host memory's beside, and the tables show
// them under host memory's.
func TestDMTargets(t *testing.T) {
	results := []Result{
		{Contender: Xdproce, Measure: RTT, Op: OpWrite, Size: 8, P50us: 5, P99us: 6, P999us: 7},
		{Contender: XdproceDM, Measure: RTT, Op: OpWrite, Size: 8, P50us: 4.4, P99us: 6, P999us: 8},
		{Contender: TCP, Measure: RTT, Op: OpPingPong, Size: 8, P50us: 10, P99us: 20, P999us: 30},
		{Contender: AFXDP, Measure: RTT, Op: OpFrame, Size: 8, P50us: 4, P99us: 5, P999us: 6},
		{Contender: Xdproce, Measure: MsgRate, Op: OpWrite, Size: 64, QPs: 1, MmsgS: 0.5},
		{Contender: XdproceDM, Measure: MsgRate, Op: OpWrite, Size: 64, QPs: 1, MmsgS: 0.56},
		{Contender: AFXDP, Measure: MsgRate, Op: OpFrame, Size: 64, QPs: 1, MmsgS: 0.7},
	}
	for _, r := range results {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := WriteTargets(&out, results, true); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"8 B WRITE round trip on device memory ≤ 1.0× the AF_XDP floor, medians (issue 34; host memory 1.25×) 1.10× (4.40 µs) no 4.00 µs",
		"64 B WRITE message rate on device memory ≥ 1.0× the AF_XDP floor's frame rate, 1 QP (issue 34; host memory 0.71×) 0.80× (0.560 M/s) no 0.700 M/s",
	} {
		if !slices.Contains(squeezed(out.String()), w) {
			t.Errorf("no device-memory target %q in:\n%s", w, out.String())
		}
	}
	out.Reset()
	if err := WriteTables(&out, results); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"WRITE, device memory 8 B 4.40 / 6.00 / 8.00 - - 0.44× 4.00 / 5.00 / 6.00",
		"xdproce on device memory (WRITE, 1 QP): 0.560 million/s"} {
		if !slices.Contains(squeezed(out.String()), w) {
			t.Errorf("no device-memory row %q in:\n%s", w, out.String())
		}
	}
	rows := 0
	for _, l := range squeezed(out.String()) {
		if strings.HasPrefix(l, "1 ") {
			rows++
		}
	}
	if rows != 1 {
		t.Errorf("the message-rate table has a row per QP count, device memory's not among them:\n%s", out.String())
	}
}
