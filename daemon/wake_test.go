package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// wakeBed is a daemon serving a device on a veth in a namespace of its
// own, as xdproce up runs it (AF_XDP, engines that sleep when idle), and a
// raw client of it: its doorbell and the doorbell page.
type wakeBed struct {
	dev  *verbs.Device
	c    *ipc.Conn
	bell int    // the client's end of its doorbell (engine 0's)
	page []byte // the doorbell page, mapped read-only as a client maps it
}

func newWakeBed(t *testing.T) *wakeBed { return newWakeBedQueues(t, 1) }

// newWakeBedQueues is newWakeBed on a veth of queues queues: a device of
// that many engines.
func newWakeBedQueues(t *testing.T, queues int) *wakeBed {
	t.Helper()
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: queues})
	h := topo.Hosts[0]
	wb := &wakeBed{}
	err := h.Do(func() error {
		var err error
		wb.dev, err = verbs.Open(t.Context(), h.Link, verbs.Options{Embedded: true, ThreadWait: true})
		return err
	})
	if err != nil {
		t.Fatalf("open %s: %v", h.Link, err)
	}
	t.Cleanup(func() {
		if err := wb.dev.Close(); err != nil {
			t.Errorf("close %s: %v", h.Link, err)
		}
	})
	if wb.dev.Engines() != queues {
		t.Fatalf("%d engines on a veth of %d queues", wb.dev.Engines(), queues)
	}
	var r [6]byte
	rand.Read(r[:])
	name := "test-" + hex.EncodeToString(r[:])
	srv, err := New(Config{Ifname: name, Device: wb.dev, Group: -1, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	dctx, dcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer dcancel()
	c, err := ipc.Dial(dctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	wb.c = c
	_, _, fds, err := c.Hello()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ipc.CloseAll(fds) })
	wb.bell = fds[1]
	wb.page, err = unix.Mmap(fds[0], 0, uverbs.DoorbellPageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(wb.page) })
	return wb
}

// counters are the one engine's.
func (wb *wakeBed) counters(t *testing.T) verbs.Counters { return wb.engineCounters(t)[0] }

// engineCounters are each engine's.
func (wb *wakeBed) engineCounters(t *testing.T) []verbs.Counters {
	t.Helper()
	q, err := wb.dev.QueueCounters()
	if err != nil || len(q) != wb.dev.Engines() {
		t.Fatalf("queue counters: %d queues, %v", len(q), err)
	}
	return q
}

// asleep waits until the engine says in the doorbell page that it sleeps.
func (wb *wakeBed) asleep(t *testing.T) { wb.sleepAfter(t, 0) }

// sleepAfter waits until the engine sleeps a sleep other than number n (0:
// any) and returns its number: the engine has then finished what woke it
// from sleep n, which a page that only said "asleep" could not tell from
// a wakeup the engine's thread has yet to run for (on a loaded host, for
// tens of milliseconds).
func (wb *wakeBed) sleepAfter(t *testing.T, n uint32) uint32 { return wb.engineSleepAfter(t, 0, n) }

// engineSleepAfter is sleepAfter for engine e.
func (wb *wakeBed) engineSleepAfter(t *testing.T, e, n uint32) uint32 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if s := uverbs.SleepNumber(wb.page, e); s != 0 && s != n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle engine %d does not sleep again after sleep %d", e, n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// ring rings the doorbell as the C library does when it finds the engine
// asleep.
func (wb *wakeBed) ring(t *testing.T) { ringFD(t, wb.bell) }

func ringFD(t *testing.T, fd int) {
	t.Helper()
	if _, err := unix.SendmsgN(fd, []byte{1}, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); err != nil {
		t.Fatal(err)
	}
}

// doorbell asks the daemon for the client's doorbell of engine e.
func (wb *wakeBed) doorbell(e uint32) (int, error) {
	_, fds, err := wb.c.Call(uverbs.OpDoorbell, func(enc *uverbs.Encoder) { enc.Put(&uverbs.Doorbell{Engine: e}) })
	if err != nil {
		return -1, err
	}
	if len(fds) != 1 {
		ipc.CloseAll(fds)
		return -1, fmt.Errorf("DOORBELL reply with %d fds", len(fds))
	}
	return fds[0], nil
}

