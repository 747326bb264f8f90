package impair_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/internal/netns"
)

// result is what one impaired flow produced.
type result struct {
	got      [][]byte
	counters impair.Counters
	log      []impair.Decision
}

// waitFor polls cond on the injector's counters for at most d.
func waitFor(t *testing.T, inj *impair.Injector, d time.Duration, what string, cond func(impair.Counters) bool) impair.Counters {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		c := inj.Counters()
		if cond(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("injector: %s not reached within %v: %+v", what, d, c)
		}
		time.Sleep(time.Millisecond)
	}
}

// impairedFlow sends f through an injector on A's wire port configured
// with cfg and returns what B received.
func impairedFlow(t *testing.T, r *run, f flow, cfg impair.Config) result {
	t.Helper()
	if err := r.topo.SetFaults(r.a, &cfg); err != nil {
		t.Fatal(err)
	}
	inj := r.topo.Injector(r.a)
	sendAll(t, r.sender, f, inj)
	c := waitFor(t, inj, 10*time.Second, "all received and released", func(c impair.Counters) bool {
		return c.Received >= uint64(f.n) && c.Held == 0
	})
	got := receive(t, r.receiver, int(c.Sent), 2*time.Second)
	res := result{got: got, counters: inj.Counters(), log: inj.Log()}
	if c := res.counters; c.Lost != 0 || c.Truncated != 0 || c.SendErrors != 0 || c.Unparsed != 0 {
		t.Fatalf("the injector itself lost packets: %+v", c)
	}
	if int(res.counters.Diverted) != f.n || int(res.counters.Received) != f.n {
		t.Fatalf("diverted %d, received %d, want %d", res.counters.Diverted, res.counters.Received, f.n)
	}
	return res
}

func distance(cfg impair.Config) uint64 {
	if cfg.ReorderDistance == 0 {
		return impair.DefaultReorderDistance
	}
	return uint64(cfg.ReorderDistance)
}

// model is the stream B should see given the injector's decisions: the
// specification of drop, corrupt, duplicate and reorder, written
// independently of the forwarder.
func model(log []impair.Decision, f flow, dist uint64) [][]byte {
	type held struct {
		p      []byte
		copies int
		after  uint64
	}
	var out [][]byte
	var hold []held
	release := func(all bool, seq uint64) {
		kept := hold[:0]
		for _, h := range hold {
			if all || h.after <= seq {
				for range h.copies {
					out = append(out, h.p)
				}
			} else {
				kept = append(kept, h)
			}
		}
		hold = kept
	}
	for _, d := range log {
		p := payload(uint32(d.Seq), f.size)
		if d.Action&impair.Dropped == 0 {
			if d.Action&impair.Corrupted != 0 {
				p[d.Offset] ^= d.Mask
			}
			copies := 1
			if d.Action&impair.Duplicated != 0 {
				copies = 2
			}
			if d.Action&impair.Reordered != 0 {
				hold = append(hold, held{p, copies, d.Seq + dist})
			} else {
				for range copies {
					out = append(out, p)
				}
			}
		}
		release(false, d.Seq)
	}
	release(true, 0)
	return out
}

func seqs(ps [][]byte) []uint32 {
	s := make([]uint32, len(ps))
	for i, p := range ps {
		s[i] = seqOf(p)
	}
	return s
}

func countActions(log []impair.Decision, a impair.Action) int {
	n := 0
	for _, d := range log {
		if d.Action&a != 0 {
			n++
		}
	}
	return n
}

// checkLogIsPure checks every logged decision against impair.Decide and
// the packet that was sent.
func checkLogIsPure(t *testing.T, log []impair.Decision, cfg impair.Config, f flow) {
	t.Helper()
	if len(log) != f.n {
		t.Fatalf("log has %d entries, want %d", len(log), f.n)
	}
	for i, d := range log {
		want := impair.Decide(cfg, uint64(i), f.size)
		want.Digest = d.Digest
		if d != want {
			t.Fatalf("decision %d = %+v, Decide says %+v", i, d, want)
		}
	}
}

// within reports whether got is inside mean ± 5 standard deviations of a
// binomial(n, p): a seeded stream that misses this is not uniform.
func within(got, n int, p float64) bool {
	mean := float64(n) * p
	sd := sqrt(float64(n) * p * (1 - p))
	return float64(got) >= mean-5*sd && float64(got) <= mean+5*sd
}

