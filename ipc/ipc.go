// Package ipc is what the daemon and its clients share of the operating
// system: the control socket (a SOCK_SEQPACKET unix socket whose abstract
// name belongs to the network namespace), file descriptors passed over it,
// sealed memfd mappings and notification pipes.
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

// Hello opens the session: the daemon's device (its extensible tail as
// much of it as the daemon knows, zeros past that), and the doorbell page,
// the client's end of the session's doorbell and the read end of its
// asynchronous events' pipe (the caller's to close). A daemon that does not
// serve this library's uverbs.ABIVersion refuses it: an error wrapping
// EPROTONOSUPPORT that says so.
func (c *Conn) Hello() (uverbs.DeviceInfo, uverbs.DeviceInfoExt, []int, error) {
	return c.hello(false)
}

// HelloVersionOnly is Hello as libraries before HELLO's extensible request
// greeted, with the version alone: for a daemon from before it, which hangs
// up on more (and sends the whole reply tail it has).
func (c *Conn) HelloVersionOnly() (uverbs.DeviceInfo, uverbs.DeviceInfoExt, []int, error) {
	return c.hello(true)
}

func (c *Conn) hello(versionOnly bool) (uverbs.DeviceInfo, uverbs.DeviceInfoExt, []int, error) {
	var info uverbs.DeviceInfo
	var ext uverbs.DeviceInfoExt
	hello := uverbs.Hello{Version: uverbs.ABIVersion, ReplyExt: uint16(uverbs.ExtLen(ext))}
	n := uverbs.ExtLen(hello)
	if versionOnly {
		n = 2 // the first field
	}
	d, fds, err := c.Call(uverbs.OpHello, func(e *uverbs.Encoder) { e.PutExt(&hello, n) })
	if errors.Is(err, syscall.EPROTONOSUPPORT) {
		return info, ext, nil, fmt.Errorf("ipc: the daemon does not serve ABI version %d, this library's (library and daemon from releases too far apart): %w",
			uverbs.ABIVersion, err)
	}
	if err != nil {
		return info, ext, nil, err
	}
	info.Get(d)
	d.GetExt(&ext)
	if err := d.End(); err != nil || len(fds) != 3 {
		CloseAll(fds)
		return info, ext, nil, fmt.Errorf("ipc: HELLO reply with %d fds: %w", len(fds), errors.Join(err, uverbs.ErrMalformed))
	}
	return info, ext, fds, nil
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
	msg, fds, _, err = c.RecvFrom()
	return msg, fds, err
}

// PassCred asks the kernel to tell, with each message received from now
// on, which process sent it (RecvFrom).
func (c *Conn) PassCred() error {
	raw, err := c.c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("ipc: SO_PASSCRED: %w", serr)
	}
	return nil
}

// RecvFrom is Recv that also tells the message's sender as the kernel saw
// it at send time (SCM_CREDENTIALS, with PassCred): a process holding the
// connection, which need not be the one that connected. Its PID is 0 when
// unknown (sent before PassCred, or without it).
func (c *Conn) RecvFrom() (msg []byte, fds []int, from Peer, err error) {
	buf := make([]byte, uverbs.MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*maxFDs)+unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, Peer{}, err
	}
	if oobn > 0 {
		fds, from, err = parseControl(oob[:oobn])
	}
	if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		err = fmt.Errorf("ipc: message or its fds truncated")
	}
	if err == nil && n == 0 {
		err = fmt.Errorf("ipc: empty message")
	}
	if err != nil {
		CloseAll(fds)
		return nil, nil, Peer{}, err
	}
	return buf[:n], fds, from, nil
}

// maxFDs is the most fds one message carries.
const maxFDs = uverbs.MaxFDs

