// Package ipc is what the daemon and its clients share of the operating
// system: the control socket (a SOCK_SEQPACKET unix socket whose abstract
// name belongs to the network namespace), file descriptors passed over it,
// sealed memfd mappings and eventfds.
package ipc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/uverbs"
)

// SocketName is the abstract unix socket the daemon for ifname listens on.
// An abstract name belongs to its network namespace, so two namespaces may
// each run a daemon for their own eth0.
func SocketName(ifname string) string { return "@xdproce/" + ifname }

// Listen opens the daemon's control socket for ifname.
func Listen(ifname string) (*net.UnixListener, error) {
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: SocketName(ifname), Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("ipc: listen for %s: %w", ifname, err)
	}
	return l, nil
}

// Dial connects to the daemon for ifname, once Trusted says its socket's
// listener may be trusted (EACCES otherwise): an abstract name has no
// permissions, so any local user can bind it while the daemon is not
// listening and would receive everything the client sends.
func Dial(ctx context.Context, ifname string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", SocketName(ifname))
	if err != nil {
		return nil, fmt.Errorf("ipc: no xdproce daemon for %s: %w", ifname, err)
	}
	uc := c.(*net.UnixConn)
	peer, err := PeerOf(uc)
	if err == nil {
		err = Trusted(peer.UID)
	}
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("ipc: the socket of %s: %w", ifname, err)
	}
	return &Conn{c: uc}, nil
}

// DaemonUIDEnv names the environment variable that adds a user whose
// daemons clients trust, for a daemon run as its own user.
const DaemonUIDEnv = "XDPROCE_DAEMON_UID"

// Trusted reports (nil, or an error wrapping EACCES) whether a server of
// user uid may be trusted: root, this process's effective user (its own
// daemon), or the user DaemonUIDEnv names — read only when the process
// runs with its real ids, as glibc's secure_getenv.
func Trusted(uid uint32) error {
	if uid == 0 || int(uid) == os.Geteuid() {
		return nil
	}
	if os.Getuid() == os.Geteuid() && os.Getgid() == os.Getegid() {
		if v, ok := os.LookupEnv(DaemonUIDEnv); ok {
			if u, err := strconv.ParseUint(v, 10, 32); err == nil && u != math.MaxUint32 && uint32(u) == uid {
				return nil
			}
		}
	}
	return fmt.Errorf("served by uid %d, not root, uid %d or $%s: %w", uid, os.Geteuid(), DaemonUIDEnv, unix.EACCES)
}

// Conn is one end of a control connection.
type Conn struct {
	c   *net.UnixConn
	mu  sync.Mutex // a client's requests: one in flight at a time
	seq uint32
}

// Call sends one request and returns its reply's body and fds (the
// caller's to close); a reply with an errno is that errno.
func (c *Conn) Call(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, []int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	e := uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: op, Seq: c.seq})
	if body != nil {
		body(e)
	}
	if err := c.Send(e.Bytes(), fds...); err != nil {
		return nil, nil, err
	}
	msg, got, err := c.Recv()
	if err != nil {
		return nil, nil, err
	}
	h, d, err := uverbs.Decode(msg)
	if err == nil && (h.Op != op || h.Seq != c.seq) {
		err = fmt.Errorf("ipc: %v #%d answered as %v #%d", op, c.seq, h.Op, h.Seq)
	}
	if err == nil && h.Errno != 0 {
		err = fmt.Errorf("%v: %w", op, syscall.Errno(h.Errno))
	}
	if err != nil {
		CloseAll(got)
		return nil, nil, err
	}
	return d, got, nil
}

// CallNoFDs is Call for replies that carry no fds.
func (c *Conn) CallNoFDs(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, error) {
	d, got, err := c.Call(op, body, fds...)
	if err == nil && len(got) > 0 {
		CloseAll(got)
		err = fmt.Errorf("ipc: the %v reply carried fds", op)
	}
	return d, err
}

