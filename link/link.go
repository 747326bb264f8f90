// Package link defines how a device's transport engine meets the network:
// whole Ethernet frames in batches, through a Link, and the optional
// interfaces a Link may also implement to spare the engine a copy. AF_XDP
// sockets (package nic) and in-memory pairs (package link/memlink)
// implement it, as gVisor's stack.LinkEndpoint has its fdbased and channel
// endpoints.
package link

import "time"

// Link is the engine's only view of the network: it sends and receives whole
// Ethernet frames. AF_XDP sockets implement it for real devices; memlink
// pairs do it in memory for tests.
type Link interface {
	// Send transmits the frames; they may be reused when Send returns.
	Send(frames [][]byte) error
	// Receive hands each frame that has arrived to fn, up to max frames,
	// without blocking, and returns how many it handed. A frame is valid only
	// during its call.
	Receive(max int, fn func(frame []byte)) (int, error)
	// Wait blocks until a frame may be ready, Wake is called, or d passes.
	Wait(d time.Duration)
	// Wake makes a Wait in progress, or the next one, return at once. Any
	// goroutine may call it: it is the device's doorbell.
	Wake()
	// MaxFrame is the largest frame Send accepts.
	MaxFrame() int
}

// FrameLender is a Link that lends its own transmit buffers, so the engine
// builds each frame where the NIC reads it (for AF_XDP, in UMEM) instead of
// building it aside and having Send copy it.
type FrameLender interface {
	// TXBuffer returns a buffer of at least MaxFrame bytes for the next
	// frame, or nil when none is free.
	TXBuffer() []byte
	// CommitTX queues the frame of n bytes built in the last TXBuffer.
	CommitTX(n int)
	// FlushTX transmits the committed frames.
	FlushTX() error
}

// ReleaseHooker is a Link whose received frames stay valid until the end
// of the receive call; the hook runs just before they are released, so that
// an engine can act on the whole batch while its frames are still there.
type ReleaseHooker interface{ SetReleaseHook(func()) }

// SplitReceiver is a Link that can hand a frame over in the pieces it
// arrived in (AF_XDP multi-buffer) rather than gathered.
type SplitReceiver interface {
	ReceiveSplit(max int, fn func(head, tail []byte)) (int, error)
}

// Watcher is a Link whose Wait also ends when another descriptor becomes
// readable: a daemon's client's doorbell, so that a ring wakes the engine
// itself rather than a goroutine that then wakes it. Wait reads and
// discards what a watched descriptor holds, and stops watching one at its
// end of file or error. Any goroutine may call Watch and Unwatch; the
// caller keeps fd open until Unwatch returns.
type Watcher interface {
	Watch(fd int) error
	Unwatch(fd int) error
	// WatchWakes counts the Waits a watched descriptor ended. Only the
	// goroutine that calls Wait may call it.
	WatchWakes() uint64
}

// RingDropper is a Link that counts frames its receive ring dropped.
type RingDropper interface{ RingDrops() uint64 }