// parseControl takes the fds and the sender's credentials from a
// message's control data.
func parseControl(oob []byte) ([]int, Peer, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, Peer{}, fmt.Errorf("ipc: control message: %w", err)
	}
	var fds []int
	var from Peer
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case unix.SCM_RIGHTS:
			got, err := unix.ParseUnixRights(&m)
			if err != nil {
				CloseAll(fds)
				return nil, Peer{}, fmt.Errorf("ipc: rights: %w", err)
			}
			fds = append(fds, got...)
		case unix.SCM_CREDENTIALS:
			if cred, err := unix.ParseUnixCredentials(&m); err == nil {
				from = Peer{PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}
			}
		}
	}
	return fds, from, nil
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
// shrinking, be tmpfs memory (not hugetlbfs) and hold at least size bytes:
// else the other side could make this side's accesses fault (SIGBUS). It
// takes fd over.
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
	// Only tmpfs (shmem) memory: a fault in its mapping finds or allocates
	// a page. A hugetlbfs memfd's pages are reserved at mmap, but the other
	// side can punch them out (a shrink seal does not forbid that) and a
	// later fault with the pool empty is SIGBUS.
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return nil, fmt.Errorf("ipc: statfs memfd: %w", err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return nil, fmt.Errorf("ipc: memfd on file system %#x, not tmpfs: %w", fs.Type, unix.EINVAL)
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

// Notifications, both ways, go through channels of their own, one per
// object, whose two ends are distinct open file descriptions: the side
// that signals keeps one, the side that waits the other, and neither is
// ever shared. A signal is one byte written without blocking: a full
// channel (EAGAIN) already holds a pending wakeup, and nothing the other
// side does to its own end (clearing its O_NONBLOCK, never reading,
// reading from it) can block the signaller or take another channel's
// wakeups. The waiter drains whatever bytes are there; end of file means
// the signaller closed its end (its object, or the whole process, is
// gone). The daemon keeps the write end of each pipe to a client (CQ
// completions, asynchronous events, CM events: NewSignalPipe) and its end
// of each client's doorbell (NewDoorbell).

// pipeBytes is a notification pipe's capacity: a page, the least the
// kernel gives; a signal is one byte and only the first unread one counts.
var pipeBytes = os.Getpagesize()

// ErrHangup is what Wait returns once the signaller closed its end.
var ErrHangup = fmt.Errorf("ipc: notification channel closed by its signaller: %w", io.EOF)

// Signaler is the write end of a notification pipe (or the ringing end of
// a doorbell).
type Signaler struct {
	f  *os.File
	rc syscall.RawConn
}

// Waiter is the read end of a notification pipe (or a doorbell's).
type Waiter struct{ f *os.File }

func newPipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return -1, -1, fmt.Errorf("ipc: notification pipe: %w", err)
	}
	// Best effort: a user over its pipe-user-pages quota gets a page anyway.
	_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, pipeBytes)
	return p[0], p[1], nil
}

// NewSignalPipe makes a channel this side signals: the Signaler it keeps
// and the read end's fd, to send to the waiter (the caller's to close).
func NewSignalPipe() (*Signaler, int, error) {
	r, w, err := newPipe()
	if err != nil {
		return nil, -1, err
	}
	return SignalerOf(w), r, nil
}

// NewDoorbell makes a channel the other side rings and this side waits on:
// the Waiter it keeps and the other end's fd, to send (the caller's to
// close). It is a stream socket pair rather than a pipe: a C client rings
// with send(MSG_DONTWAIT|MSG_NOSIGNAL), which neither blocks whatever it
// did to its description's flags nor raises SIGPIPE in the application
// once the daemon is gone. This side's end is shut for writing: the other
// side reads nothing from its own.
func NewDoorbell() (*Waiter, int, error) {
	own, other, err := NewRawDoorbell()
	if err != nil {
		return nil, -1, err
	}
	return WaiterOf(own), other, nil
}

// NewRawDoorbell is NewDoorbell with this side's end a bare non-blocking
// descriptor, outside Go's poller, for a waiter that waits on it by other
// means (a device's engine, in its own wait set: verbs.Device.WatchDoorbell).
// Both fds are the caller's to close.
func NewRawDoorbell() (own, other int, err error) {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("ipc: doorbell: %w", err)
	}
	if err := unix.Shutdown(p[0], unix.SHUT_WR); err != nil {
		CloseAll(p[:])
		return -1, -1, fmt.Errorf("ipc: doorbell: %w", err)
	}
	// Best effort: few rings can be pending (each is a buffer in the kernel);
	// more say nothing more.
	_ = unix.SetsockoptInt(p[1], unix.SOL_SOCKET, unix.SO_SNDBUF, pipeBytes)
	return p[0], p[1], nil
}

