package nic

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ring"
)

// FrameLink moves whole Ethernet frames over some of a port's AF_XDP
// sockets: it receives from each of its queues, fairly, and transmits each
// flow on one queue. A device's engines each have a link of one queue
// (NewQueueLinks; the methods match link.Link and its optional
// interfaces); tools and benchmarks drive all the rings through one
// (NewFrameLink). One goroutine owns it, except Wake, which any may call.
type FrameLink struct {
	socks []*ring.Socket
	// rx are the sockets' receive sides, read in turn from rxNext so that
	// every queue gets its share of each batch (rxQueue: fakes in tests).
	rx     []rxQueue
	rxNext int
	pkts   []ring.Packet
	// releaseHook runs before a socket's received frames are released
	// (SetReleaseHook).
	releaseHook func()
	// tx is each queue's transmit side, cur the one SelectTX chose.
	tx      []txQueue
	cur     int
	scratch []byte
	wakeFD  int // eventfd: the doorbell
	// epfd is the wait set: the sockets, wakeFD and what the link
	// watches. set wraps it in Go's poller, from the first Wait that parks
	// there (pollSet); one that blocks its thread (SetThreadWait) leaves it
	// out, or every wakeup would wake the poller's thread too.
	epfd    int
	set     *os.File
	setConn syscall.RawConn
	events  []unix.EpollEvent
	max     int
	// Receive coalescing (SetRxCoalesce): coalesce sizes the sleeps, armed
	// says which sockets' one-shot wakeups are armed, timerFD ends a
	// coalescing sleep (only Wait touches these); received counts the
	// frames handed out since the last Wait (Receive may run on an
	// application's goroutine while Wait sleeps on the engine's), and sent
	// the frames sent meanwhile.
	coalesce       coalescer
	armed          []bool
	timerFD        int
	received, sent atomic.Int64
	// watched are the descriptors (a daemon's clients' doorbells) whose
	// readiness ends a Wait too (Watch), under watchMu, which a Wait holds
	// while it reads one: Unwatch returns only once no read of fd is
	// under way, so a closed and reused descriptor is never read.
	watchMu    sync.Mutex
	watched    map[int]bool
	watchWakes uint64 // Waits a watched descriptor ended (Wait's goroutine)
	threadWait bool   // Wait blocks its thread (SetThreadWait)
	drain      [64]byte
}

// txQueue is one socket's transmit side: frames[:ready] are committed,
// then come buffers reserved but not yet filled.
type txQueue struct {
	sock   *ring.Socket
	frames []ring.TXFrame
	ready  int
}

// rxQueue is what receiving needs of a socket.
type rxQueue interface {
	Receive(pkts []ring.Packet) int
	Release(pkts []ring.Packet) error
	Refill() (int, error)
}

const (
	// rxBatch is the most frames taken from one ring per receive call.
	rxBatch = 64
	// txBatch is the most frames committed per queue between flushes.
	txBatch = 128
	// minFrameLen is the shortest Ethernet frame without FCS.
	minFrameLen = 60
	// minEvents is the fewest events a Wait takes in one look: watched
	// descriptors beyond them stay ready for the next.
	minEvents = 16
	// drainReads bounds the reads a Wait makes of one watched descriptor:
	// a client that keeps writing keeps it ready, and the next Wait reads
	// on.
	drainReads = 4
)

// NewFrameLink opens a link on all of p's sockets. Close it before the
// port.
func NewFrameLink(p *Port) (*FrameLink, error) {
	return newFrameLink(p.Sockets(), p.Link().MTU+ethOverhead)
}

// NewQueueLinks opens one link per socket of p, in queue order, each with
// its own doorbell: one per engine, so that each queue's engine sleeps and
// wakes on its own queue. Close them before the port.
func NewQueueLinks(p *Port) ([]*FrameLink, error) {
	var links []*FrameLink
	for _, s := range p.Sockets() {
		l, err := newFrameLink([]*ring.Socket{s}, p.Link().MTU+ethOverhead)
		if err != nil {
			errs := []error{err}
			for _, o := range links {
				errs = append(errs, o.Close())
			}
			return nil, errors.Join(errs...)
		}
		links = append(links, l)
	}
	return links, nil
}

