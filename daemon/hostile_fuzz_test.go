package daemon

import (
	"context"
	"testing"
	"time"
)

// FuzzHostile drives the hostile client's choices — which requests, with
// which arguments and fds, what it writes into its rings, what it does to
// the fds the daemon gave it — from the fuzzer's input, against one
// long-lived daemon with an honest client. After each input the attacker
// hangs up; the daemon must then answer LIST within a second, the honest
// client must move checked bytes, and the daemon must hold nothing more
// than before the input.
func FuzzHostile(f *testing.F) {
	for seed := range uint64(4) {
		g := newSeeded(seed)
		in := make([]byte, 1024<<(seed%3))
		for i := range in {
			in[i] = byte(g.Uint32())
		}
		f.Add(in)
	}
	f.Add([]byte{})
	bed := newHostileBed(f, -1)
	f.Cleanup(func() { bed.stop(f) })
	h := newHonestPair(f, bed, 7)
	f.Cleanup(func() { h.dev.Close() })
	f.Fuzz(func(t *testing.T, in []byte) {
		base, err := bed.measure()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a := &attacker{name: bed.name, c: &fuzzBytes{in: in}, privileged: true, bell: -1, events: -1}
		if err := loop(ctx, a, mixAll); err != nil {
			t.Fatalf("the attacker could not attach: %v", err)
		}
		a.close()

		qctx, qcancel := context.WithTimeout(context.Background(), time.Second)
		defer qcancel()
		if _, err := Query(qctx, bed.name); err != nil {
			t.Fatalf("LIST after the attack: %v", err)
		}
		var rerr error
		if !within(6*time.Second, func() { rerr = h.round(context.Background(), byte(len(in))) }) {
			t.Fatal("the honest client's transfer did not end within 6 s: the device is frozen")
		}
		if rerr != nil {
			t.Fatalf("the honest client's transfer: %v", rerr)
		}
		if err := doorbellNonblocking(bed.name); err != nil {
			t.Fatal(err)
		}
		if err := bed.waitClean(base, -1, 3*time.Second); err != nil {
			t.Fatalf("after the attacker hung up: %v", err)
		}
	})
}