// SignalerOf wraps the write end of a notification pipe, taking it over.
func SignalerOf(fd int) *Signaler {
	_ = unix.SetNonblock(fd, true)
	f := os.NewFile(uintptr(fd), "notify-w")
	rc, _ := f.SyscallConn() // fails only for a nil file
	return &Signaler{f: f, rc: rc}
}

// WaiterOf wraps the read end of a notification pipe, taking it over.
func WaiterOf(fd int) *Waiter {
	_ = unix.SetNonblock(fd, true)
	return &Waiter{f: os.NewFile(uintptr(fd), "notify-r")}
}

// Signal wakes the waiter. It never blocks: one write(2) on a non-blocking
// description only this side holds, whose EAGAIN means a wakeup is
// pending, and whose EPIPE means no one waits any more. After Close it
// does nothing (the raw connection refuses a closed file: a racing
// Signal never writes to a reused descriptor).
func (s *Signaler) Signal() {
	_ = s.rc.Write(func(fd uintptr) bool {
		one := [1]byte{1}
		_, _ = unix.Write(int(fd), one[:])
		return true // never wait for room
	})
}

// Close closes the write end: the waiter then sees ErrHangup.
func (s *Signaler) Close() error { return s.f.Close() }

// Wait blocks, in Go's poller, until the channel was signalled, and drains
// it; ErrHangup once the signaller closed its end, ctx's error once ctx
// ends.
func (w *Waiter) Wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, pipeBytes)
	_, err := w.f.Read(buf)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		_ = w.f.SetReadDeadline(time.Time{})
		return ctx.Err()
	case errors.Is(err, io.EOF):
		return ErrHangup
	default:
		return fmt.Errorf("ipc: notification channel: %w", err)
	}
}

// Close closes the read end, ending a Wait in progress.
func (w *Waiter) Close() error { return w.f.Close() }

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
	return WaitPidfd(ctx, f)
}

// WaitPidfd is WaitExit on a pidfd the caller holds (and closes).
func WaitPidfd(ctx context.Context, pidfd *os.File) error {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return fmt.Errorf("ipc: pidfd: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = pidfd.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0 || (err != nil && !errors.Is(err, unix.EINTR))
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("ipc: waiting on a pidfd: %w", err)
	}
	return nil
}

// Exited reports whether the process of pidfd has exited (a pidfd becomes
// readable then, and stays so).
func Exited(pidfd *os.File) (bool, error) {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return false, fmt.Errorf("ipc: pidfd: %w", err)
	}
	var n int
	var perr error
	if err := rc.Control(func(fd uintptr) {
		for {
			n, perr = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			if !errors.Is(perr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return false, fmt.Errorf("ipc: pidfd: %w", err)
	}
	if perr != nil {
		return false, fmt.Errorf("ipc: poll pidfd: %w", perr)
	}
	return n > 0, nil
}

// PeerPidfd is a pidfd of c's peer, the process that connected (pid is
// its SO_PEERCRED pid). Taken from the socket (SO_PEERPIDFD, Linux 6.5), it
// names that process even once it has exited and its pid was reused. It is
// non-blocking, for WaitPidfd.
func PeerPidfd(c *net.UnixConn, pid int) (*os.File, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, gerr := -1, error(nil)
	if err := raw.Control(func(s uintptr) {
		fd, gerr = unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	}); err != nil {
		return nil, err
	}
	if errors.Is(gerr, unix.ENOPROTOOPT) {
		// Before Linux 6.5: a pidfd of the pid SO_PEERCRED recorded. It
		// cannot rule out that the peer exited and its pid went to another
		// process between its connect and this open.
		fd, gerr = unix.PidfdOpen(pid, 0)
	}
	if gerr != nil {
		return nil, fmt.Errorf("ipc: pidfd of the peer %d: %w", pid, gerr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ipc: pidfd of the peer %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
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
