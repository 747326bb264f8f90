package ring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket is one AF_XDP socket bound to (ifindex, queue) with its own UMEM.
//
// A Socket is owned by one goroutine: every method, Close included, must
// be called from it (or with equivalent external synchronisation). The data
// path takes no locks and makes no system calls except the kicks (Kick,
// Refill when the driver asks, Wait).
type Socket struct {
	dp       datapath
	fd       int
	ifindex  int
	queue    int
	mode     Mode
	zcErr    error
	sg       bool
	txBudget int
	sndbuf   int
	umem     []byte
	rings    [4][]byte // fill, completion, RX, TX mappings
	closed   bool
	log      *slog.Logger
}

// Statistics are the kernel's counters for a socket (XDP_STATISTICS).
type Statistics struct {
	RXDropped            uint64 // frames dropped: no fill entries for a multi-buffer frame, or too long without MultiBuffer
	RXInvalidDescs       uint64 // fill ring entries the kernel rejected
	TXInvalidDescs       uint64 // TX descriptors the kernel rejected
	RXRingFull           uint64 // frames dropped because the RX ring was full
	RXFillRingEmptyDescs uint64 // times the fill ring was empty when a frame arrived
	TXRingEmptyDescs     uint64 // times the kernel found the TX ring empty
}

// Open creates an AF_XDP socket with a fresh UMEM, binds it to queue of the
// link ifindex and puts every RX frame on the fill ring. It acts in the
// network namespace of the calling OS thread; the socket keeps that
// namespace and may then be used from any thread.
//
// In ModeAuto it binds with XDP_ZEROCOPY first and, if that fails, with
// XDP_COPY; Mode and ZeroCopyFallback report the outcome. While the queue
// is busy (EBUSY, as right after a socket on it was closed) bind is retried
// for Config.BindRetry or until ctx ends.
//
// One UMEM per socket (no XDP_SHARED_UMEM): each RX queue gets its own
// engine goroutine, and a private UMEM lets that goroutine own every frame
// without locks. Sharing would put one frame allocator under several
// owners, and the transport copies payloads into MRs anyway, so forwarding a
// frame from one queue's RX to another's TX in place buys nothing. The cost
// is memory per queue (RXFrames+TXFrames*TXFrameSize chunks).
func Open(ctx context.Context, ifindex, queue int, cfg Config) (*Socket, error) {
	cfg = cfg.withDefaults()
	g, err := cfg.geometry()
	if err != nil {
		return nil, err
	}
	if ifindex <= 0 || queue < 0 {
		return nil, fmt.Errorf("%w: ifindex %d queue %d", ErrConfig, ifindex, queue)
	}
	umem, err := unix.Mmap(-1, 0, int(g.umemSize), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ring: map %d-byte UMEM: %w", g.umemSize, err)
	}
	s := &Socket{fd: -1, ifindex: ifindex, queue: queue, sg: cfg.MultiBuffer, umem: umem, log: cfg.Logger}
	s.dp.umem = umem
	s.dp.frames = newFrames(g)

	if cfg.Mode != ModeCopy {
		err := s.setup(ctx, cfg, g, unix.XDP_ZEROCOPY)
		if err == nil {
			s.mode = ModeZeroCopy
			return s.start()
		}
		if cfg.Mode == ModeZeroCopy || !zeroCopyUnsupported(err) {
			return nil, errors.Join(err, s.Close())
		}
		s.zcErr = err
		s.log.Debug("ring: zero-copy unavailable, binding in copy mode",
			"ifindex", ifindex, "queue", queue, "reason", err)
		if cerr := s.closeKernel(); cerr != nil {
			return nil, errors.Join(err, cerr, s.Close())
		}
	}
	if err := s.setup(ctx, cfg, g, unix.XDP_COPY); err != nil {
		if s.zcErr != nil {
			err = fmt.Errorf("%w (zero-copy failed before: %v)", err, s.zcErr)
		}
		return nil, errors.Join(err, s.Close())
	}
	s.mode = ModeCopy
	return s.start()
}

