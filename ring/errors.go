package ring

import "errors"

// Sentinel errors, testable with errors.Is. The data-path methods return
// them wrapped only on the (cold) error path.
var (
	// ErrDoubleRelease is returned when a Packet or TXFrame is handed back
	// that the caller does not hold: released or submitted twice, a stale
	// copy of a value already handed back, or a zero value.
	ErrDoubleRelease = errors.New("ring: frame released twice or not held by the caller")

	// ErrOutOfBounds is returned for a descriptor that does not lie inside
	// one UMEM chunk.
	ErrOutOfBounds = errors.New("ring: descriptor outside UMEM")

	// ErrFrameLength is returned by Submit for a TXFrame whose Len is zero,
	// negative or larger than its buffer (or, without MultiBuffer, larger
	// than one chunk).
	ErrFrameLength = errors.New("ring: bad TX frame length")

	// ErrRingFull is returned by Submit when the TX ring has no room for a
	// frame's descriptors. With the ring sizes Open chooses this cannot
	// happen; it guards against a kernel that does not consume.
	ErrRingFull = errors.New("ring: TX ring full")

	// ErrShortBuffer is returned by Packet.Bytes when the scratch buffer is
	// smaller than the packet.
	ErrShortBuffer = errors.New("ring: scratch buffer too small for packet")

	// ErrClosed is returned by methods of a closed Socket.
	ErrClosed = errors.New("ring: socket closed")

	// ErrConfig is wrapped by Open for an invalid Config.
	ErrConfig = errors.New("ring: invalid configuration")
)
