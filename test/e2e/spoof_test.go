package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/impair/spoof"
	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// spoofRound runs every RC operation once from req to resp and checks every
// byte and atomic result: WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM, READ,
// COMPARE_SWAP and FETCH_ADD. The receive completions of the SENDs, which
// come after the WRITE on the same QP, show it was placed.
func spoofRound(t *testing.T, req, resp *rnic, round int) {
	t.Helper()
	const n = 16 << 10
	src, dst := req.mr.Bytes(), resp.mr.Bytes()
	msgPattern(src[:n], round)
	msgPattern(dst[1<<20:1<<20+n], round+1000)                // what READ fetches
	binary.LittleEndian.PutUint64(dst[2<<20:], uint64(round)) // the atomic target
	if _, err := resp.qp.PostRecv([]verbs.RecvWR{
		{ID: 1, SGList: sgl(resp.mr, 3<<20, 64)},
		{ID: 2, SGList: sgl(resp.mr, 3<<20+64, n)},
		{ID: 3, SGList: sgl(resp.mr, 3<<20+64+n, 64)},
	}); err != nil {
		t.Fatal(err)
	}
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.WRRDMAWrite, SGList: sgl(req.mr, 0, n), RemoteAddr: resp.mr.Addr(), RKey: resp.mr.RKey()},
		{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, SGList: sgl(req.mr, 0, 100), RemoteAddr: resp.mr.Addr() + n, RKey: resp.mr.RKey(), ImmData: uint32(round)},
		{ID: 3, Opcode: verbs.WRSend, SGList: sgl(req.mr, 0, n)},
		{ID: 4, Opcode: verbs.WRSendWithImm, SGList: sgl(req.mr, 8, 40), ImmData: uint32(round) + 1},
		{ID: 5, Opcode: verbs.WRRDMARead, SGList: sgl(req.mr, 1<<20, n), RemoteAddr: resp.mr.Addr() + 1<<20, RKey: resp.mr.RKey()},
		{ID: 6, Opcode: verbs.WRAtomicCmpAndSwp, SGList: sgl(req.mr, 2<<20, 8), RemoteAddr: resp.mr.Addr() + 2<<20, RKey: resp.mr.RKey(), CompareAdd: uint64(round), Swap: uint64(round) + 10},
		{ID: 7, Opcode: verbs.WRAtomicFetchAdd, SGList: sgl(req.mr, 2<<20+8, 8), RemoteAddr: resp.mr.Addr() + 2<<20, RKey: resp.mr.RKey(), CompareAdd: 5},
	}
	for i := range wrs {
		wrs[i].Flags = verbs.SendSignaled
	}
	if _, err := req.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i, wc := range waitWC(t, req.scq, len(wrs), 20*time.Second) {
		if wc.WRID != uint64(i+1) {
			t.Fatalf("round %d: completion %d is WR %d", round, i, wc.WRID)
		}
	}
	rwc := waitWC(t, resp.rcq, 3, 20*time.Second)
	if rwc[0].ImmData != uint32(round) || rwc[1].ByteLen != n || rwc[2].ImmData != uint32(round)+1 {
		t.Fatalf("round %d: receive completions %+v", round, rwc)
	}
	switch {
	case !bytes.Equal(dst[:n], src[:n]):
		t.Fatalf("round %d: WRITE data differs", round)
	case !bytes.Equal(dst[3<<20+64:3<<20+64+n], src[:n]):
		t.Fatalf("round %d: SEND data differs", round)
	case !bytes.Equal(src[1<<20:1<<20+n], dst[1<<20:1<<20+n]):
		t.Fatalf("round %d: READ data differs", round)
	case binary.LittleEndian.Uint64(src[2<<20:]) != uint64(round) || binary.LittleEndian.Uint64(src[2<<20+8:]) != uint64(round)+10 ||
		binary.LittleEndian.Uint64(dst[2<<20:]) != uint64(round)+15:
		t.Fatalf("round %d: atomics returned %d, %d and left %d", round, binary.LittleEndian.Uint64(src[2<<20:]),
			binary.LittleEndian.Uint64(src[2<<20+8:]), binary.LittleEndian.Uint64(dst[2<<20:]))
	}
}