func sqrt(x float64) float64 {
	z := x
	for range 50 {
		if z == 0 {
			return 0
		}
		z = (z + x/z) / 2
	}
	return z
}

func TestPassThrough(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    flow
		topo netns.Config
	}{
		{"ipv4", flow{n: 1000, size: 1024}, netns.Config{}},
		{"ipv4-nocsum", flow{n: 1000, size: 1024, noCheck: true}, netns.Config{}},
		{"ipv6", flow{n: 1000, size: 1024, v6: true}, netns.Config{IPv6: true}},
		{"ipv4-jumbo", flow{n: 300, size: 8000}, netns.Config{MTU: 9000}},
		{"router", flow{n: 500, size: 512}, netns.Config{Kind: netns.Router}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t, tc.f, tc.topo)
			res := impairedFlow(t, r, tc.f, impair.Config{Seed: 1, LogLimit: tc.f.n})
			if len(res.got) != tc.f.n {
				t.Fatalf("received %d of %d", len(res.got), tc.f.n)
			}
			for i, p := range res.got {
				if !bytes.Equal(p, payload(uint32(i), tc.f.size)) {
					t.Fatalf("packet %d arrived as seq %d or changed", i, seqOf(p))
				}
			}
			c := res.counters
			if c.Sent != uint64(tc.f.n) || c.Dropped+c.Duplicate+c.Corrupted+c.Reordered != 0 {
				t.Fatalf("counters %+v", c)
			}
			if countActions(res.log, impair.Dropped|impair.Duplicated|impair.Corrupted|impair.Reordered) != 0 {
				t.Fatal("log shows actions at rate 0")
			}
		})
	}
}

func TestDrop(t *testing.T) {
	f := flow{n: 2000, size: 200}
	r := newRun(t, f, netns.Config{})
	cfg := impair.Config{Drop: 0.1, Seed: 7, LogLimit: f.n}
	res := impairedFlow(t, r, f, cfg)
	checkLogIsPure(t, res.log, cfg, f)

	arrived := map[uint32]bool{}
	for _, p := range res.got {
		arrived[seqOf(p)] = true
	}
	missing := f.n - len(arrived)
	t.Logf("dropped %d of %d (%.1f%%)", missing, f.n, 100*float64(missing)/float64(f.n))
	if !within(missing, f.n, cfg.Drop) {
		t.Errorf("%d of %d missing, want about %.0f", missing, f.n, cfg.Drop*float64(f.n))
	}
	if res.counters.Dropped != uint64(missing) {
		t.Errorf("Dropped counter %d, but %d are missing", res.counters.Dropped, missing)
	}
	for _, d := range res.log {
		if arrived[uint32(d.Seq)] == (d.Action&impair.Dropped != 0) {
			t.Fatalf("seq %d: arrived %v, decision %v", d.Seq, arrived[uint32(d.Seq)], d.Action)
		}
	}
	if !slices.IsSorted(seqs(res.got)) || len(res.got) != len(arrived) {
		t.Error("survivors reordered or duplicated")
	}
}

func TestDuplicate(t *testing.T) {
	f := flow{n: 2000, size: 200}
	r := newRun(t, f, netns.Config{})
	cfg := impair.Config{Duplicate: 0.1, Seed: 8, LogLimit: f.n}
	res := impairedFlow(t, r, f, cfg)
	checkLogIsPure(t, res.log, cfg, f)

	times := map[uint32]int{}
	for i, p := range res.got {
		times[seqOf(p)]++
		if !bytes.Equal(p, payload(seqOf(p), f.size)) {
			t.Fatalf("duplicate test changed packet %d", seqOf(p))
		}
		// Copies go back to back.
		if i > 0 && seqOf(res.got[i-1]) > seqOf(p) {
			t.Fatalf("out of order at %d", i)
		}
	}
	twice := 0
	for s := range f.n {
		switch times[uint32(s)] {
		case 1:
		case 2:
			twice++
		default:
			t.Fatalf("seq %d arrived %d times", s, times[uint32(s)])
		}
	}
	t.Logf("duplicated %d of %d", twice, f.n)
	if !within(twice, f.n, cfg.Duplicate) {
		t.Errorf("%d duplicated, want about %.0f", twice, cfg.Duplicate*float64(f.n))
	}
	if res.counters.Duplicate != uint64(twice) || countActions(res.log, impair.Duplicated) != twice {
		t.Errorf("Duplicate counter %d, log %d, observed %d", res.counters.Duplicate, countActions(res.log, impair.Duplicated), twice)
	}
	if res.counters.Sent != uint64(f.n+twice) {
		t.Errorf("Sent %d, want %d", res.counters.Sent, f.n+twice)
	}
}