func newFrameLink(socks []*ring.Socket, maxFrame int) (*FrameLink, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("nic: doorbell eventfd: %w", err)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("nic: epoll set: %w", err), unix.Close(efd))
	}
	fds := []int{efd}
	for _, s := range socks {
		fds = append(fds, s.FD())
	}
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return nil, errors.Join(fmt.Errorf("nic: epoll add: %w", err), unix.Close(epfd), unix.Close(efd))
		}
	}
	l := &FrameLink{
		socks:   socks,
		pkts:    make([]ring.Packet, rxBatch),
		scratch: make([]byte, ring.MaxChunkSize*ring.MaxSegments),
		wakeFD:  efd,
		epfd:    epfd,
		events:  make([]unix.EpollEvent, max(len(fds), minEvents)),
		max:     maxFrame,
		armed:   make([]bool, len(socks)),
		timerFD: -1,
	}
	for _, s := range socks {
		l.rx = append(l.rx, s)
		l.tx = append(l.tx, txQueue{sock: s, frames: make([]ring.TXFrame, txBatch)})
	}
	return l, nil
}

// MaxFrame is the longest frame the link sends.
func (l *FrameLink) MaxFrame() int { return l.max }

// Queues is how many queues the link serves.
func (l *FrameLink) Queues() int { return len(l.socks) }

// RingDrops sums the frames the kernel dropped on every socket for want of
// room in the RX ring or entries in the fill ring.
func (l *FrameLink) RingDrops() uint64 {
	var n uint64
	for _, s := range l.socks {
		if st, err := s.Statistics(); err == nil {
			n += st.RXDropped + st.RXRingFull + st.RXFillRingEmptyDescs
		}
	}
	return n
}

// SelectTX picks the queue the next frames go out on from their flow, the
// UDP source port: one QP's frames stay on one queue, in order, and QPs
// spread over the queues as a peer's RSS spreads them by the same port. On
// veth a frame sent on queue i arrives on the peer's queue i.
func (l *FrameLink) SelectTX(flow uint16) {
	if n := len(l.tx); n > 1 {
		l.cur = int(flow) % n
	}
}

// Send copies frames into transmit buffers of the selected queue and
// transmits them. Frames that find no buffer free are dropped, as on a
// congested NIC, and the error says how many. The engine builds frames in
// place with TXBuffer instead.
func (l *FrameLink) Send(frames [][]byte) error {
	sent := 0
	for _, f := range frames {
		b := l.TXBuffer()
		if b == nil {
			break
		}
		l.CommitTX(pad(b, copy(b, f)))
		sent++
	}
	err := l.FlushTX()
	if sent < len(frames) {
		err = errors.Join(err, fmt.Errorf("nic: no transmit buffer free: %d of %d frames dropped", len(frames)-sent, len(frames)))
	}
	return err
}

// pad zeroes b from n up to the Ethernet minimum and returns the length.
func pad(b []byte, n int) int {
	if n >= minFrameLen {
		return n
	}
	clear(b[n:minFrameLen])
	return minFrameLen
}

// TXBuffer is the next free transmit buffer of the selected queue, or nil
// when all are in flight even after reaping completions.
func (l *FrameLink) TXBuffer() []byte {
	q := &l.tx[l.cur]
	if q.ready == len(q.frames) {
		if err := l.FlushTX(); err != nil || q.ready == len(q.frames) {
			return nil
		}
	}
	f := &q.frames[q.ready]
	if f.Buf() == nil {
		// AllocTX reserves from here up to the first buffer still held.
		if q.sock.AllocTX(q.frames[q.ready:]) == 0 {
			q.sock.Complete()
			if q.sock.AllocTX(q.frames[q.ready:]) == 0 {
				return nil
			}
		}
	}
	return f.Buf()
}

// CommitTX queues the frame of n bytes built in the last TXBuffer.
func (l *FrameLink) CommitTX(n int) {
	q := &l.tx[l.cur]
	q.frames[q.ready].Len = n
	q.ready++
}

// FlushTX submits the committed frames of every queue and kicks the kernel
// until they are sent or a TX ring stays full, when the rest are dropped as
// a congested NIC would.
func (l *FrameLink) FlushTX() error {
	var errs []error
	for i := range l.tx {
		if r := l.tx[i].ready; r > 0 && l.coalesce.longest > 0 {
			l.sent.Add(int64(r))
		}
		if err := l.tx[i].flush(); err != nil {
			errs = append(errs, fmt.Errorf("nic: queue %d: %w", l.tx[i].sock.Queue(), err))
		}
	}
	return errors.Join(errs...)
}

