package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/verbs"
)

// writeAccess is the access that writes to a region: the kernel pins its
// pages for writing.
const writeAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic

// client is the process at the other end of a control connection, bound at
// attach to that process and to the address space it had then: never to
// its pid, which another process gets once it exits, nor to an image it
// runs after an execve (which may be setuid, or simply not the one that
// registered its memory). The session's goroutine owns it.
type client struct {
	peer  ipc.Peer
	pidfd *os.File // readable once the process exited
	// dir is /proc/PID, opened while the pidfd said the process lived: a
	// /proc directory names a process, not a number, so what is opened
	// through it is this process's even after its pid was reused.
	dir int
	// mem and maps are /proc/PID/mem and /proc/PID/maps as opened at
	// attach: each pins the address space it was opened on, which an
	// execve drops (reads and writes through them then move nothing), so
	// they never reach the image a later execve brings. -1 when the
	// process may not have its own memory registered (memErr says why).
	mem, maps int
	memErr    error
	stage     *sync.Pool // procMem's staging buffers
}

// identify binds a new connection to the process that connected, by the
// pidfd the kernel keeps with the socket.
func identify(c *net.UnixConn, peer ipc.Peer) (*client, error) {
	pidfd, err := ipc.PeerPidfd(c, peer.PID)
	if err != nil {
		return nil, err
	}
	return bindProcess(peer, pidfd)
}

// bindProcess opens the /proc directory of the process of pidfd (taking
// pidfd over), and confirms with the pidfd that it is that process's: it
// was still alive after the open, so its pid was not yet anyone else's.
func bindProcess(peer ipc.Peer, pidfd *os.File) (*client, error) {
	cl := &client{peer: peer, pidfd: pidfd, dir: -1, mem: -1, maps: -1, stage: newStagePool()}
	var err error
	cl.dir, err = unix.Open("/proc/"+strconv.Itoa(peer.PID), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		var gone bool
		gone, err = ipc.Exited(pidfd)
		if err == nil && gone {
			err = errClientGone
		}
	}
	if err != nil {
		cl.close(true)
		return nil, fmt.Errorf("daemon: process %d: %w", peer.PID, err)
	}
	return cl, nil
}

// openMem opens the client's address space for its own-memory regions,
// then checks that it is the peer's own and plain: an execve after the open
// leaves the handles on the old, dead address space; one before it shows
// here (the open waits out an execve in progress: the kernel switches the
// address space and commits the new credentials under the lock the open
// takes, so a handle on the new image comes with its credentials). A process running a setuid or setgid image, or one with file
// capabilities (any non-dumpable one), is another identity than the
// peer's credentials: its memory is not reachable this way (EPERM), as
// the peer could not reach it with ptrace either. Root's processes are
// root's to reach.
func (cl *client) openMem() {
	var err error
	if cl.mem, err = unix.Openat(cl.dir, "mem", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		cl.maps, err = unix.Openat(cl.dir, "maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err == nil && cl.peer.UID != 0 {
		err = cl.checkPlain()
	}
	if err != nil {
		cl.closeMem()
		cl.memErr = fmt.Errorf("daemon: the memory of process %d: %w", cl.peer.PID, err)
	}
}

// checkPlain: all four user and group IDs the peer's (SO_PEERCRED's
// effective ones), and the process dumpable (else the kernel makes root
// the owner of its /proc files).
func (cl *client) checkPlain() error {
	status, err := cl.read("status")
	if err != nil {
		return err
	}
	for _, f := range []struct {
		key  string
		want uint32
	}{{"Uid:", cl.peer.UID}, {"Gid:", cl.peer.GID}} {
		ids, ok := statusField(status, f.key)
		if !ok || len(ids) != 4 {
			return fmt.Errorf("no %s line: %w", f.key, syscall.EPERM)
		}
		for _, id := range ids {
			if id != strconv.FormatUint(uint64(f.want), 10) {
				return fmt.Errorf("%s %s, not the peer's %d: %w", f.key, strings.Join(ids, " "), f.want, syscall.EPERM)
			}
		}
	}
	// The files in the directory, not the directory itself, go to root.
	var st unix.Stat_t
	if err := unix.Fstatat(cl.dir, "status", &st, 0); err != nil {
		return fmt.Errorf("stat status: %w", err)
	}
	if st.Uid != cl.peer.UID {
		return fmt.Errorf("not dumpable (its /proc files are uid %d's): %w", st.Uid, syscall.EPERM)
	}
	return nil
}

// statusField is the fields of a /proc/PID/status line.
func statusField(status []byte, key string) ([]string, bool) {
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return strings.Fields(string(v)), true
		}
	}
	return nil, false
}

