package verbs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/nsenter"
	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/ring"
)

// Options tune Open.
type Options struct {
	// XDPMode forces native or generic XDP; the default tries native first.
	XDPMode loader.Mode
	// Queues limits the RX queues served; 0 serves all of the link's.
	Queues int
	// OneChunk keeps each frame in one UMEM chunk, as on a kernel without
	// AF_XDP multi-buffer: the active MTU is capped to 2048 (nic.Config).
	OneChunk bool
	// BusyPoll keeps the engine spinning on the rings instead of sleeping;
	// see DeviceConfig.BusyPoll.
	BusyPoll bool
	// AckHold: see DeviceConfig.AckHold.
	AckHold time.Duration
	// Logger receives setup notes. Default slog.Default().
	Logger *slog.Logger
}

// Open starts a device on the network interface ifname of the calling OS
// thread's network namespace: it attaches the XDP steering program, opens
// one AF_XDP socket per RX queue, and runs the transport on them. Close
// undoes all of it.
func Open(ctx context.Context, ifname string, opts Options) (*Device, error) {
	port, err := nic.Open(ctx, nic.Config{Ifname: ifname, XDPMode: opts.XDPMode, Queues: opts.Queues, OneChunk: opts.OneChunk, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("verbs: current network namespace: %w", err), port.Close())
	}
	gids := make([]netip.Addr, len(port.GIDs()))
	for i, g := range port.GIDs() {
		gids[i] = netip.AddrFrom16(g)
	}
	link, err := newXSKLink(port)
	if err != nil {
		return nil, errors.Join(err, port.Close(), ns.Close())
	}
	cfg := DeviceConfig{
		MAC: port.Link().MAC, GIDs: gids, ActiveMTU: port.ActiveMTU(), DataPath: port.Features().String(), BusyPoll: opts.BusyPoll, AckHold: opts.AckHold,
		Resolve: func(ctx context.Context, ip netip.Addr) (mac net.HardwareAddr, err error) {
			err = nsenter.Do(ns, func() error {
				mac, err = loader.ResolveNeighbor(ctx, ifname, ip)
				return err
			})
			return mac, err
		},
	}
	d, err := NewDevice(link, cfg)
	if err != nil {
		return nil, errors.Join(err, link.close(), port.Close(), ns.Close())
	}
	d.onClose = func() error { return errors.Join(link.close(), port.Close(), ns.Close()) } // the link checks its frames before the sockets go
	return d, nil
}

// xskLink is a Link over a port's AF_XDP sockets: it receives from every
// queue and transmits on the first. Only the engine goroutine uses it.
type xskLink struct {
	socks []*ring.Socket
	// rx are the sockets' receive sides, read in turn from rxNext so that
	// every queue gets its share of each batch (rxQueue: fakes in tests).
	rx      []rxQueue
	rxNext  int
	pkts    []ring.Packet
	tx      []ring.TXFrame // tx[:ready] committed frames, then reserved buffers
	ready   int
	scratch []byte
	wakeFD  int      // eventfd: the doorbell
	set     *os.File // epoll set of the sockets and wakeFD, in Go's poller
	setConn syscall.RawConn
	events  []unix.EpollEvent
	max     int
}

func newXSKLink(p *nic.Port) (*xskLink, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("verbs: doorbell eventfd: %w", err)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("verbs: epoll set: %w", err), unix.Close(efd))
	}
	fds := []int{efd}
	for _, s := range p.Sockets() {
		fds = append(fds, s.FD())
	}
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return nil, errors.Join(fmt.Errorf("verbs: epoll add: %w", err), unix.Close(epfd), unix.Close(efd))
		}
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		return nil, errors.Join(fmt.Errorf("verbs: epoll set: %w", err), unix.Close(epfd), unix.Close(efd))
	}
	set := os.NewFile(uintptr(epfd), "xdproce-wait")
	conn, err := set.SyscallConn()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("verbs: epoll set: %w", err), set.Close(), unix.Close(efd))
	}
	rx := make([]rxQueue, len(p.Sockets()))
	for i, s := range p.Sockets() {
		rx[i] = s
	}
	return &xskLink{
		socks:   p.Sockets(),
		rx:      rx,
		pkts:    make([]ring.Packet, rxBatch),
		tx:      make([]ring.TXFrame, txBatch),
		scratch: make([]byte, ring.MaxChunkSize*ring.MaxSegments),
		wakeFD:  efd,
		set:     set,
		setConn: conn,
		events:  make([]unix.EpollEvent, len(fds)),
		max:     p.Link().MTU + 18,
	}, nil
}

// MaxFrame implements Link.
func (l *xskLink) MaxFrame() int { return l.max }

// ringDrops sums the frames the kernel dropped on every socket for want of
// room in the RX ring or entries in the fill ring.
func (l *xskLink) ringDrops() uint64 {
	var n uint64
	for _, s := range l.socks {
		if st, err := s.Statistics(); err == nil {
			n += st.RXDropped + st.RXRingFull + st.RXFillRingEmptyDescs
		}
	}
	return n
}

// Send implements Link: frames are copied into UMEM TX buffers. The engine
// builds its frames in place through TXBuffer instead; Send serves callers
// that hold frames elsewhere.
func (l *xskLink) Send(frames [][]byte) error {
	for _, f := range frames {
		b := l.TXBuffer()
		if b == nil {
			break // congested: the rest are lost, the transport recovers
		}
		l.CommitTX(copy(b, f))
	}
	return l.FlushTX()
}

