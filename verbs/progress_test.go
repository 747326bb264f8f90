package verbs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// busyPair is pair() with busy-polling devices.
func busyPair(t *testing.T) (a, b *node) {
	t.Helper()
	la, lb := memlink.NewPair(4096 + 200)
	busy := DeviceConfig{ActiveMTU: 4096, BusyPoll: true}
	a = newNode(t, newDeviceWith(t, la, macA, ipA, busy), 1<<20)
	b = newNode(t, newDeviceWith(t, lb, macB, ipB, busy), 1<<20)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7, timeout: 14})
	return a, b
}

// Applications spinning on their CQs run the engines themselves, from
// several goroutines at once, and every byte arrives (run with -race).
func TestProgressFromPollers(t *testing.T) {
	a, b := busyPair(t)
	fill(a.mr.Bytes(), 3)
	const n, size = 2000, 512
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a second poller of B's device: competes for its engine
		defer wg.Done()
		wcs := make([]WorkCompletion, 4)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if b.rcq.Poll(wcs) > 0 {
				t.Error("B got a receive completion from WRITEs")
				return
			}
			if c, err := b.dev.Counters(); err != nil || c.RcvdPkts >= n {
				return
			}
		}
	}()
	wcs := make([]WorkCompletion, 64)
	done, posted := 0, 0
	drove := false
	for deadline := time.Now().Add(10 * time.Second); done < n; {
		for posted < n && posted-done < 32 {
			off := posted % 1024 * size
			postSend(t, a, SendWR{ID: uint64(posted), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGList: sge(a.mr, off, size), RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
			posted++
		}
		k := a.scq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		done += k
		drove = drove || a.dev.Progress()
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d WRITEs completed", done, n)
		}
	}
	wg.Wait()
	if !drove {
		t.Error("Progress never found work on a device under traffic")
	}
	equalBytes(t, "B's region", b.mr.Bytes()[:1024*size], a.mr.Bytes()[:1024*size])
}

// An application that drove the engine and then sleeps in CQ.Wait is
// woken by the next completion: the engine's goroutine still runs.
func TestWaitAfterProgress(t *testing.T) {
	a, b := busyPair(t)
	wcs := make([]WorkCompletion, 1)
	for range 1000 {
		a.rcq.Poll(wcs) // drives A's engine
	}
	postRecv(t, a, RecvWR{ID: 7, SGList: sge(a.mr, 0, 64)})
	a.rcq.ReqNotify(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- a.rcq.Wait(ctx) }()
	postSend(t, b, SendWR{ID: 1, Opcode: WRSend, SGList: sge(b.mr, 0, 64)})
	if err := <-got; err != nil {
		t.Fatalf("no completion event: %v", err)
	}
	if k := a.rcq.Poll(wcs); k != 1 || wcs[0].WRID != 7 || wcs[0].Status != WCSuccess {
		t.Fatalf("receive completion %d %+v", k, wcs[0])
	}
}

// Progress on a closed device does nothing: the link is gone.
func TestProgressAfterClose(t *testing.T) {
	a, _ := busyPair(t)
	must(t, a.dev.Close())
	if a.dev.Progress() {
		t.Fatal("Progress ran a closed device's engine")
	}
	if a.scq.Poll(make([]WorkCompletion, 1)) != 0 {
		t.Fatal("completion from a closed device")
	}
}

// An engine's goroutine skips one round after an application ran one
// (Progress): once per drive, so it takes over again as soon as the
// application stops.
func TestEngineSkipsDrivenRound(t *testing.T) {
	a, _ := busyPair(t)
	n := nicOf(a.dev)
	seen := n.EngineDrives(0)
	if n.EngineDroveSince(0, &seen) {
		t.Fatal("no application drove, yet the engine would skip its round")
	}
	for deadline := time.Now().Add(5 * time.Second); n.EngineDrives(0) == seen; {
		a.dev.Progress() // may find the engine's goroutine mid-round
		if time.Now().After(deadline) {
			t.Fatal("Progress never ran a round")
		}
	}
	if !n.EngineDroveSince(0, &seen) {
		t.Fatal("an application drove, yet the engine would run its round too")
	}
	if n.EngineDroveSince(0, &seen) {
		t.Fatal("the engine would skip a second round for one drive")
	}
}