func TestCorrupt(t *testing.T) {
	for _, noCheck := range []bool{false, true} {
		t.Run(fmt.Sprintf("udp-checksum-zero=%v", noCheck), func(t *testing.T) {
			f := flow{n: 2000, size: 300, noCheck: noCheck}
			r := newRun(t, f, netns.Config{})
			cfg := impair.Config{Corrupt: 0.1, Seed: 9, LogLimit: f.n}
			res := impairedFlow(t, r, f, cfg)
			checkLogIsPure(t, res.log, cfg, f)
			checkCorruption(t, res, f, cfg)
		})
	}
}

// checkCorruption: every packet arrives once, in order; the corrupted ones
// differ from what was sent in exactly one bit of the UDP payload (never
// the headers, or they would not arrive on this socket), where the log says.
func checkCorruption(t *testing.T, res result, f flow, cfg impair.Config) {
	t.Helper()
	if len(res.got) != f.n {
		t.Fatalf("received %d of %d: corrupted packets must still arrive", len(res.got), f.n)
	}
	corrupted := 0
	for i, p := range res.got {
		want := payload(uint32(i), f.size)
		var diff []int
		for j := range p {
			if p[j] != want[j] {
				diff = append(diff, j)
			}
		}
		d := res.log[i]
		switch len(diff) {
		case 0:
			if d.Action&impair.Corrupted != 0 {
				t.Fatalf("packet %d logged as corrupted but arrived intact", i)
			}
		case 1:
			corrupted++
			x := p[diff[0]] ^ want[diff[0]]
			if x&(x-1) != 0 {
				t.Fatalf("packet %d: byte %d changed by %08b, want one bit", i, diff[0], x)
			}
			if d.Action&impair.Corrupted == 0 || d.Offset != diff[0] || d.Mask != x {
				t.Fatalf("packet %d: byte %d mask %x changed, log says %+v", i, diff[0], x, d)
			}
		default:
			t.Fatalf("packet %d (seq %d) differs in %d bytes", i, seqOf(p), len(diff))
		}
	}
	t.Logf("corrupted %d of %d", corrupted, f.n)
	if !within(corrupted, f.n, cfg.Corrupt) {
		t.Errorf("%d corrupted, want about %.0f", corrupted, cfg.Corrupt*float64(f.n))
	}
	if res.counters.Corrupted != uint64(corrupted) {
		t.Errorf("Corrupted counter %d, observed %d", res.counters.Corrupted, corrupted)
	}
}

func TestReorder(t *testing.T) {
	f := flow{n: 2000, size: 200}
	r := newRun(t, f, netns.Config{})
	// A long hold timeout: only the last packets wait for it, so the
	// order is fully decided by packet counts.
	cfg := impair.Config{Reorder: 0.1, ReorderDistance: 4, HoldTimeout: time.Second, Seed: 10, LogLimit: f.n}
	res := impairedFlow(t, r, f, cfg)
	checkLogIsPure(t, res.log, cfg, f)

	got := seqs(res.got)
	if len(got) != f.n {
		t.Fatalf("received %d of %d: reordering must not lose packets", len(got), f.n)
	}
	want := seqs(model(res.log, f, distance(cfg)))
	if !slices.Equal(got, want) {
		t.Fatalf("arrival order differs from the model:\n got %v\nwant %v", head(got), head(want))
	}
	// Independent of the model: a packet is late when a later one arrived
	// before it. With no drops, a reordered packet is late exactly when
	// one of the next `distance` packets was not itself held; nothing
	// else is ever late.
	reordered := func(s uint64) bool { return res.log[s].Action&impair.Reordered != 0 }
	expectLate := func(s uint64) bool {
		if !reordered(s) {
			return false
		}
		for j := s + 1; j <= s+distance(cfg) && j < uint64(f.n); j++ {
			if !reordered(j) {
				return true
			}
		}
		return false
	}
	late := 0
	maxSeen := -1
	for _, s := range got {
		isLate := int(s) < maxSeen
		if isLate {
			late++
		}
		if isLate != expectLate(uint64(s)) {
			t.Errorf("seq %d: late %v, decision %v", s, isLate, res.log[s].Action)
		}
		maxSeen = max(maxSeen, int(s))
	}
	t.Logf("reordered %d of %d (%d late on arrival), %d released by timeout", res.counters.Reordered, f.n, late, res.counters.TimedOut)
	if !within(late, f.n, cfg.Reorder) || res.counters.Reordered != uint64(countActions(res.log, impair.Reordered)) {
		t.Errorf("%d late, counter %d, want about %.0f", late, res.counters.Reordered, cfg.Reorder*float64(f.n))
	}
	// Only packets held at the very end can have timed out.
	tail := 0
	for _, d := range res.log {
		if d.Action&impair.Reordered != 0 && d.Seq+distance(cfg) >= uint64(f.n) {
			tail++
		}
	}
	if res.counters.TimedOut != uint64(tail) {
		t.Errorf("%d released by timeout, want %d (the tail)", res.counters.TimedOut, tail)
	}
}

