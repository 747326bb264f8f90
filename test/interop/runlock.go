package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// runLockPath is where a run holds its lock: the VMs' network namespace,
// bridge and host veth have fixed, machine-wide names, so two runs at once
// (two checkouts, CI beside a developer) tore each other's down.
const runLockPath = "/run/xdproce-interop.lock"

// acquireRunLock takes the machine's interop lock at path, waiting while
// another run holds it (saying so once through progress) until ctx ends.
// The lock goes with the process: release, or exiting, frees it.
func acquireRunLock(ctx context.Context, path string, progress func(string, ...any)) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("interop lock: %w", err)
	}
	said := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("interop lock %s: %w", path, err)
		}
		if !said {
			holder, _ := os.ReadFile(path)
			progress("waiting for another interop run to end (pid %s holds %s)", strings.TrimSpace(string(holder)), path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("interop lock %s: another run holds it: %w", path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	// Who holds it, for the next run's message; the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}