// TestSpoofedFramesDuringEveryOperation is the attacker's test of issue 12.
// Three namespaces share a hub: a and b run xdproce, x runs the spoofer
// (package impair/spoof), which sees their traffic and forges frames
// impersonating one of them towards the other — blind, at the window
// edges, inside the window in the wrong shape, and malformed — during a
// byte-verified transfer of every RC operation, a→b then b→a, each peer
// spoofed in turn. Every transfer completes right; the victims count what
// they dropped; afterwards no goroutine, UMEM frame (Device.Close checks)
// or heap memory is left behind.
func TestSpoofedFramesDuringEveryOperation(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Bridge, Hub: true, MTU: 1500, Queues: 1, StaticNeighbors: true,
		Hosts: []netns.HostConfig{{Name: "a"}, {Name: "b"}, {Name: "x"}}})
	ha, hb, hx := topo.Hosts[0], topo.Hosts[1], topo.Hosts[2]
	runtime.GC()
	before := runtime.NumGoroutine()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	heapBefore := mem.HeapAlloc
	var sent [2]spoof.Stats
	t.Run("attack", func(t *testing.T) {
		a, b := openRNIC(t, ha, 4<<20), openRNIC(t, hb, 4<<20)
		connectRC(t, a, b, verbs.MTU1024, 12)
		hosts := map[*rnic]*netns.Host{a: ha, b: hb}
		round := 0
		for _, dir := range [][2]*rnic{{a, b}, {b, a}} {
			for vi, victim := range dir {
				peer := dir[1-vi]
				sp, err := spoof.New(spoof.Config{
					Victim:    spoof.Endpoint{MAC: hosts[victim].MAC, IP: hosts[victim].Addr},
					Peer:      spoof.Endpoint{MAC: hosts[peer].MAC, IP: hosts[peer].Addr},
					VictimQPN: victim.qp.QPN(), PMTU: 1024, Seed: uint64(round + 1),
				})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				var runErr error
				wg.Go(func() {
					runErr = hx.Do(func() error { return sp.Run(ctx, hx.Link, 100*time.Microsecond) })
				})
				for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); round++ {
					spoofRound(t, dir[0], dir[1], round)
				}
				cancel()
				wg.Wait()
				if runErr != nil {
					t.Fatal(runErr)
				}
				st := sp.Stats()
				for c := range st.Sent {
					sent[vi].Sent[c] += st.Sent[c]
				}
				t.Logf("%s→%s, spoofing %s towards %s: %v", hosts[dir[0]].Name, hosts[dir[1]].Name, hosts[peer].Name, hosts[victim].Name, st)
				for _, c := range []spoof.Class{spoof.Blind, spoof.Edges, spoof.InWindow, spoof.Malformed} {
					if st.Sent[c] == 0 {
						t.Errorf("the spoofer sent no %s frame", c)
					}
				}
			}
		}
		for _, r := range []*rnic{a, b} {
			c, err := r.dev.Counters()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s counters: %v", hosts[r].Name, c.Named())
			if r.qp.State() != verbs.StateRTS {
				t.Errorf("%s's QP in %v", hosts[r].Name, r.qp.State())
			}
			if c.DroppedMalformed == 0 || c.DroppedBadPKey == 0 || c.ResponseOutOfWindow == 0 || c.DuplicateRequest+c.OutOfSeqRequest == 0 {
				t.Errorf("%s: the forged frames were not all counted where expected: %v", hosts[r].Name, c)
			}
		}
		t.Logf("%d rounds of every operation", round)
	})
	// The devices closed with the subtest: their goroutines must be gone.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the devices closed, %d before", n, before)
	}
	// Nor the memory of thousands of rounds: what is left is the loaded
	// BPF objects' and netlink caches' few MiB, not a leak per round.
	runtime.GC()
	runtime.ReadMemStats(&mem)
	if grown := int64(mem.HeapAlloc) - int64(heapBefore); grown > 32<<20 {
		t.Errorf("the heap grew by %d MiB over the attack", grown>>20)
	} else {
		t.Logf("heap %+d KiB after the devices closed", grown>>10)
	}
}

// TestSpoofedExactHits documents the limit: a forged request at exactly the
// PSN the victim's responder expects, naming a key it does not have, cannot
// be told from the peer's (RoCEv2 has no authentication). The victim does
// what IBTA says for such a request: it NAKs it with a remote access error,
// its QP goes to the error state, and the peer's next operation fails.
func TestSpoofedExactHits(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Bridge, Hub: true, MTU: 1500, Queues: 1, StaticNeighbors: true,
		Hosts: []netns.HostConfig{{Name: "a"}, {Name: "b"}, {Name: "x"}}})
	ha, hb, hx := topo.Hosts[0], topo.Hosts[1], topo.Hosts[2]
	a, b := openRNIC(t, ha, 4<<20), openRNIC(t, hb, 4<<20)
	connectRC(t, a, b, verbs.MTU1024, 12)
	spoofRound(t, a, b, 0)
	sp, err := spoof.New(spoof.Config{
		Victim: spoof.Endpoint{MAC: hb.MAC, IP: hb.Addr}, Peer: spoof.Endpoint{MAC: ha.MAC, IP: ha.Addr},
		VictimQPN: b.qp.QPN(), PMTU: 1024, Classes: []spoof.Class{spoof.Exact}, ExactHits: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = hx.Do(func() error { return sp.Run(ctx, hx.Link, time.Millisecond) }) })
	// a keeps WRITEing while the spoofer watches and strikes; their
	// completions stop mattering once b's QP is in error.
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]verbs.WorkCompletion, 16)
	for b.qp.State() != verbs.StateErr && time.Now().Before(deadline) {
		if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(a.mr, 0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}); err != nil {
			break
		}
		for i := 0; i < 1000 && a.scq.Poll(buf) == 0; i++ {
			time.Sleep(20 * time.Microsecond)
		}
	}
	cancel()
	wg.Wait()
	if st := b.qp.State(); st != verbs.StateErr {
		t.Fatalf("b's QP in %v after %v: the exact hit was refused", st, sp.Stats())
	}
	t.Logf("b's QP went to ERR after %v", sp.Stats())
}