// TestEachEngineWaitsOnItsOwnDoorbells: on a device of several engines each
// engine waits on its own clients' doorbells itself: a ring of the
// client's doorbell for engine 1 ends a sleep of engine 1 (its
// doorbell_wakes) and of no other (engine 0 wakes only for the counters
// read, a control operation, which wakes every engine once), with no
// goroutine relaying it to all of them. A client gets each engine's
// doorbell once, and none of an engine the device does not have.
func TestEachEngineWaitsOnItsOwnDoorbells(t *testing.T) {
	wb := newWakeBedQueues(t, 2)
	for _, c := range []struct {
		engine uint32
		want   error
	}{{0, unix.EEXIST}, {2, unix.EINVAL}, {1 << 31, unix.EINVAL}} {
		if fd, err := wb.doorbell(c.engine); !errors.Is(err, c.want) {
			if err == nil {
				unix.Close(fd)
			}
			t.Fatalf("DOORBELL of engine %d: %v, want %v", c.engine, err, c.want)
		}
	}
	bell1, err := wb.doorbell(1)
	if err != nil {
		t.Fatalf("DOORBELL of engine 1: %v", err)
	}
	t.Cleanup(func() { unix.Close(bell1) })
	if fd, err := wb.doorbell(1); !errors.Is(err, unix.EEXIST) {
		if err == nil {
			unix.Close(fd)
		}
		t.Fatalf("DOORBELL of engine 1 again: %v, want EEXIST", err)
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		a0, b0 := wb.engineSleepAfter(t, 0, 0), wb.engineSleepAfter(t, 1, 0)
		before := wb.engineCounters(t) // wakes both engines once
		a1, b1 := wb.engineSleepAfter(t, 0, a0), wb.engineSleepAfter(t, 1, b0)
		ringFD(t, bell1)
		b2 := wb.engineSleepAfter(t, 1, b1)
		time.Sleep(50 * time.Millisecond) // engine 0 would have woken by now
		a2 := uverbs.SleepNumber(wb.page, 0)
		after := wb.engineCounters(t)
		if a1 != a0+1 || b1 != b0+1 || b2 != b1+1 || a2 != a1 {
			if attempt < attempts {
				t.Logf("attempt %d: engine 0 slept %d, %d, %d, engine 1 %d, %d, %d: a wakeup besides the read's and the ring's; again", attempt, a0, a1, a2, b0, b1, b2)
				continue
			}
			t.Fatalf("in %d attempts the engines never slept once per wakeup: engine 0 %d, %d, %d, engine 1 %d, %d, %d", attempts, a0, a1, a2, b0, b1, b2)
		}
		if d := after[1].DoorbellWakes - before[1].DoorbellWakes; d != 1 {
			t.Errorf("engine 1's doorbell_wakes rose by %d for one ring of its doorbell, want 1", d)
		}
		if d := after[1].EngineWakeups - before[1].EngineWakeups; d != 2 {
			t.Errorf("engine 1's engine_wakeups rose by %d for a counters read and a ring, want 2", d)
		}
		if d := after[0].DoorbellWakes - before[0].DoorbellWakes; d != 0 {
			t.Errorf("engine 0's doorbell_wakes rose by %d for a ring of engine 1's doorbell, want 0", d)
		}
		if d := after[0].EngineWakeups - before[0].EngineWakeups; d != 1 {
			t.Errorf("engine 0's engine_wakeups rose by %d for a counters read and a ring of engine 1's doorbell, want 1", d)
		}
		return
	}
}

// TestDoorbellWakesEngineDirectly: a client's ring wakes the default
// daemon's sleeping engine in one hop — the engine waits on the client's
// doorbell itself (doorbell_wakes), no goroutine reads it and then wakes
// the engine — once per ring (engine_wakeups), and the engine goes back to
// sleep and stays asleep while nothing happens. Each step waits for the
// engine's next sleep (its number in the doorbell page), not for a time,
// so a loaded host only slows it; a sleep that ended for another reason
// (the engine's safety net, a sleep cut short by a wakeup that then ends
// the next one at once) shows as a sleep too many, and only then is the
// count taken again.
func TestDoorbellWakesEngineDirectly(t *testing.T) {
	wb := newWakeBed(t)
	const attempts = 5
	for attempt := 1; ; attempt++ {
		s0 := wb.sleepAfter(t, 0)
		// A first ring, so that the engine's next sleep starts afresh: its
		// safety net (a wakeup a second, transport.quietWait) is then far off.
		wb.ring(t)
		s1 := wb.sleepAfter(t, s0)
		// Reading the counters is a control operation, which rings the
		// engine once it is done: that wakeup counts in the difference too.
		before := wb.counters(t)
		s2 := wb.sleepAfter(t, s1)
		wb.ring(t)
		s3 := wb.sleepAfter(t, s2)
		time.Sleep(50 * time.Millisecond) // woken, then idle: nothing should wake it again
		stayed := uverbs.SleepNumber(wb.page, 0) == s3
		after := wb.counters(t)
		if s2 != s1+1 || s3 != s2+1 || !stayed {
			if attempt < attempts {
				t.Logf("attempt %d: sleeps %d, %d, %d, then %d: a wakeup besides the read's and the ring's; again", attempt, s1, s2, s3, uverbs.SleepNumber(wb.page, 0))
				continue
			}
			t.Fatalf("in %d attempts the engine never slept once per wakeup: sleeps %d, %d, %d (stayed asleep: %v)", attempts, s1, s2, s3, stayed)
		}
		if d := after.DoorbellWakes - before.DoorbellWakes; d != 1 {
			t.Errorf("doorbell_wakes rose by %d for one ring, want 1", d)
		}
		if d := after.EngineWakeups - before.EngineWakeups; d != 2 {
			t.Errorf("engine_wakeups rose by %d for one ring and a counters read, want 2", d)
		}
		return
	}
}

// TestDoorbellHangupDoesNotSpin: a client that closes its end of its
// doorbell (hostile, or exiting before its session ends) makes it readable
// for ever: the engine lets go of it instead of waking at every look.
func TestDoorbellHangupDoesNotSpin(t *testing.T) {
	wb := newWakeBed(t)
	wb.asleep(t)
	wb.ring(t)
	if err := unix.Close(wb.bell); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the end of file is seen
	wb.asleep(t)
	before := wb.counters(t) // a control operation: it rings the engine once
	time.Sleep(100 * time.Millisecond)
	if d := wb.counters(t).EngineWakeups - before.EngineWakeups; d > 2 {
		t.Fatalf("the engine woke %d times in 100 ms with nothing to do but a closed doorbell", d)
	}
}