func head(s []uint32) []uint32 {
	return s[:min(len(s), 40)]
}

// TestReplay: same seed and packets, same decisions and the same stream at
// B; another seed, other decisions.
func TestReplay(t *testing.T) {
	f := flow{n: 1500, size: 400}
	cfg := impair.Config{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, ReorderDistance: 2,
		HoldTimeout: time.Second, Seed: 0xC0FFEE, LogLimit: f.n}
	r := newRun(t, f, netns.Config{})
	runOnce := func(c impair.Config) result {
		// A fresh injector numbers packets from 0 again.
		if err := r.topo.SetFaults(r.a, nil); err != nil {
			t.Fatal(err)
		}
		return impairedFlow(t, r, f, c)
	}
	first := runOnce(cfg)
	second := runOnce(cfg)
	checkLogIsPure(t, first.log, cfg, f)
	if !slices.Equal(first.log, second.log) {
		t.Fatal("same seed, same packets: decision logs differ")
	}
	if len(first.got) != len(second.got) {
		t.Fatalf("same seed: %d then %d packets arrived", len(first.got), len(second.got))
	}
	for i := range first.got {
		if !bytes.Equal(first.got[i], second.got[i]) {
			t.Fatalf("same seed: arrival %d differs (seq %d vs %d)", i, seqOf(first.got[i]), seqOf(second.got[i]))
		}
	}
	want := model(first.log, f, distance(cfg))
	if len(want) != len(first.got) {
		t.Fatalf("model predicts %d arrivals, got %d", len(want), len(first.got))
	}
	for i := range want {
		if !bytes.Equal(want[i], first.got[i]) {
			t.Fatalf("arrival %d: seq %d, model says seq %d", i, seqOf(first.got[i]), seqOf(want[i]))
		}
	}
	c := first.counters
	t.Logf("seed %#x: %+v", cfg.Seed, c)
	for name, n := range map[string]uint64{"drop": c.Dropped, "dup": c.Duplicate, "corrupt": c.Corrupted, "reorder": c.Reordered} {
		if !within(int(n), f.n, 0.05) {
			t.Errorf("%s: %d of %d", name, n, f.n)
		}
	}

	other := cfg
	other.Seed++
	third := runOnce(other)
	if slices.Equal(first.log, third.log) {
		t.Fatal("another seed gave the same decisions")
	}
	for i := range first.log {
		if first.log[i].Digest != third.log[i].Digest {
			t.Fatalf("packet %d differs between runs: the packet sequence was not the same", i)
		}
	}
}