func (q *txQueue) flush() error {
	s := q.sock
	if q.ready == 0 && s.TXPending() == 0 {
		return nil
	}
	var err error
	for spins := 0; q.ready > 0 && spins < 1000; spins++ {
		s.Complete()
		sent, serr := s.Submit(q.frames[:q.ready])
		// Submitted entries are cleared; move the rest (committed, then
		// merely reserved) to the front.
		copy(q.frames, q.frames[sent:])
		clear(q.frames[len(q.frames)-sent:])
		q.ready -= sent
		if serr != nil && !errors.Is(serr, ring.ErrRingFull) {
			err = fmt.Errorf("AF_XDP submit: %w", serr)
			break
		}
		if kerr := s.Kick(); kerr != nil {
			err = fmt.Errorf("AF_XDP kick: %w", kerr)
			break
		}
	}
	if q.ready > 0 { // still no room: drop them
		err = errors.Join(err, s.FreeTX(q.frames[:q.ready]))
		copy(q.frames, q.frames[q.ready:])
		clear(q.frames[len(q.frames)-q.ready:])
		q.ready = 0
	}
	for i := 0; s.TXPending() > 0 && i < 64; i++ {
		if kerr := s.Kick(); kerr != nil {
			return errors.Join(err, fmt.Errorf("AF_XDP kick: %w", kerr))
		}
	}
	return err
}

