package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// meter is what a running load has moved so far; loads add to it from any
// goroutine and the measurement reads it at the window's edges.
type meter struct {
	bytes, msgs atomic.Int64
}

func (m *meter) add(msgs, size int) {
	m.msgs.Add(int64(msgs))
	m.bytes.Add(int64(msgs) * int64(size))
}

// load runs a workload until stop closes, adding what it moves to m, then
// finishes what is in flight and returns.
type load func(ctx context.Context, stop <-chan struct{}, m *meter) error

// window is what a load moved while it was measured.
type window struct {
	bytes, msgs int64
	elapsed     time.Duration
	cpu         time.Duration // process user+system plus all softirq time
}

func (w window) gbitPerSec() float64 { return float64(w.bytes) * 8 / w.elapsed.Seconds() / 1e9 }
func (w window) mmsgPerSec() float64 { return float64(w.msgs) / w.elapsed.Seconds() / 1e6 }

// cpuPerGB is CPU seconds per 10^9 bytes moved.
func (w window) cpuPerGB() float64 {
	if w.bytes == 0 {
		return 0
	}
	return w.cpu.Seconds() / (float64(w.bytes) / 1e9)
}

// drainTimeout bounds how long a load may take to finish what is in flight
// once stopped; a stuck transport fails the run instead of hanging it.
const drainTimeout = 30 * time.Second

// measureLoad starts l, lets it warm up, measures it for d, then stops it.
func measureLoad(ctx context.Context, warmup, d time.Duration, l load) (window, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var m meter
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- l(ctx, stop, &m) }()

	finished := false // done has been received
	stopAndWait := func() error {
		close(stop)
		select {
		case err := <-done:
			finished = true
			return err
		case <-time.After(drainTimeout):
			cancel()
			err := <-done
			finished = true
			return fmt.Errorf("bench: load did not finish within %v of being stopped (%v)", drainTimeout, err)
		}
	}
	// abort ends the load early after a failure and returns the failure.
	abort := func(err error) (window, error) {
		if !finished {
			cancel()
			close(stop)
			<-done
		}
		return window{}, err
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case err := <-done:
			finished = true
			if err == nil {
				err = fmt.Errorf("bench: load ended before it was stopped")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(warmup); err != nil {
		return abort(err)
	}
	c0, err := sampleCPU()
	if err != nil {
		return abort(err)
	}
	b0, n0, t0 := m.bytes.Load(), m.msgs.Load(), time.Now()
	if err := sleep(d); err != nil {
		return abort(err)
	}
	b1, n1, t1 := m.bytes.Load(), m.msgs.Load(), time.Now()
	c1, err := sampleCPU()
	if err != nil {
		return abort(err)
	}
	if err := stopAndWait(); err != nil {
		return window{}, err
	}
	w := window{bytes: b1 - b0, msgs: n1 - n0, elapsed: t1.Sub(t0), cpu: c1.since(c0)}
	if w.msgs == 0 {
		return w, fmt.Errorf("bench: nothing moved in %v", w.elapsed.Round(time.Millisecond))
	}
	return w, nil
}
