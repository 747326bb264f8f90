package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	bell int    // the client's end of its doorbell
	page []byte // the doorbell page, mapped read-only as a client maps it
}

func newWakeBed(t *testing.T) *wakeBed {
	t.Helper()
	topo := netns.New(t, netns.Config{Kind: netns.Direct})
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
	if wb.dev.Engines() != 1 {
		t.Fatalf("%d engines on a veth of one queue", wb.dev.Engines())
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
func (wb *wakeBed) counters(t *testing.T) verbs.Counters {
	t.Helper()
	q, err := wb.dev.QueueCounters()
	if err != nil || len(q) != 1 {
		t.Fatalf("queue counters: %d queues, %v", len(q), err)
	}
	return q[0]
}

// asleep waits until the engine says in the doorbell page that it sleeps.
func (wb *wakeBed) asleep(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !uverbs.Sleeping(wb.page, 0); {
		if time.Now().After(deadline) {
			t.Fatal("the idle engine does not sleep")
		}
		time.Sleep(time.Millisecond)
	}
}

// ring rings the doorbell as the C library does when it finds the engine
// asleep.
func (wb *wakeBed) ring(t *testing.T) {
	t.Helper()
	if _, err := unix.SendmsgN(wb.bell, []byte{1}, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); err != nil {
		t.Fatal(err)
	}
}

// TestDoorbellWakesEngineDirectly: a client's ring wakes the default
// daemon's sleeping engine in one hop — the engine waits on the client's
// doorbell itself (doorbell_wakes), no goroutine reads it and then wakes
// the engine — once per ring (engine_wakeups), and the engine goes back to
// sleep and stays asleep while nothing happens.
func TestDoorbellWakesEngineDirectly(t *testing.T) {
	wb := newWakeBed(t)
	wb.asleep(t)
	// A first ring, so that the engine's next sleep starts afresh: its
	// safety net (a wakeup a second, transport.quietWait) is then far off.
	wb.ring(t)
	time.Sleep(20 * time.Millisecond)
	wb.asleep(t)
	// Reading the counters is a control operation, which rings the engine
	// once it is done: that wakeup counts in the difference too.
	before := wb.counters(t)
	time.Sleep(20 * time.Millisecond)
	wb.asleep(t)
	wb.ring(t)
	time.Sleep(50 * time.Millisecond) // woken, then idle: nothing should wake it again
	wb.asleep(t)
	after := wb.counters(t)
	if d := after.DoorbellWakes - before.DoorbellWakes; d != 1 {
		t.Errorf("doorbell_wakes rose by %d for one ring, want 1", d)
	}
	if d := after.EngineWakeups - before.EngineWakeups; d != 2 {
		t.Errorf("engine_wakeups rose by %d for one ring and a counters read, want 2", d)
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