// zeroCopyUnsupported tells a zero-copy bind failure worth retrying in copy
// mode from one that copy mode would hit as well.
func zeroCopyUnsupported(err error) bool {
	for _, e := range []error{unix.EBUSY, unix.ENODEV, unix.ENXIO, unix.EPERM, unix.EACCES, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

func (s *Socket) start() (*Socket, error) {
	zc, err := s.ZeroCopy()
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if zc != (s.mode == ModeZeroCopy) {
		return nil, errors.Join(fmt.Errorf("ring: bound in %v mode but XDP_OPTIONS says zero-copy=%v", s.mode, zc), s.Close())
	}
	s.dp.refill()
	return s, nil
}

// OpenQueues opens one Socket per queue of the link (see Open). On error it
// closes the sockets it opened.
func OpenQueues(ctx context.Context, ifindex int, queues []int, cfg Config) ([]*Socket, error) {
	socks := make([]*Socket, 0, len(queues))
	for _, q := range queues {
		s, err := Open(ctx, ifindex, q, cfg)
		if err != nil {
			errs := []error{err}
			for _, o := range socks {
				errs = append(errs, o.Close())
			}
			return nil, errors.Join(errs...)
		}
		socks = append(socks, s)
	}
	return socks, nil
}

// setup creates the kernel socket: registers the UMEM, creates and maps the
// four rings, raises the TX budget and binds with modeFlag.
func (s *Socket) setup(ctx context.Context, cfg Config, g geometry, modeFlag uint16) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ring: create AF_XDP socket: %w", err)
	}
	s.fd = fd
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(&s.umem[0]))),
		Len:      g.umemSize,
		Size:     uint32(g.chunkSize),
		Headroom: g.headroom,
	}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fmt.Errorf("ring: register %d-byte UMEM (chunk %d; without CAP_IPC_LOCK RLIMIT_MEMLOCK must cover it): %w",
			g.umemSize, g.chunkSize, err)
	}
	sizes := []struct {
		opt  int
		n    uint32
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, g.fillSize, "fill"},
		{unix.XDP_UMEM_COMPLETION_RING, g.compSize, "completion"},
		{unix.XDP_RX_RING, g.rxSize, "RX"},
		{unix.XDP_TX_RING, g.txSize, "TX"},
	}
	for _, r := range sizes {
		if err := setsockoptUint32(fd, r.opt, r.n); err != nil {
			return fmt.Errorf("ring: create %d-entry %s ring: %w", r.n, r.name, err)
		}
	}
	var off unix.XDPMmapOffsets
	n, err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	if err != nil {
		return fmt.Errorf("ring: read ring offsets: %w", err)
	}
	if n != int(unsafe.Sizeof(off)) {
		return fmt.Errorf("ring: kernel returned %d-byte ring offsets without need_wakeup flags (need Linux >= 5.4)", n)
	}
	maps := []struct {
		pgoff int64
		off   unix.XDPRingOffset
		n     uint32
		entry uint64
		name  string
	}{
		{unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, g.fillSize, 8, "fill"},
		{unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, g.compSize, 8, "completion"},
		{unix.XDP_PGOFF_RX_RING, off.Rx, g.rxSize, 16, "RX"},
		{unix.XDP_PGOFF_TX_RING, off.Tx, g.txSize, 16, "TX"},
	}
	for i, m := range maps {
		mem, err := unix.Mmap(fd, m.pgoff, int(m.off.Desc+uint64(m.n)*m.entry),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("ring: map %s ring: %w", m.name, err)
		}
		s.rings[i] = mem
	}
	if err := errors.Join(
		s.dp.fill.bind(s.rings[0], off.Fr, g.fillSize),
		s.dp.comp.bind(s.rings[1], off.Cr, g.compSize),
		s.dp.rx.bind(s.rings[2], off.Rx, g.rxSize),
		s.dp.tx.bind(s.rings[3], off.Tx, g.txSize),
	); err != nil {
		return err
	}
	if err := s.setTXBudget(cfg, g); err != nil {
		return err
	}
	if err := s.setSendBuffer(cfg.SendBuffer); err != nil {
		return err
	}
	flags := modeFlag | unix.XDP_USE_NEED_WAKEUP
	if g.multiBuffer {
		flags |= unix.XDP_USE_SG
	}
	return s.bind(ctx, cfg.BindRetry, flags)
}

