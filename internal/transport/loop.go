// Ways into the engines' loops from outside them: Progress, for
// applications that drive the engines themselves, and the watch of a
// daemon's client's doorbell.

package transport

import (
	"github.com/xdproce/xdproce/internal/ibv"
)

// WatchDoorbell has engine wait on fd, a daemon's client's doorbell for
// that engine, itself: a ring then wakes the sleeping engine in one hop,
// where a goroutine reading fd and then ringing the engine (Wake) takes
// two, each a thread the kernel must find a processor for. Each engine
// watches its own clients' doorbells, so a ring wakes only the engine that
// serves the QP. It reports false, and does nothing, when the engine
// cannot (a link that watches nothing: the caller then relays rings with
// Wake); an engine the device does not have is EINVAL. The caller keeps fd
// open until UnwatchDoorbell.
func (d *NIC) WatchDoorbell(engine, fd int) (bool, error) {
	if engine < 0 || engine >= len(d.dev.Shards) {
		return false, ibv.ErrInvalid
	}
	w := d.dev.Shards[engine].Watcher
	if w == nil {
		return false, nil
	}
	d.dev.WakeMu.RLock()
	defer d.dev.WakeMu.RUnlock()
	if d.dev.LinkGone {
		return false, ibv.ErrClosed
	}
	return true, w.Watch(fd)
}

// UnwatchDoorbell undoes WatchDoorbell: once it returns, the engine reads
// fd no more.
func (d *NIC) UnwatchDoorbell(engine, fd int) error {
	if engine < 0 || engine >= len(d.dev.Shards) {
		return ibv.ErrInvalid
	}
	w := d.dev.Shards[engine].Watcher
	if w == nil {
		return nil
	}
	d.dev.WakeMu.RLock()
	defer d.dev.WakeMu.RUnlock()
	if d.dev.LinkGone {
		return nil // the link and its watches are gone
	}
	return w.Unwatch(fd)
}

// Progress runs one round of each engine on the calling goroutine, unless
// another goroutine is running it, and reports whether there was work. An
// application that spins anyway (on a BusyPoll device's CQ, which calls
// Progress itself, or on memory, as ib_write_lat does) thereby moves its
// packets the moment they can move, instead of waiting for the engine's
// goroutine to get a processor: on a small machine that saves a scheduler
// hand-off each way. The engines' goroutines keep running, so an
// application that stops spinning stalls nothing.
func (d *NIC) Progress() bool {
	busy := false
	for _, e := range d.dev.Shards {
		if !e.Mu.TryLock() {
			continue
		}
		if !d.dev.Gone && e.Step() {
			busy = true
		}
		e.Mu.Unlock()
		e.Drives.Add(1)
	}
	return busy
}