// TXBuffer implements frameLender: the next free UMEM transmit buffer, or
// nil when all are in flight even after reaping completions.
func (l *xskLink) TXBuffer() []byte {
	if l.ready == len(l.tx) {
		if err := l.FlushTX(); err != nil || l.ready == len(l.tx) {
			return nil
		}
	}
	f := &l.tx[l.ready]
	if f.Buf() == nil {
		s := l.socks[0]
		// AllocTX reserves from here up to the first buffer still held.
		if s.AllocTX(l.tx[l.ready:]) == 0 {
			s.Complete()
			if s.AllocTX(l.tx[l.ready:]) == 0 {
				return nil
			}
		}
	}
	return f.Buf()
}

// CommitTX implements frameLender.
func (l *xskLink) CommitTX(n int) {
	l.tx[l.ready].Len = n
	l.ready++
}

// FlushTX implements frameLender: submit the committed frames and kick the
// kernel until they are sent or the TX ring stays full, when the rest are
// dropped as a congested NIC would.
func (l *xskLink) FlushTX() error {
	s := l.socks[0]
	var err error
	for spins := 0; l.ready > 0 && spins < 1000; spins++ {
		s.Complete()
		sent, serr := s.Submit(l.tx[:l.ready])
		// Submitted entries are cleared; move the rest (committed, then
		// merely reserved) to the front.
		copy(l.tx, l.tx[sent:])
		clear(l.tx[len(l.tx)-sent:])
		l.ready -= sent
		if serr != nil && !errors.Is(serr, ring.ErrRingFull) {
			err = fmt.Errorf("verbs: AF_XDP submit: %w", serr)
			break
		}
		if kerr := s.Kick(); kerr != nil {
			err = fmt.Errorf("verbs: AF_XDP kick: %w", kerr)
			break
		}
	}
	if l.ready > 0 { // still no room: drop them
		err = errors.Join(err, s.FreeTX(l.tx[:l.ready]))
		copy(l.tx, l.tx[l.ready:])
		clear(l.tx[len(l.tx)-l.ready:])
		l.ready = 0
	}
	for i := 0; s.TXPending() > 0 && i < 64; i++ {
		if kerr := s.Kick(); kerr != nil {
			return errors.Join(err, fmt.Errorf("verbs: AF_XDP kick: %w", kerr))
		}
	}
	return err
}

// rxQueue is what Receive needs of a socket.
type rxQueue interface {
	Receive(pkts []ring.Packet) int
	Release(pkts []ring.Packet) error
	Refill() (int, error)
}

// Receive implements Link, joining a frame's pieces (the engine uses
// ReceiveSplit, which does not).
func (l *xskLink) Receive(max int, fn func(frame []byte)) (int, error) {
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

// ReceiveSplit receives up to max frames and hands each over in its pieces,
// as the engine's splitReceiver. Each call starts at the queue after the one
// the last call started at: a batch that fills up on one busy queue must not
// leave the others unread until their rings overflow. A frame in one UMEM
// chunk is handed over as is, one in two (PMTU 4096 in 4 KiB chunks) as
// head and tail without joining them, so its payload is copied once, into
// registered memory. A longer chain, which no RoCE frame needs, is gathered.
func (l *xskLink) ReceiveSplit(max int, fn func(head, tail []byte)) (int, error) {
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
		if err := s.Release(l.pkts[:got]); err != nil {
			return total, fmt.Errorf("verbs: AF_XDP release: %w", err)
		}
		if _, err := s.Refill(); err != nil {
			return total, fmt.Errorf("verbs: AF_XDP refill: %w", err)
		}
		total += got
		if total >= max {
			break
		}
	}
	return total, nil
}

// Wake implements Link: the eventfd in the wait set is the doorbell, so a
// post wakes a sleeping engine at once.
func (l *xskLink) Wake() {
	one := [8]byte{1}
	_, _ = unix.Write(l.wakeFD, one[:]) // EAGAIN means it is already signalled
}

// Wait implements Link. The engine parks in Go's network poller on an epoll
// set of every queue's socket and the doorbell, rather than blocking its
// thread in poll(2): a parked goroutine gives its processor back at once, so
// the other goroutines (the application, another device's engine) run
// without waiting for the runtime to notice a blocked system call.
func (l *xskLink) Wait(d time.Duration) {
	_ = l.set.SetReadDeadline(time.Now().Add(d))
	_ = l.setConn.Read(func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), l.events, 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	})
	var b [8]byte
	_, _ = unix.Read(l.wakeFD, b[:]) // reset the doorbell; EAGAIN if it did not ring
}

func (l *xskLink) close() error {
	return errors.Join(l.checkFrames(), l.set.Close(), unix.Close(l.wakeFD))
}

// checkFrames gives back the transmit buffers the link still reserves and
// checks, once the engine has stopped, that every UMEM frame is accounted
// for and none is held: a frame a receive path forgot to release, or a
// transmit buffer lost, would show here (every test that closes a device
// on AF_XDP checks it).
func (l *xskLink) checkFrames() error {
	var errs []error
	if n := len(l.tx); n > 0 && l.tx[0].Buf() != nil {
		held := 0
		for held < n && l.tx[held].Buf() != nil {
			held++
		}
		errs = append(errs, l.socks[0].FreeTX(l.tx[:held]))
		clear(l.tx)
		l.ready = 0
	}
	for _, s := range l.socks {
		if err := s.CheckFrames(); err != nil {
			errs = append(errs, fmt.Errorf("verbs: queue %d: UMEM frames: %w", s.Queue(), err))
			continue
		}
		if st := s.FrameStats(); st.RXHeld != 0 || st.TXHeld != 0 {
			errs = append(errs, fmt.Errorf("verbs: queue %d: %d RX frames and %d TX buffers still held at close", s.Queue(), st.RXHeld, st.TXHeld))
		}
	}
	return errors.Join(errs...)
}