// setTXBudget raises XDP_MAX_TX_SKB_BUDGET (frames per copy-mode kick; the
// kernel takes 32..TX ring size). Kernels before 6.17 lack it: noted, not
// an error.
func (s *Socket) setTXBudget(cfg Config, g geometry) error {
	b := min(cfg.TXBudget, int(g.txSize))
	if cfg.TXBudget < 0 || b < 32 {
		return nil
	}
	err := setsockoptUint32(s.fd, unix.XDP_MAX_TX_SKB_BUDGET, uint32(b))
	switch {
	case err == nil:
		s.txBudget = b
	case errors.Is(err, unix.ENOPROTOOPT):
		s.log.Info("ring: kernel lacks XDP_MAX_TX_SKB_BUDGET; copy-mode kicks send 32 frames each",
			"ifindex", s.ifindex, "queue", s.queue)
	default:
		return fmt.Errorf("ring: set TX budget %d: %w", b, err)
	}
	return nil
}

// setSendBuffer sizes the send buffer copy-mode transmission charges its
// skbs to (Config.SendBuffer) and records what the kernel made of it.
func (s *Socket) setSendBuffer(n int) error {
	if n > 0 {
		err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n)
		if errors.Is(err, unix.EPERM) {
			err = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n)
		}
		if err != nil {
			return fmt.Errorf("ring: set a %d-byte send buffer: %w", n, err)
		}
	}
	got, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	if err != nil {
		return fmt.Errorf("ring: read the send buffer size: %w", err)
	}
	s.sndbuf = got
	return nil
}

func (s *Socket) bind(ctx context.Context, retry time.Duration, flags uint16) error {
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	deadline := time.Now().Add(retry)
	delay := 500 * time.Microsecond
	for {
		err := unix.Bind(s.fd, sa)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("ring: bind ifindex %d queue %d flags %#x: %w", s.ifindex, s.queue, flags, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("ring: bind ifindex %d queue %d: %w (gave up: %w)", s.ifindex, s.queue, err, ctx.Err())
		case <-t.C:
		}
		s.dp.cnt.BindRetries++
		// The old socket is released some 17-35 ms after close (measured):
		// poll at a few ms so the queue is taken soon after it frees.
		delay = min(2*delay, 4*time.Millisecond)
	}
}

// closeKernel unmaps the rings and closes the socket, keeping the UMEM.
func (s *Socket) closeKernel() error {
	var errs []error
	names := [...]string{"fill", "completion", "RX", "TX"}
	for i, m := range s.rings {
		if m == nil {
			continue
		}
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, fmt.Errorf("ring: unmap %s ring: %w", names[i], err))
		}
		s.rings[i] = nil
	}
	s.dp.fill, s.dp.comp, s.dp.rx, s.dp.tx = addrRing{}, addrRing{}, descRing{}, descRing{}
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, fmt.Errorf("ring: close socket: %w", err))
		}
		s.fd = -1
	}
	return errors.Join(errs...)
}

// Close unmaps the rings, closes the socket and unmaps the UMEM, and
// returns the errors of those steps joined. Packets and TXFrames still held
// become invalid: their memory is gone. Close is idempotent; call it from
// the goroutine that owns the socket.
func (s *Socket) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.closeKernel()
	if s.umem != nil {
		if uerr := unix.Munmap(s.umem); uerr != nil {
			err = errors.Join(err, fmt.Errorf("ring: unmap UMEM: %w", uerr))
		}
		s.umem, s.dp.umem = nil, nil
	}
	return err
}

// FD is the socket's file descriptor, to put in the XSKMAP slot of its
// queue. It stays owned by the Socket.
func (s *Socket) FD() int { return s.fd }

// Ifindex is the link the socket is bound to.
func (s *Socket) Ifindex() int { return s.ifindex }

// Queue is the RX/TX queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// Mode is the mode the socket was bound in: ModeCopy or ModeZeroCopy.
func (s *Socket) Mode() Mode { return s.mode }

// ZeroCopyFallback is why zero-copy was not used in ModeAuto (nil if it
// was, or if ModeCopy was asked for).
func (s *Socket) ZeroCopyFallback() error { return s.zcErr }

// MultiBuffer reports whether the socket was bound with XDP_USE_SG.
func (s *Socket) MultiBuffer() bool { return s.sg }

// TXBudget is the XDP_MAX_TX_SKB_BUDGET set, or 0 if the kernel default
// (32) applies.
func (s *Socket) TXBudget() int { return s.txBudget }

