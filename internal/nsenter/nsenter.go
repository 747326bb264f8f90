// Package nsenter runs code in another network namespace: the one place
// xdproce switches an OS thread's namespace.
package nsenter

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn with the calling goroutine locked to its OS thread and that
// thread in namespace ns, then switches the thread back. Sockets, XDP
// attachments and netlink handles created inside fn belong to ns for good
// and may be used from any goroutine afterwards; goroutines fn starts do
// not inherit it. If switching back fails the thread stays locked, so the
// runtime discards it when the goroutine exits instead of reusing a thread
// in the wrong namespace.
func Do(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("nsenter: current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("nsenter: entering namespace: %w", err)
	}
	defer func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}