// Transmit sends every frame on the selected queue, in order, waiting for
// buffers rather than dropping, and returns once the kernel has sent them
// all (completions reaped) or ctx ends. It is for tools and tests.
func (l *FrameLink) Transmit(ctx context.Context, frames [][]byte) error {
	q := &l.tx[l.cur]
	for len(frames) > 0 {
		b := l.TXBuffer()
		if b == nil {
			if err := l.FlushTX(); err != nil {
				return err
			}
			if err := pause(ctx); err != nil {
				return err
			}
			continue
		}
		if len(frames[0]) > len(b) {
			return fmt.Errorf("nic: frame of %d bytes exceeds the %d-byte TX buffer", len(frames[0]), len(b))
		}
		l.CommitTX(pad(b, copy(b, frames[0])))
		frames = frames[1:]
		if q.ready == len(q.frames) {
			if err := l.FlushTX(); err != nil {
				return err
			}
		}
	}
	if err := l.FlushTX(); err != nil {
		return err
	}
	for s := q.sock; s.TXPending() > 0 || s.FrameStats().TXKernel > 0; {
		if err := s.Kick(); err != nil {
			return fmt.Errorf("nic: kick: %w", err)
		}
		if s.Complete() == 0 {
			if err := pause(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// pause yields briefly while the kernel drains a ring, or reports ctx's end.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(50 * time.Microsecond):
		return nil
	}
}

// Receive hands up to max frames that have arrived to fn, each whole,
// without blocking, and returns how many. A frame is valid only during its
// call. (The engine uses ReceiveSplit, which does not join pieces.)
func (l *FrameLink) Receive(max int, fn func(frame []byte)) (int, error) {
	return l.ReceiveSplit(max, func(head, tail []byte) {
		if len(tail) == 0 {
			fn(head)
			return
		}
		n := copy(l.scratch, head)
		n += copy(l.scratch[n:], tail)
		fn(l.scratch[:n])
	})
}

// ReceiveSplit receives up to max frames and hands each over in its pieces.
// Each call starts at the queue after the one the last call started at: a
// batch that fills up on one busy queue must not leave the others unread
// until their rings overflow. A frame in one UMEM chunk is handed over as
// is, one in two (PMTU 4096 in 4 KiB chunks) as head and tail without
// joining them, so its payload is copied once, into registered memory. A
// longer chain, which no RoCE frame needs, is gathered.
func (l *FrameLink) ReceiveSplit(max int, fn func(head, tail []byte)) (int, error) {
	total, n := 0, len(l.rx)
	if n == 0 {
		return 0, nil
	}
	start := l.rxNext
	l.rxNext = (l.rxNext + 1) % n
	for i := range n {
		s := l.rx[(start+i)%n]
		got := s.Receive(l.pkts[:min(len(l.pkts), max-total)])
		for j := range l.pkts[:got] {
			p := &l.pkts[j]
			switch p.Segments() {
			case 1:
				fn(p.Segment(0), nil)
			case 2:
				fn(p.Segment(0), p.Segment(1))
			default:
				if f, err := p.Bytes(l.scratch); err == nil {
					fn(f, nil)
				}
			}
		}
		if l.releaseHook != nil {
			l.releaseHook() // the frames are still there
		}
		if err := s.Release(l.pkts[:got]); err != nil {
			return total, fmt.Errorf("nic: AF_XDP release: %w", err)
		}
		if _, err := s.Refill(); err != nil {
			return total, fmt.Errorf("nic: AF_XDP refill: %w", err)
		}
		total += got
		if got > 0 && l.coalesce.longest > 0 {
			l.received.Add(int64(got)) // only coalescing reads it
		}
		if total >= max {
			break
		}
	}
	return total, nil
}

// Collect hands every frame that arrives to fn until fn returns false or
// ctx ends, sleeping on the rings when nothing has arrived. It is for
// tools and tests.
func (l *FrameLink) Collect(ctx context.Context, fn func(frame []byte) bool) error {
	more := true
	for more {
		n, err := l.Receive(rxBatch, func(f []byte) {
			if more {
				more = fn(f)
			}
		})
		if err != nil {
			return err
		}
		if n == 0 && more {
			if err := ctx.Err(); err != nil {
				return err
			}
			l.Wait(5 * time.Millisecond)
		}
	}
	return nil
}

// Wake makes a Wait in progress, or the next one, return at once: the
// eventfd in the wait set is the doorbell. Any goroutine may call it.
func (l *FrameLink) Wake() {
	one := [8]byte{1}
	_, _ = unix.Write(l.wakeFD, one[:]) // EAGAIN means it is already signalled
}

// SetRxCoalesce makes Wait, after a wakeup that brought a stream's frames,
// sleep with the sockets' wakeups disarmed until the next batch has
// gathered, up to longest: the frames arriving meanwhile are taken in one
// batch rather than a wakeup for every few (a NIC's adaptive rx-usecs).
// Where engines sleep rather than spin (one CPU), each wakeup costs the
// processor the kernel needs to move those very frames. A Wait after fewer
// frames than a stream brings re-arms the sockets (their one-shot wakeups
// report frames already waiting), the doorbell always wakes, and no Wait
// sleeps past its own time. Zero or less turns coalescing off. The link's
// owner calls it before the link is used.
func (l *FrameLink) SetRxCoalesce(longest time.Duration) error {
	l.coalesce = newCoalescer(longest)
	events := uint32(unix.EPOLLIN)
	if longest > 0 {
		events |= unix.EPOLLONESHOT
		if err := l.ensureTimer(); err != nil {
			return fmt.Errorf("nic: receive coalescing timer: %w", err)
		}
	}
	for i, s := range l.socks {
		if err := l.ctl(unix.EPOLL_CTL_MOD, s.FD(), events); err != nil {
			return fmt.Errorf("nic: queue %d: receive coalescing: %w", s.Queue(), err)
		}
		l.armed[i] = true
	}
	return nil
}

// RxCoalesce is the longest coalescing sleep (SetRxCoalesce), 0 if off.
func (l *FrameLink) RxCoalesce() time.Duration { return l.coalesce.longest }

// ctl changes what fd wakes the wait set for.
func (l *FrameLink) ctl(op, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	return unix.EpollCtl(l.epfd, op, fd, &ev)
}

// pollSet puts the wait set in Go's poller, once.
func (l *FrameLink) pollSet() error {
	if l.set != nil {
		return nil
	}
	if err := unix.SetNonblock(l.epfd, true); err != nil {
		return fmt.Errorf("nic: epoll set: %w", err)
	}
	set := os.NewFile(uintptr(l.epfd), "xdproce-wait")
	conn, err := set.SyscallConn()
	if err != nil {
		return fmt.Errorf("nic: epoll set: %w", err) // only for a nil file
	}
	l.set, l.setConn = set, conn
	return nil
}

// Wait blocks until a frame may be ready, Wake is called, or d passes. It
// parks in Go's network poller on an epoll set of every queue's socket and
// the doorbell, rather than blocking its thread in poll(2): a parked
// goroutine gives its processor back at once, so the other goroutines (the
// application, another device's engine) run without waiting for the
// runtime to notice a blocked system call.
func (l *FrameLink) Wait(d time.Duration) {
	timed := false // the coalescing timer ends this Wait
	if l.coalesce.longest > 0 {
		if sleep := l.coalesce.sleep(l.received.Swap(0), l.sent.Swap(0)); sleep == 0 {
			l.arm()
		} else if timed = sleep < d; timed {
			l.startTimer(sleep) // a stream: let its next batch gather, disarmed
		}
	}
	rang, slept, watchRang := false, false, false
	look := func(n int) {
		for _, ev := range l.events[:max(n, 0)] {
			switch int(ev.Fd) {
			case l.wakeFD:
				rang = true
			case l.timerFD:
				var b [8]byte
				_, _ = unix.Read(l.timerFD, b[:]) // level-triggered: reset it
				slept = timed                     // not a timer an earlier Wait left running
			default:
				if l.drainWatched(int(ev.Fd)) {
					watchRang = true
					continue
				}
				if l.coalesce.longest > 0 {
					l.disarmed(int(ev.Fd)) // a one-shot wakeup fired
				}
			}
		}
	}
	if l.threadWait {
		look(l.blockingWait(l.epfd, d))
	} else if err := l.pollSet(); err != nil {
		time.Sleep(d) // cannot happen (a valid descriptor); sleep rather than spin
	} else {
		if !timed && d > 0 && d < preciseWait && l.ensureTimer() == nil {
			l.startTimer(d) // ends this Wait: slept stays false (no coalescing figure)
		}
		_ = l.set.SetReadDeadline(time.Now().Add(d))
		_ = l.setConn.Read(func(fd uintptr) bool {
			n, err := unix.EpollWait(int(fd), l.events, 0)
			look(n)
			return n > 0 || (err != nil && err != unix.EINTR)
		})
	}
	if watchRang {
		l.watchWakes++
	}
	if slept && !rang {
		waiting := 0
		for _, s := range l.socks {
			waiting += s.RXWaiting()
		}
		l.coalesce.gathered(waiting)
	}
	if rang {
		// Reset the doorbell: only when it rang, a system call saved on
		// every other wakeup (a small guest pays tens of µs for one).
		var b [8]byte
		_, _ = unix.Read(l.wakeFD, b[:])
	}
}

// ensureTimer creates the timer that ends a Wait with µs precision.
func (l *FrameLink) ensureTimer() error {
	if l.timerFD >= 0 {
		return nil
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return err
	}
	l.timerFD = fd
	return l.ctl(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN)
}

// preciseWait is the longest Wait parked on Go's poller that the timer
// ends rather than the poller's deadline, which sleeps a whole
// millisecond for any shorter time (a thread's wait, epoll_pwait2, has
// nanoseconds already): a
// transport timer of a few round trips (a tail-loss probe, 2·srtt) or a
// READ response's pace would otherwise wait a millisecond or more.
const preciseWait = 2 * time.Millisecond

// Watch makes fd's readiness end a Wait, as Wake does: a daemon's client's
// doorbell then wakes the engine in one hop. Wait reads and discards what
// fd holds (up to drainReads reads a look) and stops watching it at its
// end of file or on an error. The caller keeps fd open until Unwatch.
func (l *FrameLink) Watch(fd int) error {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	if l.watched[fd] {
		return fmt.Errorf("nic: watch fd %d: %w", fd, unix.EEXIST)
	}
	if err := l.ctl(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN); err != nil {
		return fmt.Errorf("nic: watch fd %d: %w", fd, err)
	}
	if l.watched == nil {
		l.watched = make(map[int]bool)
	}
	l.watched[fd] = true
	return nil
}

// Unwatch stops watching fd; once it returns, no Wait reads fd. A
// descriptor Wait already let go of (its end of file) is no error.
func (l *FrameLink) Unwatch(fd int) error {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	if !l.watched[fd] {
		return nil
	}
	delete(l.watched, fd)
	if err := l.ctl(unix.EPOLL_CTL_DEL, fd, 0); err != nil {
		return fmt.Errorf("nic: unwatch fd %d: %w", fd, err)
	}
	return nil
}

// Watching is how many descriptors the link watches.
func (l *FrameLink) Watching() int {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	return len(l.watched)
}

// WatchWakes counts the Waits a watched descriptor ended; only Wait's
// goroutine may call it.
func (l *FrameLink) WatchWakes() uint64 { return l.watchWakes }

// drainWatched reads what the watched descriptor fd holds and reports
// whether fd is one (false for a socket of the link, or a descriptor
// Unwatch let go of since the look). At fd's end of file (the client
// closed its end), or an error, it stops watching fd: a descriptor ready
// for ever would end every Wait at once.
func (l *FrameLink) drainWatched(fd int) bool {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	if !l.watched[fd] {
		return false
	}
	for range drainReads {
		n, err := unix.Read(fd, l.drain[:])
		if n > 0 {
			continue
		}
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			break
		}
		delete(l.watched, fd) // end of file, or not a descriptor to read
		_ = l.ctl(unix.EPOLL_CTL_DEL, fd, 0)
		break
	}
	return true
}

// SetThreadWait makes Wait block its goroutine's thread in the wait set
// (epoll_pwait2) rather than park the goroutine in Go's network poller. A
// wakeup then readies that one thread, where through the poller the
// thread that polls readies the goroutine and, taking a processor (P) out
// of idle, wakes the runtime's monitor (sysmon), which then polls every
// 20 µs for a while: on a host whose processors are all busy (clients
// spinning on memory) each is a thread the kernel must preempt someone
// for. The blocked thread keeps its processor (P)
// until the runtime's monitor takes it back, so it suits a process whose
// only data path is its engines (the daemon), not one whose application
// shares the processors with them. The link's owner calls it before the
// link is used.
func (l *FrameLink) SetThreadWait(on bool) { l.threadWait = on }

// blockingWait waits in the wait set epfd for up to d, blocking the
// thread, and returns how many events it put in l.events (0 on timeout or
// an interruption: a spurious wakeup, which the engine takes as one).
func (l *FrameLink) blockingWait(epfd int, d time.Duration) int {
	ts := unix.NsecToTimespec(max(d, 0).Nanoseconds())
	r, _, errno := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(epfd), uintptr(unsafe.Pointer(&l.events[0])),
		uintptr(len(l.events)), uintptr(unsafe.Pointer(&ts)), 0, 0)
	if errno == unix.ENOSYS { // before Linux 5.11: milliseconds, rounded up
		n, _ := unix.EpollWait(epfd, l.events, int((d+time.Millisecond-1)/time.Millisecond))
		return max(n, 0)
	}
	if errno != 0 {
		return 0
	}
	return int(r)
}