// Hello opens the session: the daemon's device, and the doorbell page, the
// doorbell eventfd and the asynchronous events' eventfd (the caller's to
// close).
func (c *Conn) Hello() (uverbs.DeviceInfo, []int, error) {
	var info uverbs.DeviceInfo
	d, fds, err := c.Call(uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
	if err != nil {
		return info, nil, err
	}
	info.Get(d)
	if err := d.End(); err != nil || len(fds) != 3 {
		CloseAll(fds)
		return info, nil, fmt.Errorf("ipc: HELLO reply with %d fds: %w", len(fds), errors.Join(err, uverbs.ErrMalformed))
	}
	return info, fds, nil
}

// NewConn wraps an accepted connection.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// SetDeadline bounds the next reads and writes.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Send writes one message with fds attached.
func (c *Conn) Send(msg []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.c.WriteMsgUnix(msg, oob, nil); err != nil {
		return fmt.Errorf("ipc: send: %w", err)
	}
	return nil
}

// Recv reads one message and the fds attached to it; the caller owns them.
func (c *Conn) Recv() (msg []byte, fds []int, err error) {
	buf := make([]byte, uverbs.MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*maxFDs))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if oobn > 0 {
		fds, err = parseRights(oob[:oobn])
	}
	if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		err = fmt.Errorf("ipc: message or its fds truncated")
	}
	if err == nil && n == 0 {
		err = fmt.Errorf("ipc: empty message")
	}
	if err != nil {
		CloseAll(fds)
		return nil, nil, err
	}
	return buf[:n], fds, nil
}

// maxFDs is the most fds one message carries.
const maxFDs = 4

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("ipc: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			CloseAll(fds)
			return nil, fmt.Errorf("ipc: rights: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// CloseAll closes fds.
func CloseAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Peer is who is at the other end of a connection (SO_PEERCRED).
type Peer struct {
	PID      int
	UID, GID uint32
}

// PeerOf reads the credentials of c's peer, as the kernel recorded them at
// connect time.
func PeerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if gerr != nil {
		return Peer{}, fmt.Errorf("ipc: SO_PEERCRED: %w", gerr)
	}
	return Peer{PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}, nil
}

// Mapping is shared memory: a memfd and its mapping in this process.
type Mapping struct {
	Mem []byte
	FD  int // -1 once closed; the mapping outlives it
}

// NewMapping creates a sealed memfd of size bytes and maps it: the other
// side can neither shrink nor grow it, so an access inside the mapping never
// faults.
func NewMapping(name string, size int) (*Mapping, error) { return newMapping(name, size, false) }

// NewReadOnlyMapping is NewMapping for memory the other side may only read:
// once this side mapped it, no new writable mapping of it can be made.
func NewReadOnlyMapping(name string, size int) (*Mapping, error) { return newMapping(name, size, true) }

func newMapping(name string, size int, readOnly bool) (*Mapping, error) {
	fd, err := unix.MemfdCreate("xdproce-"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("ipc: memfd for %s: %w", name, err)
	}
	size = pageRound(size)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ipc: size memfd for %s: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ipc: map memfd for %s: %w", name, err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if readOnly {
		seals |= unix.F_SEAL_FUTURE_WRITE
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, fmt.Errorf("ipc: seal memfd for %s: %w", name, err)
	}
	return &Mapping{Mem: mem, FD: fd}, nil
}

// MapShared maps a memfd the other side sent. It must be sealed against
// shrinking (else it could make this side's accesses fault) and hold at
// least size bytes. It takes fd over.
func MapShared(fd, size int) (*Mapping, error) {
	return mapShared(fd, size, unix.PROT_READ|unix.PROT_WRITE)
}

// MapSharedReadOnly is MapShared for memory this side only reads.
func MapSharedReadOnly(fd, size int) (*Mapping, error) { return mapShared(fd, size, unix.PROT_READ) }