// SendBuffer is the socket's send buffer in bytes as the kernel set it
// (twice what was asked, for its bookkeeping): what copy-mode frames in
// flight may occupy (Config.SendBuffer).
func (s *Socket) SendBuffer() int { return s.sndbuf }

// RXSegmentSize is the most bytes one RX descriptor carries.
func (s *Socket) RXSegmentSize() int {
	g := s.dp.frames.g
	return int(g.chunkSize) - KernelHeadroom - int(g.headroom)
}

// ZeroCopy reads XDP_OPTIONS: whether the kernel runs the socket in
// zero-copy mode.
func (s *Socket) ZeroCopy() (bool, error) {
	if s.closed {
		return false, ErrClosed
	}
	var opts struct{ flags uint32 }
	if _, err := getsockopt(s.fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err != nil {
		return false, fmt.Errorf("ring: read XDP_OPTIONS: %w", err)
	}
	return opts.flags&unix.XDP_OPTIONS_ZEROCOPY != 0, nil
}

// Statistics reads the kernel's XDP_STATISTICS. Counters an older kernel
// does not report are zero.
func (s *Socket) Statistics() (Statistics, error) {
	if s.closed {
		return Statistics{}, ErrClosed
	}
	var st unix.XDPStatistics
	if _, err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st)); err != nil {
		return Statistics{}, fmt.Errorf("ring: read XDP_STATISTICS: %w", err)
	}
	return Statistics{
		RXDropped:            st.Rx_dropped,
		RXInvalidDescs:       st.Rx_invalid_descs,
		TXInvalidDescs:       st.Tx_invalid_descs,
		RXRingFull:           st.Rx_ring_full,
		RXFillRingEmptyDescs: st.Rx_fill_ring_empty_descs,
		TXRingEmptyDescs:     st.Tx_ring_empty_descs,
	}, nil
}

// Counters returns the socket's own event counts.
func (s *Socket) Counters() Counters { return s.dp.cnt }

// FrameStats counts the socket's frames by place.
func (s *Socket) FrameStats() FrameStats { return s.dp.frames.stats() }

// CheckFrames verifies the frame accounting from scratch: every frame in
// exactly one place, free lists consistent. It allocates and walks every
// frame; use it in tests and diagnostics, not per packet.
func (s *Socket) CheckFrames() error { return s.dp.frames.check() }

// Receive reads up to len(pkts) whole packets from the RX ring and returns
// how many it filled. The caller owns them until Release. Receive stops at
// an element of pkts still holding an unreleased packet rather than
// overwrite it (its frames would be lost). Descriptors that
// fail the bounds check are never dereferenced: they are counted and the
// packet they belong to is dropped.
func (s *Socket) Receive(pkts []Packet) int {
	if s.closed {
		return 0
	}
	return s.dp.receive(pkts)
}

// Release returns the frames of received packets for refilling and zeroes
// the Packets. A packet the caller does not hold (released before, a stale
// copy) is skipped and reported with ErrDoubleRelease; the others are
// released anyway.
func (s *Socket) Release(pkts []Packet) error {
	if s.closed {
		return ErrClosed
	}
	return s.dp.release(pkts)
}

// Refill puts free RX frames on the fill ring and returns how many. When
// the driver asked for a wakeup (XDP_RING_NEED_WAKEUP on the fill ring,
// zero-copy drivers only) it kicks it with recvfrom(MSG_DONTWAIT).
func (s *Socket) Refill() (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	n := s.dp.refill()
	if s.dp.fill.needWakeup() && s.dp.fill.pending() > 0 {
		s.dp.cnt.FillKicks++
		if e := recvKick(s.fd); e != 0 && !retryLater(e) {
			return n, fmt.Errorf("ring: fill wakeup on queue %d: %w", s.queue, e)
		}
	}
	return n, nil
}

// AllocTX reserves up to len(out) transmit buffers and returns how many. It
// stops at an element of out still holding a buffer (not yet submitted or
// freed) rather than overwrite it.
func (s *Socket) AllocTX(out []TXFrame) int {
	if s.closed {
		return 0
	}
	return s.dp.allocTX(out)
}

// FreeTX gives reserved, unsent buffers back (ErrDoubleRelease for one not
// held; the others are freed anyway).
func (s *Socket) FreeTX(frames []TXFrame) error {
	if s.closed {
		return ErrClosed
	}
	return s.dp.freeTX(frames)
}