// TestOtherTrafficUntouched: with every RoCEv2 packet dropped, ping, TCP
// and UDP to other ports still pass unchanged and are never diverted.
func TestOtherTrafficUntouched(t *testing.T) {
	f := flow{n: 300, size: 500, port: 4792}
	r := newRun(t, f, netns.Config{IPv6: true})
	cfg := impair.Config{Drop: 1, Corrupt: 1, Seed: 1}
	if err := r.topo.SetFaults(r.a, &cfg); err != nil {
		t.Fatal(err)
	}
	inj := r.topo.Injector(r.a)

	ctx := t.Context()
	for _, dst := range []netip.Addr{r.b.Addr, r.b.Addr6} {
		if err := r.a.Ping(ctx, dst, 1000); err != nil {
			t.Fatalf("ping %v under faults: %v", dst, err)
		}
	}

	// UDP to a neighbouring port arrives complete and intact.
	sendAll(t, r.sender, f, nil)
	got := receive(t, r.receiver, f.n, 2*time.Second)
	if len(got) != f.n {
		t.Fatalf("UDP port 4792: %d of %d arrived", len(got), f.n)
	}
	for i, p := range got {
		if !bytes.Equal(p, payload(uint32(i), f.size)) {
			t.Fatalf("UDP port 4792: packet %d changed", i)
		}
	}

	// TCP: 4 MiB arrive intact.
	tcpTransfer(t, r.a, r.b, 4<<20)

	if c := inj.Counters(); c.Diverted != 0 || c.Received != 0 {
		t.Fatalf("non-RoCE traffic was diverted: %+v", c)
	}

	// The injector is live: RoCEv2 on the same path is all dropped.
	rf := flow{n: 50, size: 100}
	roce := udpSocket(t, r.a, false, netip.AddrPort{}, netip.AddrPortFrom(r.b.Addr, rocePort), false)
	recv := udpSocket(t, r.b, false, netip.AddrPortFrom(r.b.Addr, rocePort), netip.AddrPort{}, false)
	sendAll(t, roce, rf, inj)
	waitFor(t, inj, 5*time.Second, "all received", func(c impair.Counters) bool { return c.Received == uint64(rf.n) })
	if got := receive(t, recv, 0, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("%d RoCEv2 packets arrived at drop rate 1", len(got))
	}
}

func tcpTransfer(t *testing.T, a, b *netns.Host, size int) {
	t.Helper()
	var ln net.Listener
	if err := b.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(b.Addr, 5001).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sum := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			sum <- [32]byte{}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		h := sha256.New()
		_, _ = io.Copy(h, c)
		sum <- [32]byte(h.Sum(nil))
	}()
	var conn net.Conn
	if err := a.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(b.Addr, 5001).String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if got := <-sum; got != sha256.Sum256(data) {
		t.Fatal("TCP transfer corrupted or incomplete")
	}
}