func mapShared(fd, size, prot int) (*Mapping, error) {
	defer unix.Close(fd)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("ipc: not a sealable memfd: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("ipc: memfd not sealed against shrinking: %w", unix.EINVAL)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("ipc: stat memfd: %w", err)
	}
	if size <= 0 || st.Size < int64(size) {
		return nil, fmt.Errorf("ipc: memfd of %d bytes, %d needed: %w", st.Size, size, unix.EINVAL)
	}
	mem, err := unix.Mmap(fd, 0, pageRound(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ipc: map memfd: %w", err)
	}
	return &Mapping{Mem: mem[:size], FD: -1}, nil
}

// CloseFD closes the memfd, keeping the mapping.
func (m *Mapping) CloseFD() {
	if m.FD >= 0 {
		unix.Close(m.FD)
		m.FD = -1
	}
}

// Unmap releases the mapping (and the memfd if still open).
func (m *Mapping) Unmap() error {
	m.CloseFD()
	if m.Mem == nil {
		return nil
	}
	err := unix.Munmap(m.Mem[:pageRound(len(m.Mem)):pageRound(len(m.Mem))])
	m.Mem = nil
	return err
}

func pageRound(n int) int {
	p := os.Getpagesize()
	return (n + p - 1) / p * p
}

// Eventfd is a counter one side signals and the other waits on.
type Eventfd struct{ f *os.File }

// NewEventfd creates an eventfd.
func NewEventfd() (*Eventfd, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("ipc: eventfd: %w", err)
	}
	return EventfdOf(fd), nil
}

// EventfdOf wraps an eventfd received from the other side, taking it over.
func EventfdOf(fd int) *Eventfd {
	_ = unix.SetNonblock(fd, true)
	return &Eventfd{f: os.NewFile(uintptr(fd), "eventfd")}
}

// FD is the eventfd's descriptor, to send.
func (e *Eventfd) FD() int { return int(e.f.Fd()) }

// Signal adds one to the counter, waking a waiter.
func (e *Eventfd) Signal() {
	var one = [8]byte{1}
	_, _ = e.f.Write(one[:])
}

// Wait blocks until the counter is non-zero and resets it, or ctx ends.
func (e *Eventfd) Wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = e.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var buf [8]byte
	_, err := e.f.Read(buf[:])
	if err != nil {
		if ctx.Err() != nil {
			_ = e.f.SetReadDeadline(time.Time{})
			return ctx.Err()
		}
		return fmt.Errorf("ipc: eventfd: %w", err)
	}
	return nil
}

// Close closes the eventfd.
func (e *Eventfd) Close() error { return e.f.Close() }

// IsClosed reports whether err means the connection is gone.
func IsClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)
}

// Peer is who is at the other end of the connection.
func (c *Conn) Peer() (Peer, error) { return PeerOf(c.c) }

// WaitExit waits until process pid has exited, or ctx ends. It parks in
// Go's network poller on a pidfd, which becomes readable when the process
// exits (before its pid can be reused).
func WaitExit(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ipc: pidfd of %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("ipc: pidfd of %d: %w", pid, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0 || (err != nil && !errors.Is(err, unix.EINTR))
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("ipc: waiting for %d: %w", pid, err)
	}
	return nil
}

// NewRing creates a sealed memfd holding a ring of slots slots of size
// bytes (uverbs.Ring), for the other side to map with MapRing.
func NewRing(name string, slots uint32, size int) (*Mapping, *uverbs.Ring, error) {
	m, err := NewMapping(name, uverbs.RingBytes(slots, size))
	if err != nil {
		return nil, nil, err
	}
	r, err := uverbs.NewRing(m.Mem, slots, size)
	if err != nil {
		return nil, nil, errors.Join(err, m.Unmap())
	}
	return m, r, nil
}

// MapRing maps a ring the other side created with NewRing (MapShared's
// checks apply). It takes fd over.
func MapRing(fd int, slots uint32, size int) (*Mapping, *uverbs.Ring, error) {
	m, err := MapShared(fd, uverbs.RingBytes(slots, size))
	if err != nil {
		return nil, nil, err
	}
	r, err := uverbs.NewRing(m.Mem, slots, size)
	if err != nil {
		return nil, nil, errors.Join(err, m.Unmap())
	}
	return m, r, nil
}