// Submit queues frames in order on the TX ring, a frame longer than one
// chunk as a chain of descriptors (XDP_PKT_CONTD on all but the last), and
// publishes them at once; Kick then makes the kernel send them. It returns
// how many frames were queued: on error, frames[n] is the one refused and
// later ones were not looked at. Queued TXFrames are zeroed.
func (s *Socket) Submit(frames []TXFrame) (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	return s.dp.submit(frames)
}

// Kick makes the kernel transmit queued TX descriptors if it needs telling
// (XDP_RING_NEED_WAKEUP on the TX ring: always in copy mode) with
// sendto(MSG_DONTWAIT). In copy mode one kick sends up to TXBudget frames;
// EAGAIN, EBUSY and ENOBUFS mean "kick again later", not failure, and
// return nil. TXPending tells whether more kicks are needed.
func (s *Socket) Kick() error {
	if s.closed {
		return ErrClosed
	}
	if s.dp.tx.pending() == 0 || !s.dp.tx.needWakeup() {
		return nil
	}
	s.dp.cnt.TXKicks++
	if e := sendKick(s.fd); e != 0 {
		if retryLater(e) {
			s.dp.cnt.TXKickRetries++
			return nil
		}
		return fmt.Errorf("ring: TX kick on queue %d: %w", s.queue, e)
	}
	return nil
}

// RXWaiting is how many received frames wait in the RX ring, not yet
// taken by Receive or taken and not yet released. Any goroutine may call
// it: it reads only the ring's shared indices.
func (s *Socket) RXWaiting() int {
	if s.closed {
		return 0
	}
	return int(s.dp.rx.waiting())
}

// TXPending is the number of TX descriptors queued that the kernel has not
// taken yet.
func (s *Socket) TXPending() int {
	if s.closed {
		return 0
	}
	return int(s.dp.tx.pending())
}

// Complete reaps the completion ring and returns how many TX buffers became
// free.
func (s *Socket) Complete() int {
	if s.closed {
		return 0
	}
	return s.dp.complete()
}

// Wait blocks in poll(2) until the RX ring has descriptors or timeout
// passes (negative: no limit), and reports whether it has. In copy mode
// poll also transmits queued TX descriptors. An interrupted poll returns
// false, nil.
func (s *Socket) Wait(timeout time.Duration) (bool, error) {
	if s.closed {
		return false, ErrClosed
	}
	if s.dp.rx.available(1) > 0 {
		return true, nil
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	fds := [1]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds[:], ms)
	if err != nil {
		if errors.Is(err, unix.EINTR) {
			return false, nil
		}
		return false, fmt.Errorf("ring: poll queue %d: %w", s.queue, err)
	}
	return n > 0 && fds[0].Revents&unix.POLLIN != 0, nil
}

// Bytes returns the UMEM bytes of a descriptor, or ErrOutOfBounds if it does
// not lie inside one chunk.
func (s *Socket) Bytes(d Desc) ([]byte, error) {
	if s.closed {
		return nil, ErrClosed
	}
	return s.dp.bytes(d)
}

// SetBusyPoll asks the kernel to run this queue's NAPI context in the
// socket's own kicks and waits (SO_PREFER_BUSY_POLL, SO_BUSY_POLL for usecs,
// SO_BUSY_POLL_BUDGET packets), instead of in softirq on whichever CPU the
// interrupt or the peer chose: what a spinning engine wants. Linux 5.11;
// raising SO_BUSY_POLL above net.core.busy_read needs CAP_NET_ADMIN.
func (s *Socket) SetBusyPoll(usecs, budget int) error {
	for _, o := range []struct {
		name string
		opt  int
		val  int
	}{{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1}, {"SO_BUSY_POLL", unix.SO_BUSY_POLL, usecs}, {"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, budget}} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			return fmt.Errorf("ring: %s %d: %w", o.name, o.val, err)
		}
	}
	return nil
}

// BusyPollAvailable says whether the kernel has the busy-poll socket options
// SetBusyPoll sets, without changing them.
func (s *Socket) BusyPollAvailable() error {
	if _, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL); err != nil {
		return fmt.Errorf("ring: SO_PREFER_BUSY_POLL (Linux 5.11): %w", err)
	}
	return nil
}