// read reads a file of the client's /proc directory.
func (cl *client) read(name string) ([]byte, error) {
	fd, err := unix.Openat(cl.dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(fd)
	b, err := readAllAt(fd)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

// readAllAt reads a /proc file from its start, whatever its offset.
func readAllAt(fd int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.Pread(fd, buf, int64(len(out)))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// inGroup: whether the process has gid among its supplementary groups
// (SO_PEERCRED has only the primary group).
func (cl *client) inGroup(gid int) bool {
	status, err := cl.read("status")
	if err != nil {
		return false
	}
	groups, _ := statusField(status, "Groups:")
	for _, g := range groups {
		if g == strconv.Itoa(gid) {
			return true
		}
	}
	return false
}

// comm is the client's command name, for operators.
func (cl *client) comm() string {
	b, _ := cl.read("comm")
	return strings.TrimSpace(string(b))
}

// checkRange checks a registration of own memory by the process sender
// (the request's, SCM_CREDENTIALS): it must be the process bound at attach
// and still alive, as the kernel registers only the caller's own memory —
// another process holding the connection (a child it was passed or leaked
// to) would register the attach-time process's instead (EPERM). Then what
// ibv_reg_mr's pinning checks under the kernel: every page of
// [addr, addr+length) mapped in the attach-time address space, readable,
// and writable if the region's access writes to it (writes through
// /proc/PID/mem are forced: they would land in read-only pages). EFAULT
// otherwise, as ib_umem_get fails.
func (cl *client) checkRange(sender int, addr, length uint64, write bool) error {
	if cl == nil || cl.mem < 0 {
		if cl != nil && cl.memErr != nil {
			return cl.memErr
		}
		return syscall.EPERM
	}
	if sender != cl.peer.PID {
		return fmt.Errorf("daemon: own memory of process %d registered by process %d: %w", cl.peer.PID, sender, syscall.EPERM)
	}
	// A live process's pid is its own: the sender is the attach-time one.
	if gone, err := ipc.Exited(cl.pidfd); err != nil || gone {
		return fmt.Errorf("daemon: own memory of process %d, which exited: %w", cl.peer.PID, syscall.EPERM)
	}
	maps, err := readAllAt(cl.maps)
	if err != nil {
		return fmt.Errorf("daemon: maps of process %d: %w", cl.peer.PID, err)
	}
	if !covered(maps, addr, addr+length, write) {
		return fmt.Errorf("daemon: %#x+%d is not mapped %s in process %d: %w", addr, length, map[bool]string{false: "readable", true: "writable"}[write], cl.peer.PID, syscall.EFAULT)
	}
	return nil
}

// covered reports whether /proc/PID/maps text maps [start, end) without a
// gap, readable and, if write, writable.
func covered(maps []byte, start, end uint64, write bool) bool {
	for line := range bytes.Lines(maps) {
		if start >= end {
			break
		}
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		from, err1 := strconv.ParseUint(lo, 16, 64)
		to, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || to <= start {
			continue
		}
		if from > start {
			return false // a hole: maps lists mappings in address order
		}
		if f[1][0] != 'r' || (write && f[1][1] != 'w') {
			return false
		}
		start = to
	}
	return start >= end
}

// closeMem closes the address-space handles.
func (cl *client) closeMem() {
	for _, fd := range []*int{&cl.mem, &cl.maps} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// close lets the process go; mem too unless a region of its own memory
// could not be deregistered (an engine may still copy through it, and a
// closed descriptor's number is soon another file's).
func (cl *client) close(mem bool) {
	if mem {
		cl.closeMem()
	}
	if cl.dir >= 0 {
		unix.Close(cl.dir)
		cl.dir = -1
	}
	cl.pidfd.Close()
}
