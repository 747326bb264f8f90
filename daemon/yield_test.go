package daemon

import (
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/verbs"
)

// TestAttachedPollYields: a Go client of the daemon polling an empty CQ
// gives its thread's processor up every eighth poll, as the C library does:
// the daemon's engine, another process's thread, must run to make the
// completion. The poller and a thread that only yields share one CPU; each
// yield of the poller's then hands the CPU over, an involuntary context
// switch of the poller's thread (getrusage RUSAGE_THREAD). 800 empty polls
// take microseconds: without yields the thread is rarely switched out.
func TestAttachedPollYields(t *testing.T) {
	tb := newTestbed(t)
	d := tb.dial(t)
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var orig, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for !orig.IsSet(cpu) {
		cpu++
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.SchedSetaffinity(0, &orig); err != nil {
			t.Error(err)
		}
	}()
	stop, ready := make(chan struct{}), make(chan error, 1)
	go func() {
		// The thread stays locked: it exits with the goroutine, its
		// affinity with it.
		runtime.LockOSThread()
		ready <- unix.SchedSetaffinity(0, &one)
		for {
			select {
			case <-stop:
				return
			default:
				_, _, _ = syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
	}()
	defer close(stop)
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	switches := func() int64 {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
			t.Fatal(err)
		}
		return ru.Nivcsw
	}
	// On a loaded machine the scheduler may let a yield return at once
	// (other CPUs' work, the skip buddy passed over): a few tries. Without
	// the yields no try comes near, since 800 polls take microseconds.
	var wc [1]verbs.WorkCompletion
	var got []int64
	for range 5 {
		before := switches()
		for range 800 {
			if n := cq.Poll(wc[:]); n != 0 {
				t.Fatalf("an empty CQ polled %d completions", n)
			}
		}
		n := switches() - before
		if n >= 50 {
			return
		}
		got = append(got, n)
	}
	t.Fatalf("800 empty polls switched the poller's thread out %v times in 5 tries, want about 100 (one yield every 8 polls)", got)
}