// startTimer has the coalescing timer end the Wait after d: µs precision,
// where the Go poller's deadlines sleep in whole milliseconds.
func (l *FrameLink) startTimer(d time.Duration) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	_ = unix.TimerfdSettime(l.timerFD, 0, &spec, nil)
}

// arm re-arms the one-shot wakeups of the sockets whose wakeup fired.
func (l *FrameLink) arm() {
	for i, s := range l.socks {
		if !l.armed[i] && l.ctl(unix.EPOLL_CTL_MOD, s.FD(), unix.EPOLLIN|unix.EPOLLONESHOT) == nil {
			l.armed[i] = true
		}
	}
}

// disarmed notes that the one-shot wakeup of the socket fd fired.
func (l *FrameLink) disarmed(fd int) {
	for i, s := range l.socks {
		if s.FD() == fd {
			l.armed[i] = false
		}
	}
}

// Close gives back the transmit buffers the link still reserves and
// checks, once its owner has stopped, that every UMEM frame is accounted
// for and none is held: a frame a receive path forgot to release, or a
// transmit buffer lost, shows here (every test that closes a device on
// AF_XDP checks it). The sockets stay open: they are the port's.
func (l *FrameLink) Close() error {
	var errs []error
	for i := range l.tx {
		q := &l.tx[i]
		held := 0
		for held < len(q.frames) && q.frames[held].Buf() != nil {
			held++
		}
		if held > 0 {
			errs = append(errs, q.sock.FreeTX(q.frames[:held]))
		}
		clear(q.frames)
		q.ready = 0
	}
	for _, s := range l.socks {
		if err := s.CheckFrames(); err != nil {
			errs = append(errs, fmt.Errorf("nic: queue %d: UMEM frames: %w", s.Queue(), err))
			continue
		}
		if st := s.FrameStats(); st.RXHeld != 0 || st.TXHeld != 0 {
			errs = append(errs, fmt.Errorf("nic: queue %d: %d RX frames and %d TX buffers still held at close", s.Queue(), st.RXHeld, st.TXHeld))
		}
	}
	if l.timerFD >= 0 {
		errs = append(errs, unix.Close(l.timerFD))
	}
	if l.set != nil {
		errs = append(errs, l.set.Close()) // closes epfd
	} else {
		errs = append(errs, unix.Close(l.epfd))
	}
	return errors.Join(append(errs, unix.Close(l.wakeFD))...)
}

// SetReleaseHook has f run just before the frames of each receive batch are
// given back to the kernel: until then they are valid, so an engine can
// finish with the whole batch at once (the verbs engine writes the payloads
// bound for other processes' memory in one call there).
func (l *FrameLink) SetReleaseHook(f func()) { l.releaseHook = f }