// TestRuntimeChange: rates changed at run time take effect; rates 0 stop
// impairing; detaching restores the plain path and leaves nothing behind.
func TestRuntimeChange(t *testing.T) {
	f := flow{n: 200, size: 100}
	r := newRun(t, f, netns.Config{})
	all := impair.Config{Drop: 1, Seed: 3}
	if err := r.topo.SetFaults(r.a, &all); err != nil {
		t.Fatal(err)
	}
	inj := r.topo.Injector(r.a)
	sendAll(t, r.sender, f, inj)
	waitFor(t, inj, 5*time.Second, "first batch", func(c impair.Counters) bool { return c.Received == uint64(f.n) })
	if got := receive(t, r.receiver, 0, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("drop 1: %d arrived", len(got))
	}

	if err := r.topo.SetFaults(r.a, &impair.Config{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if r.topo.Injector(r.a) != inj {
		t.Fatal("SetFaults replaced the injector instead of updating it")
	}
	sendAll(t, r.sender, f, inj)
	if got := receive(t, r.receiver, f.n, 2*time.Second); len(got) != f.n {
		t.Fatalf("rates 0: %d of %d arrived", len(got), f.n)
	}
	if c := inj.Counters(); c.Received != uint64(2*f.n) || c.Dropped != uint64(f.n) {
		t.Fatalf("counters after update: %+v", c)
	}

	port := r.a.PeerLink
	if err := r.topo.SetFaults(r.a, nil); err != nil {
		t.Fatal(err)
	}
	if r.topo.Injector(r.a) != nil {
		t.Fatal("injector still registered after SetFaults(nil)")
	}
	checkNoLeftovers(t, r.topo.Wire, port)
	sendAll(t, r.sender, f, nil)
	if got := receive(t, r.receiver, f.n, 2*time.Second); len(got) != f.n {
		t.Fatalf("detached: %d of %d arrived", len(got), f.n)
	}
}

// checkNoLeftovers: no helper links, no tc filter and no clsact qdisc of
// the injector remain in the wire namespace.
func checkNoLeftovers(t *testing.T, wire *netns.Namespace, port string) {
	t.Helper()
	err := wire.Do(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "imp") {
				t.Errorf("helper link %s left behind", l.Attrs().Name)
			}
		}
		p, err := netlink.LinkByName(port)
		if err != nil {
			return err
		}
		qdiscs, err := netlink.QdiscList(p)
		if err != nil {
			return err
		}
		for _, q := range qdiscs {
			if q.Type() == "clsact" {
				t.Errorf("clsact left on %s", port)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAttachErrors(t *testing.T) {
	topo := netns.New(t, netns.Config{})
	a := topo.Hosts[0]
	err := topo.Wire.Do(func() error {
		if _, err := impair.Attach("nosuchlink0", impair.Config{}); err == nil {
			t.Error("attach to a missing interface succeeded")
		}
		if _, err := impair.Attach(a.PeerLink, impair.Config{Drop: 2}); !errors.Is(err, impair.ErrBadConfig) {
			t.Errorf("bad config: %v", err)
		}
		inj, err := impair.Attach(a.PeerLink, impair.Config{})
		if err != nil {
			return err
		}
		if _, err := impair.Attach(a.PeerLink, impair.Config{}); !errors.Is(err, impair.ErrBusy) {
			t.Errorf("second attach: %v, want ErrBusy", err)
		}
		if err := inj.Update(impair.Config{Reorder: -1}); !errors.Is(err, impair.ErrBadConfig) {
			t.Errorf("bad update: %v", err)
		}
		if err := inj.Close(); err != nil {
			return err
		}
		if err := inj.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkNoLeftovers(t, topo.Wire, a.PeerLink)
	if err := topo.SetFaults(&netns.Host{}, &impair.Config{}); !errors.Is(err, netns.ErrNoHost) {
		t.Errorf("SetFaults on a foreign host: %v", err)
	}
	direct := netns.New(t, netns.Config{Kind: netns.Direct})
	if err := direct.SetFaults(direct.Hosts[0], &impair.Config{}); !errors.Is(err, netns.ErrNoWire) {
		t.Errorf("SetFaults on Direct: %v", err)
	}
}

// TestDetach removes the leftovers of an injector whose process died; the
// plain path works again.
func TestDetach(t *testing.T) {
	f := flow{n: 100, size: 100}
	r := newRun(t, f, netns.Config{})
	if err := r.topo.SetFaults(r.a, &impair.Config{}); err != nil {
		t.Fatal(err)
	}
	inj := r.topo.Injector(r.a)
	if err := r.topo.Wire.Do(func() error { return impair.Detach(r.a.PeerLink) }); err != nil {
		t.Fatal(err)
	}
	sendAll(t, r.sender, f, nil)
	if got := receive(t, r.receiver, f.n, 2*time.Second); len(got) != f.n {
		t.Fatalf("after Detach: %d of %d arrived", len(got), f.n)
	}
	if c := inj.Counters(); c.Diverted != 0 {
		t.Fatalf("diverted after Detach: %+v", c)
	}
	// Closing the orphaned injector afterwards is harmless.
	if err := r.topo.SetFaults(r.a, nil); err != nil {
		t.Fatal(err)
	}
}

// TestTopologyFaults: Config.Faults impairs every host's direction, each
// with its own seed.
func TestTopologyFaults(t *testing.T) {
	f := flow{n: 400, size: 100}
	cfg := impair.Config{Drop: 0.2, Seed: 100, LogLimit: f.n}
	r := newRun(t, f, netns.Config{Faults: &cfg})
	injA, injB := r.topo.Injector(r.a), r.topo.Injector(r.b)
	if injA == nil || injB == nil {
		t.Fatal("Config.Faults did not attach an injector per host")
	}
	if injA.Config().Seed != 100 || injB.Config().Seed != 101 {
		t.Fatalf("seeds %d, %d; want 100, 101", injA.Config().Seed, injB.Config().Seed)
	}
	sendAll(t, r.sender, f, injA)
	c := waitFor(t, injA, 5*time.Second, "all received", func(c impair.Counters) bool { return c.Received == uint64(f.n) })
	if got := receive(t, r.receiver, int(c.Sent), 2*time.Second); uint64(len(got)) != c.Sent || c.Sent+c.Dropped != uint64(f.n) {
		t.Fatalf("received %d, counters %+v", len(got), c)
	}
	if c := injB.Counters(); c.Received != 0 {
		t.Fatalf("B's injector saw A's traffic: %+v", c)
	}
}
