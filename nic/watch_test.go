package nic

import (
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// doorbellPair is a daemon's end of a client's doorbell (a stream socket
// shut for writing, as ipc.NewRawDoorbell makes it) and the client's, and
// a function that closes the client's (once; the test's end does too).
func doorbellPair(t *testing.T) (own, client int, closeClient func()) {
	t.Helper()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Shutdown(p[0], unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeClient = func() { once.Do(func() { unix.Close(p[1]) }) }
	t.Cleanup(func() {
		unix.Close(p[0])
		closeClient()
	})
	return p[0], p[1], closeClient
}

// TestWatch: a watched descriptor's ring ends a Wait once, and the Wait
// reads what it holds (the next Wait sleeps its time); a client that closes
// its end is let go of, so its end of file does not end every Wait; an
// unwatched descriptor is neither waited on nor read. Both ways of
// waiting: parked in Go's poller and blocking the thread.
func TestWatch(t *testing.T) {
	for _, thread := range []bool{false, true} {
		name := "poller"
		if thread {
			name = "thread"
		}
		t.Run(name, func(t *testing.T) {
			l, err := newFrameLink(nil, 1514)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := l.Close(); err != nil {
					t.Error(err)
				}
			}()
			l.SetThreadWait(thread)
			took := func(d time.Duration) time.Duration {
				start := time.Now()
				l.Wait(d)
				return time.Since(start)
			}
			own, client, closeClient := doorbellPair(t)
			if err := l.Watch(own); err != nil {
				t.Fatal(err)
			}
			if err := l.Watch(own); !errors.Is(err, unix.EEXIST) {
				t.Fatalf("watching fd %d twice: %v, want EEXIST", own, err)
			}
			if d := took(30 * time.Millisecond); d < 25*time.Millisecond {
				t.Fatalf("a Wait with nothing rung returned after %v", d)
			}
			ring := func(fd int) {
				t.Helper()
				if _, err := unix.Write(fd, []byte{1}); err != nil {
					t.Fatal(err)
				}
			}
			ring(client)
			ring(client)
			if d := took(5 * time.Second); d > time.Second {
				t.Fatalf("a Wait after the watched doorbell rang took %v", d)
			}
			if n := l.WatchWakes(); n != 1 {
				t.Fatalf("WatchWakes %d after one Wait a ring ended, want 1", n)
			}
			var b [8]byte
			if n, err := unix.Read(own, b[:]); !errors.Is(err, unix.EAGAIN) {
				t.Fatalf("the doorbell still held %d bytes after the Wait (%v): it was not drained", n, err)
			}
			if d := took(30 * time.Millisecond); d < 25*time.Millisecond {
				t.Fatalf("the next Wait returned after %v: two rings drained ended two Waits", d)
			}

			// Unwatched: a ring neither ends a Wait nor is read.
			if err := l.Unwatch(own); err != nil {
				t.Fatal(err)
			}
			ring(client)
			if d := took(30 * time.Millisecond); d < 25*time.Millisecond {
				t.Fatalf("an unwatched doorbell ended a Wait after %v", d)
			}
			if n, err := unix.Read(own, b[:]); n != 1 || err != nil {
				t.Fatalf("reading the unwatched doorbell: %d, %v: the link read it", n, err)
			}

			// The client closes its end: the link lets go of the descriptor.
			if err := l.Watch(own); err != nil {
				t.Fatal(err)
			}
			closeClient()
			l.Wait(time.Second) // ends at the end of file
			if n := l.Watching(); n != 0 {
				t.Fatalf("the link watches %d descriptors after the only one's end of file", n)
			}
			if d := took(30 * time.Millisecond); d < 25*time.Millisecond {
				t.Fatalf("a Wait after the client closed its doorbell returned after %v: the end of file wakes it for ever", d)
			}
			if err := l.Unwatch(own); err != nil {
				t.Fatalf("Unwatch after the link let go: %v", err)
			}
			if thread && l.set != nil {
				t.Fatal("a link waiting in its thread put its wait set in Go's poller: every wakeup would wake the poller's thread too")
			}
		})
	}
}
