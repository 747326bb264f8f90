package ring

import (
	"fmt"
	"log/slog"
	"math/bits"
	"time"
)

// Mode is how a socket moves frames between the driver and UMEM.
type Mode uint8

const (
	// ModeAuto tries zero-copy and falls back to copy mode, recording why
	// (Socket.ZeroCopyFallback).
	ModeAuto Mode = iota
	// ModeCopy binds with XDP_COPY: the kernel copies each frame.
	ModeCopy
	// ModeZeroCopy binds with XDP_ZEROCOPY and fails if the driver cannot.
	ModeZeroCopy
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeCopy:
		return "copy"
	case ModeZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Kernel limits this package is built around.
const (
	// MaxChunkSize is the largest UMEM chunk the kernel accepts in aligned
	// mode (one page; 8192 fails with EINVAL even hugepage-backed).
	MaxChunkSize = 4096
	// MinChunkSize is the kernel's XDP_UMEM_MIN_CHUNK_SIZE.
	MinChunkSize = 2048
	// KernelHeadroom is XDP_PACKET_HEADROOM: the kernel places RX data this
	// far (plus Config.Headroom) into each chunk.
	KernelHeadroom = 256
	// MaxSegments is the most descriptors one received packet may span:
	// 1 + MAX_SKB_FRAGS (17), the kernel's own limit. Longer chains are
	// dropped and counted.
	MaxSegments = 18
	// MaxTXSegments is the most descriptors one transmitted frame may span
	// (MAX_SKB_FRAGS: more and the kernel drops the frame without
	// completing its descriptors, which would leak the frame).
	MaxTXSegments = 17
)

// Config sizes a socket and its UMEM. The zero value is usable: every zero
// field gets the default documented on it.
type Config struct {
	// ChunkSize is the UMEM chunk size, a power of two in
	// [MinChunkSize, MaxChunkSize]. Default 4096. One RX descriptor holds
	// at most ChunkSize - KernelHeadroom - Headroom bytes.
	ChunkSize int
	// Headroom is reserved in front of received data in each chunk, on top
	// of the kernel's own 256 bytes. Default 0.
	Headroom int
	// RXFrames is the number of chunks given to the kernel for receiving.
	// Default 2048.
	RXFrames int
	// TXFrames is the number of transmit buffers. Default 1024.
	TXFrames int
	// TXFrameSize is the largest frame Submit accepts; each transmit buffer
	// is this many bytes rounded up to whole chunks, contiguous, so a frame
	// is written linearly and sent as a chain of per-chunk descriptors.
	// Default ChunkSize, or 2*ChunkSize with MultiBuffer (RoCE path MTU
	// 4096 gives 4166-byte frames). More than ChunkSize needs MultiBuffer.
	TXFrameSize int
	// MultiBuffer binds with XDP_USE_SG: received frames longer than one
	// chunk arrive as a chain of descriptors instead of being dropped, and
	// Submit may send frames longer than one chunk.
	MultiBuffer bool
	// Mode selects copy or zero-copy. Default ModeAuto.
	Mode Mode
	// TXBudget sets XDP_MAX_TX_SKB_BUDGET, the frames the kernel sends per
	// copy-mode kick (kernel default 32). Default 256, capped at the TX
	// ring size; negative leaves the kernel default.
	TXBudget int
	// SendBuffer is the socket's send buffer (SO_SNDBUF) in bytes. In copy
	// mode every frame the kernel transmits is an skb charged to it until the
	// driver frees it, and a kick that finds it full sends nothing (EAGAIN):
	// the kernel's default (wmem_default, 208 KiB) holds about 45 frames of
	// 2 KiB, and a NIC that completes late (virtio-net in a guest) then
	// starves the sender. The buffer is also the only backpressure a kick
	// has: frames beyond what the link queues (veth's ring holds 256) are
	// dropped, not refused. Default: room for sendBufferFrames full frames
	// (2 × TXFrameSize + 1 KiB each, the skb's slab rounding and bookkeeping
	// included; the kernel doubles what it is given), set with
	// SO_SNDBUFFORCE, or SO_SNDBUF (capped by net.core.wmem_max) without
	// CAP_NET_ADMIN; negative leaves the kernel default.
	SendBuffer int
	// BindRetry bounds how long Open retries bind while the queue is busy
	// (a socket closed on the same queue is released asynchronously: EBUSY
	// for 1-35 ms, and for more than 500 ms once on a loaded CI machine,
	// when a daemon was restarted right after the old one exited). Default
	// 3 s; the context passed to Open can end it earlier.
	BindRetry time.Duration
	// Logger receives notes about optional features the kernel lacks.
	// Default slog.Default().
	Logger *slog.Logger
}

// sendBufferFrames is how many full frames the default SendBuffer lets a
// socket have in flight: three times the kernel default's, two kicks of a
// 6.1 kernel (32 frames each), and well inside veth's 256-frame ring.
const sendBufferFrames = 64

// geometry is a validated Config turned into sizes.
type geometry struct {
	chunkSize   uint64
	chunkShift  uint
	headroom    uint32
	rxFrames    uint32
	txFrames    uint32
	slotChunks  uint32 // chunks per TX buffer
	txChunks    uint32
	umemSize    uint64
	fillSize    uint32 // ring entries, powers of two
	compSize    uint32
	rxSize      uint32
	txSize      uint32
	multiBuffer bool
}

func (c Config) withDefaults() Config {
	if c.ChunkSize == 0 {
		c.ChunkSize = 4096
	}
	if c.RXFrames == 0 {
		c.RXFrames = 2048
	}
	if c.TXFrames == 0 {
		c.TXFrames = 1024
	}
	if c.TXFrameSize == 0 {
		c.TXFrameSize = c.ChunkSize
		if c.MultiBuffer {
			c.TXFrameSize = 2 * c.ChunkSize
		}
	}
	if c.TXBudget == 0 {
		c.TXBudget = 256
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = min(c.TXFrames, sendBufferFrames) * (2*c.TXFrameSize + 1024) / 2
	}
	if c.BindRetry == 0 {
		c.BindRetry = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// geometry validates c (defaults applied) and derives the sizes. Ring sizes
// are the next power of two of the frames that can be in them, so the fill,
// RX, TX and completion rings can never overflow: every entry names a
// distinct frame this socket owns.
func (c Config) geometry() (geometry, error) {
	bad := func(format string, args ...any) (geometry, error) {
		return geometry{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize || c.ChunkSize&(c.ChunkSize-1) != 0 {
		return bad("chunk size %d: need a power of two in [%d, %d]", c.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	// Leave at least 128 bytes of data room per chunk.
	if c.Headroom < 0 || c.Headroom > c.ChunkSize-KernelHeadroom-128 {
		return bad("headroom %d with chunk size %d", c.Headroom, c.ChunkSize)
	}
	const maxFrames = 1 << 20
	if c.RXFrames < 1 || c.RXFrames > maxFrames {
		return bad("RX frames %d: need 1..%d", c.RXFrames, maxFrames)
	}
	if c.TXFrames < 1 || c.TXFrames > maxFrames {
		return bad("TX frames %d: need 1..%d", c.TXFrames, maxFrames)
	}
	if c.TXFrameSize < 1 {
		return bad("TX frame size %d", c.TXFrameSize)
	}
	if c.TXFrameSize > c.ChunkSize && !c.MultiBuffer {
		return bad("TX frame size %d exceeds the chunk size %d: needs MultiBuffer", c.TXFrameSize, c.ChunkSize)
	}
	slot := (c.TXFrameSize + c.ChunkSize - 1) / c.ChunkSize
	if slot > MaxTXSegments {
		return bad("TX frame size %d needs %d descriptors, the kernel takes at most %d", c.TXFrameSize, slot, MaxTXSegments)
	}
	switch c.Mode {
	case ModeAuto, ModeCopy, ModeZeroCopy:
	default:
		return bad("mode %v", c.Mode)
	}
	g := geometry{
		chunkSize:   uint64(c.ChunkSize),
		chunkShift:  uint(bits.TrailingZeros(uint(c.ChunkSize))),
		headroom:    uint32(c.Headroom),
		rxFrames:    uint32(c.RXFrames),
		txFrames:    uint32(c.TXFrames),
		slotChunks:  uint32(slot),
		multiBuffer: c.MultiBuffer,
	}
	g.txChunks = g.txFrames * g.slotChunks
	g.umemSize = uint64(g.rxFrames+g.txChunks) * g.chunkSize
	g.fillSize = pow2(g.rxFrames)
	g.rxSize = pow2(g.rxFrames)
	g.txSize = pow2(g.txChunks)
	g.compSize = pow2(g.txChunks)
	return g, nil
}

// pow2 returns the smallest power of two >= n (n >= 1).
func pow2(n uint32) uint32 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len32(n-1)
}
