package verbs

import (
	"runtime"
	"testing"
	"time"
)

// waitOne spins until cq yields one completion (no sleeping, no timers:
// nothing here allocates) and returns it; ok is false after d.
func waitOne(cq *CQ, buf []WorkCompletion, d time.Duration) (WorkCompletion, bool) {
	deadline := time.Now().Add(d)
	for cq.Poll(buf[:1]) == 0 {
		if time.Now().After(deadline) {
			return WorkCompletion{}, false
		}
		runtime.Gosched()
	}
	return buf[0], true
}

// TestHotPathAllocationFree: in steady state a WRITE's and a SEND's whole
// cycle (post, both engines moving the packets and ACK over the in-memory
// link, which recycles its frame buffers, completions polled) allocates
// nothing: testing.AllocsPerRun counts every goroutine's allocations, so
// the two engines' included.
func TestHotPathAllocationFree(t *testing.T) {
	if testing.Short() {
		t.Skip("timing-sensitive")
	}
	a, b, _, _ := pair(t, connOpts{mtu: MTU4096, timeout: 14}, 1<<16)
	buf := make([]WorkCompletion, 1)
	for _, tc := range []struct {
		name string
		size int
	}{{"64 B", 64}, {"16 KiB (4 packets)", 16 << 10}} {
		write := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, tc.size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
		send := []SendWR{{Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, tc.size)}}
		recv := []RecvWR{{SGList: sge(b.mr, 0, tc.size)}}
		for _, op := range []struct {
			name  string
			cycle func() bool
		}{
			{"WRITE", func() bool {
				if _, err := a.qp.PostSend(write); err != nil {
					return false
				}
				wc, ok := waitOne(a.scq, buf, 5*time.Second)
				return ok && wc.Status == WCSuccess
			}},
			{"SEND", func() bool {
				if _, err := b.qp.PostRecv(recv); err != nil {
					return false
				}
				if _, err := a.qp.PostSend(send); err != nil {
					return false
				}
				wc, ok := waitOne(a.scq, buf, 5*time.Second)
				if !ok || wc.Status != WCSuccess {
					return false
				}
				wc, ok = waitOne(b.rcq, buf, 5*time.Second)
				return ok && wc.Status == WCSuccess
			}},
		} {
			t.Run(op.name+" "+tc.name, func(t *testing.T) {
				for range 200 { // warm-up: queues, CQ rings and link pools reach their size
					if !op.cycle() {
						t.Fatal("warm-up cycle failed")
					}
				}
				failed := false
				allocs := testing.AllocsPerRun(500, func() {
					if !op.cycle() {
						failed = true
					}
				})
				if failed {
					t.Fatal("a cycle failed")
				}
				if allocs != 0 {
					t.Fatalf("%.2f allocations per %s of %d bytes; want 0", allocs, op.name, tc.size)
				}
			})
		}
	}
}

// TestInlinePostNeedsNoEngine: an INLINE post copies its data into the
// QP's inline buffer on the caller's goroutine, without a round trip to the
// engine (held here, so a round trip would block) and without allocating;
// the data the peer receives is what was there at post time.
func TestInlinePostNeedsNoEngine(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	fill(a.mr.Bytes()[:64], 9)
	want := append([]byte(nil), a.mr.Bytes()[:64]...)
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendInline | SendSignaled, SGList: sge(a.mr, 0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	nicOf(a.dev).LockEngine(0)
	posted := make(chan error, 1)
	go func() { _, err := a.qp.PostSend(wr); posted <- err }()
	select {
	case err := <-posted:
		must(t, err)
	case <-time.After(2 * time.Second):
		nicOf(a.dev).UnlockEngine(0)
		t.Fatal("an inline post waited for the engine")
	}
	clear(a.mr.Bytes()[:64]) // the caller may reuse its buffer at once
	nicOf(a.dev).UnlockEngine(0)
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	equalBytes(t, "inline WRITE", b.mr.Bytes()[:64], want)

	buf := make([]WorkCompletion, 1)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if _, ok := waitOne(a.scq, buf, 5*time.Second); !ok {
			t.Fatal("no completion")
		}
	})
	if allocs != 0 {
		t.Fatalf("an inline WRITE cycle allocates %.1f times", allocs)
	}
}

// TestPostBurstNoAlloc: a post of more than a handful of WRs (a stream
// posts a burst per completion: 32 here) allocates nothing once the QP's
// post buffer has grown to it, in the API or in the provider, and the
// engine takes it whole.
func TestPostBurstNoAlloc(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	const burst = 32
	wrs := make([]SendWR, burst)
	for i := range wrs {
		wrs[i] = SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 64*i, 64), RemoteAddr: b.mr.Addr() + uint64(64*i), RKey: b.mr.RKey()}
	}
	buf := make([]WorkCompletion, burst)
	failed := false
	cycle := func() {
		if _, err := a.qp.PostSend(wrs); err != nil {
			failed = true
			return
		}
		for got := 0; got < burst; {
			wc, ok := waitOne(a.scq, buf[:1], 5*time.Second)
			if !ok || wc.Status != WCSuccess {
				failed = true
				return
			}
			got++
		}
	}
	for range 50 { // warm-up: queues, CQ rings and link pools reach their size
		cycle()
	}
	allocs := testing.AllocsPerRun(100, cycle)
	if failed {
		t.Fatal("a cycle failed")
	}
	if allocs != 0 {
		t.Fatalf("a post of %d WRITEs and their completions: %.2f allocations per cycle; want 0", burst, allocs)
	}
}
