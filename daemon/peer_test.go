package daemon

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// The test binary's helper roles (runHelper), by environment variable.
const (
	envExec     = "XDPROCE_TEST_EXEC"     // a client that registers own memory, then execs (execClient)
	envPeers    = "XDPROCE_TEST_PEERS"    // the QPNs execClient's QPs connect to
	envVictim   = "XDPROCE_TEST_VICTIM"   // the image execClient execs (victim): its path, or "self"
	envNoDump   = "XDPROCE_TEST_NODUMP"   // a process that made itself non-dumpable
	envConnect  = "XDPROCE_TEST_CONNECT"  // a process that connects to a socket and exits
	envRegMR    = "XDPROCE_TEST_REGMR"    // a process that registers own memory on an inherited connection (fd 3)
	envMapSleep = "XDPROCE_TEST_MAPSLEEP" // a process whose memory sessions register (mapSleep)
)

// runHelper runs the test binary as one of the helper processes below if
// the environment names one; it returns otherwise.
func runHelper() {
	var err error
	switch {
	case os.Getenv(envExec) != "":
		err = execClient(os.Getenv(envExec), os.Getenv(envPeers))
	case os.Getenv(envVictim) != "" && os.Getenv(envExec) == "":
		err = victim()
	case os.Getenv(envNoDump) != "":
		if err = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err == nil {
			fmt.Println("ready")
			_, err = io.Copy(io.Discard, os.Stdin)
		}
	case os.Getenv(envRegMR) != "":
		err = regMRInherited(os.Getenv(envRegMR))
	case os.Getenv(envMapSleep) != "":
		err = mapSleep()
	case os.Getenv(envConnect) != "":
		var c *ipc.Conn
		if c, err = ipc.Dial(context.Background(), os.Getenv(envConnect)); err == nil {
			_ = c // exits connected: the daemon accepts a connection whose process is gone
		}
	default:
		return
	}
	if err != nil {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// fixedAddr is where execClient's region and victim's secret live: the
// same address in the image before the execve and the one after it.
const (
	fixedAddr = 0x6e0000000000
	fixedLen  = 1 << 16
)

func mapFixed(fill byte) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, unsafe.Add(nil, fixedAddr), fixedLen, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		return nil, fmt.Errorf("map at %#x: %w", fixedAddr, err)
	}
	b := unsafe.Slice((*byte)(p), fixedLen)
	for i := range b {
		b[i] = fill
	}
	return b, nil
}

// execClient attaches to the daemon name, registers its memory at
// fixedAddr (all 'A') for remote reads and writes, connects two RC QPs to
// the peer's QPNs and prints their QPNs, the rkey and the address. On
// "exec" from stdin it execs the victim, keeping the control socket across
// the execve (as dup2 would): the daemon's session, and the region,
// outlive the image that registered it.
func execClient(name, peers string) error {
	mem, err := mapFixed('A')
	if err != nil {
		return err
	}
	var dest [2]uint32
	if _, err := fmt.Sscanf(peers, "%d,%d", &dest[0], &dest[1]); err != nil {
		return fmt.Errorf("peers %q: %w", peers, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := verbs.Dial(ctx, name)
	if err != nil {
		return err
	}
	pd, err := d.AllocPD()
	if err != nil {
		return err
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		return err
	}
	var qpn [2]uint32
	for i := range dest {
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return err
		}
		if err := qp.Connect(execPeer(dest[i], ipB, macB)); err != nil {
			return err
		}
		qpn[i] = qp.QPN()
	}
	fmt.Println(qpn[0], qpn[1], mr.RKey(), mr.Addr())
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "exec\n" {
		return fmt.Errorf("waiting for exec: %q %v", line, err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.HasPrefix(l, "socket:") {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
				return err
			}
		}
	}
	env := []string{envVictim + "=self"}
	for _, v := range os.Environ() {
		if !strings.HasPrefix(v, envExec+"=") && !strings.HasPrefix(v, envVictim+"=") {
			env = append(env, v)
		}
	}
	path := os.Getenv(envVictim)
	if path == "self" {
		path = "/proc/self/exe"
	}
	return syscall.Exec(path, []string{path, "-test.run=^$"}, env)
}

// execPeer is the RC peer of a QP at dest: short retries, so a peer that
// stops answering is found out within a second or two.
func execPeer(dest uint32, ip netip.Addr, mac net.HardwareAddr) verbs.Peer {
	return verbs.Peer{Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		AH: verbs.AH{DGID: ip, DMAC: mac}, DestQPN: dest, RQPSN: 100, SQPSN: 100, PathMTU: verbs.MTU1024,
		MinRNRTimer: 1, Timeout: 12, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 4, MaxDestRdAtomic: 4}
}

// victim is another image at the same address: its secret ('V') at
// fixedAddr. It tells on stdout whether the secret was touched.
func victim() error {
	mem, err := mapFixed('V')
	if err != nil {
		return err
	}
	fmt.Println("victim", os.Geteuid())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	if bytes.Count(mem, []byte{'V'}) == len(mem) {
		fmt.Println("intact")
	} else {
		fmt.Println("overwritten")
	}
	return nil
}

// A client registers its own memory, then execs another image that keeps
// the control socket: the region reached the first image's memory, and
// must not reach the new one's (issue 30 item 1: with a setuid-root image,
// a peer read and wrote root's memory). Before the execve a peer's WRITE
// and READ go through; after it both fail, read nothing of the new image
// and leave its memory as it was. The same image again as the same user,
// and, from an unprivileged client (nobody, in the daemon's group), a
// setuid-root copy of it.
func TestOwnMemoryNotReachedAfterExec(t *testing.T) {
	t.Run("same image", func(t *testing.T) {
		tb := newTestbed(t)
		ownMemoryAcrossExec(t, tb, os.Args[0], "self", nil)
	})
	t.Run("setuid root", func(t *testing.T) {
		netns.RequireRoot(t)
		tb := newTestbedGroup(t, 4242)
		bin := clientBinary(t)
		victim := bin + "-suid"
		b, err := os.ReadFile(bin)
		if err == nil {
			err = os.WriteFile(victim, b, 0o755)
		}
		if err == nil {
			err = os.Chmod(victim, 0o755|os.ModeSetuid)
		}
		if err != nil {
			t.Fatal(err)
		}
		ownMemoryAcrossExec(t, tb, bin, victim, &syscall.Credential{Uid: 65534, Gid: 4242})
	})
}

// ownMemoryAcrossExec runs execClient (the binary bin, with cred) against
// the testbed's daemon, the victim being the image at path victim.
func ownMemoryAcrossExec(t *testing.T, tb *testbed, bin, victim string, cred *syscall.Credential) {
	y := [2]*end{newEnd(t, tb.b, 1<<16), newEnd(t, tb.b, 1<<16)}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), envExec+"="+tb.name, envVictim+"="+victim, fmt.Sprintf("%s=%d,%d", envPeers, y[0].qp.QPN(), y[1].qp.QPN()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	line := func() string {
		t.Helper()
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("helper: %q %v; stderr %s", l, err, stderr.String())
		}
		return strings.TrimSpace(l)
	}
	var qpn [2]uint32
	var rkey uint32
	var addr uint64
	if l := line(); func() error { _, err := fmt.Sscanf(l, "%d %d %d %d", &qpn[0], &qpn[1], &rkey, &addr); return err }() != nil {
		t.Fatalf("helper said %q", l)
	}
	for i := range y {
		if err := y[i].qp.Connect(execPeer(qpn[i], ipA, macA)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(n int) verbs.WorkCompletion {
		t.Helper()
		if _, err := y[0].qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: y[0].mr.Addr(), Length: uint32(n), LKey: y[0].mr.LKey()}}, RemoteAddr: addr, RKey: rkey}}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, y[0].cq)
	}
	read := func(n int) verbs.WorkCompletion {
		t.Helper()
		clear(y[1].mr.Bytes())
		settle(t, tb.b)
		if _, err := y[1].qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: y[1].mr.Addr(), Length: uint32(n), LKey: y[1].mr.LKey()}}, RemoteAddr: addr, RKey: rkey}}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, y[1].cq)
	}

	// Before: the region is the client's memory.
	copy(y[0].mr.Bytes(), bytes.Repeat([]byte{'W'}, 4096))
	settle(t, tb.b)
	if wc := write(4096); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE before the execve: %+v", wc)
	}
	if wc := read(8192); wc.Status != verbs.WCSuccess {
		t.Fatalf("READ before the execve: %+v", wc)
	}
	if got := y[1].mr.Bytes()[:8192]; !bytes.Equal(got, append(bytes.Repeat([]byte{'W'}, 4096), bytes.Repeat([]byte{'A'}, 4096)...)) {
		t.Fatalf("READ before the execve: %q...", got[4090:4100])
	}

	// After: another image holds the session, with its secret where the
	// region was.
	if _, err := io.WriteString(stdin, "exec\n"); err != nil {
		t.Fatal(err)
	}
	if l := line(); l != "victim "+strconv.Itoa(map[bool]int{true: 0, false: os.Getuid()}[cred != nil]) {
		t.Fatalf("helper said %q", l)
	}
	// The copies fail and move nothing (the region's memory is undefined,
	// as ibverbs leaves freed registered memory); the completions say
	// nothing of it.
	write(4096)
	if wc := read(8192); bytes.Contains(y[1].mr.Bytes(), []byte{'V'}) {
		t.Errorf("a peer's READ through the region reached the new image: %v, %d bytes of its secret", wc.Status, bytes.Count(y[1].mr.Bytes(), []byte{'V'}))
	}
	if _, err := io.WriteString(stdin, "check\n"); err != nil {
		t.Fatal(err)
	}
	if l := line(); l != "intact" {
		t.Errorf("the new image's memory: %s", l)
	}
}

// procOf binds a running process as the daemon does at attach, with the
// credentials SO_PEERCRED would have given.
func procOf(t *testing.T, pid int, uid, gid uint32) *client {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := bindProcess(ipc.Peer{PID: pid, UID: uid, GID: gid}, os.NewFile(uintptr(fd), "pidfd"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.close(true) })
	return cl
}

// startAs starts a process with the given credentials, waiting for its
// first line if it prints one ("ready"), and stops it at the end.
func startAs(t *testing.T, uid, gid uint32, env []string, wait bool, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	if wait {
		if l, err := bufio.NewReader(stdout).ReadString('\n'); l != "ready\n" {
			t.Fatalf("%s: %q %v", name, l, err)
		}
	}
	return cmd.Process.Pid
}

// A process whose identity is not the peer's plain one at attach — a
// setuid image (an execve between connect and accept), other credentials,
// a non-dumpable process — has no own memory to register (EPERM): the peer
// could not reach that memory with ptrace either. A plain process of the
// peer's does.
func TestOwnMemoryOfAnotherIdentityRefused(t *testing.T) {
	netns.RequireRoot(t)
	const nobody = 65534
	wantRefused := func(what string, cl *client) {
		t.Helper()
		cl.openMem()

		if cl.mem >= 0 || !errors.Is(cl.checkRange(cl.peer.PID, fixedAddr, 1, false), syscall.EPERM) {
			t.Errorf("%s: own memory not refused (%v)", what, cl.memErr)
		}
	}
	sleeper := startAs(t, nobody, nobody, nil, false, "sleep", "30")
	plain := procOf(t, sleeper, nobody, nobody)
	if plain.openMem(); plain.mem < 0 {
		t.Fatalf("a plain process of the peer's: %v", plain.memErr)
	}
	wantRefused("another user's process", procOf(t, sleeper, 1000, 1000))
	wantRefused("another group's process", procOf(t, sleeper, nobody, 1000))
	// A setuid-root copy of sleep, run by nobody.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "xdproce-suid") // t.TempDir's parent is root's only
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(dir, "sleep")
	if err = os.WriteFile(suid, b, 0o755); err == nil {
		err = os.Chmod(suid, 0o755|os.ModeSetuid)
	}
	if err != nil {
		t.Fatal(err)
	}
	wantRefused("a setuid image", procOf(t, startAs(t, nobody, nobody, nil, false, suid, "30"), nobody, nobody))
	// A process that made itself non-dumpable (a copy of the test binary
	// that nobody may run).
	wantRefused("a non-dumpable process", procOf(t, startAs(t, nobody, nobody, []string{envNoDump + "=1"}, true, clientBinary(t), "-test.run=^$"), nobody, nobody))
}

// A connection whose process exited before the daemon accepted it is
// refused: its pid may be another process's by then, and nothing of the
// daemon's (the group check, the own-memory handles) may be that one's.
// Exited but not yet reaped (a zombie still has its /proc directory, the
// pid is still its), and reaped (the pid free for reuse).
func TestIdentifyRefusesExitedPeer(t *testing.T) {
	var r [6]byte
	rand.Read(r[:])
	name := fmt.Sprintf("test-exit-%x", r)
	ln, err := ipc.Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	for _, reap := range []bool{false, true} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envConnect+"="+name)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		if reap {
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
		} else {
			waitZombie(t, pid)
		}
		c, err := ln.AcceptUnix()
		if err != nil {
			t.Fatal(err)
		}
		peer, err := ipc.PeerOf(c)
		if err != nil || peer.PID != pid {
			t.Fatalf("peer %+v %v, want pid %d", peer, err, pid)
		}
		if cl, err := identify(c, peer); err == nil {
			cl.close(true)
			t.Errorf("reaped %v: a connection of a process that exited was admitted", reap)
		}
		c.Close()
		if !reap {
			cmd.Wait() // its pidfd (os.Process's) goes
		}
	}
	if n := fds(); n != before {
		t.Errorf("%d fds open after refusing, %d before", n, before)
	}
}

// waitZombie waits until child pid has exited, all its threads, without
// reaping it.
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	for {
		err := unix.Waitid(unix.P_PID, pid, nil, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
	}
}

// regMRInherited sends REG_MR of its own memory for PD pd on the control
// connection it inherited as fd 3, and prints the outcome.
func regMRInherited(pd string) error {
	h, err := strconv.ParseUint(pd, 10, 32)
	if err != nil {
		return err
	}
	fc, err := net.FileConn(os.NewFile(3, "control"))
	if err != nil {
		return err
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("fd 3 is a %T", fc)
	}
	buf := make([]byte, 4096)
	_, err = ipc.NewConn(uc).CallNoFDs(uverbs.OpRegMR, func(e *uverbs.Encoder) {
		e.U32(uint32(h))
		e.U64(uint64(uintptr(unsafe.Pointer(&buf[0]))))
		e.U64(uint64(len(buf)))
		e.U32(uint32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead))
		e.U64(uint64(uintptr(unsafe.Pointer(&buf[0]))))
	})
	fmt.Println("REG_MR:", err)
	return nil
}

// Own memory is registered only by the process that attached, as the
// kernel registers only the caller's memory: a process the connection was
// passed or leaked to (here a child that inherited it) would otherwise
// register the attach-time process's memory — perhaps root's, the child
// being unprivileged — for a peer to read and write. It gets EPERM; the
// attach-time process registers as before.
func TestOwnMemoryRegisteredOnlyByItsProcess(t *testing.T) {
	tb := newTestbed(t)
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: ipc.SocketName(tb.name), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	conn := ipc.NewConn(uc)
	defer conn.Close()
	_, _, fds, err := conn.Hello()
	if err != nil {
		t.Fatal(err)
	}
	ipc.CloseAll(fds)
	d, err := conn.CallNoFDs(uverbs.OpAllocPD, nil)
	if err != nil {
		t.Fatal(err)
	}
	pd := d.U32()
	buf := make([]byte, 4096)
	if _, err := conn.CallNoFDs(uverbs.OpRegMR, func(e *uverbs.Encoder) {
		e.U32(pd)
		e.U64(uint64(uintptr(unsafe.Pointer(&buf[0]))))
		e.U64(uint64(len(buf)))
		e.U32(uint32(verbs.AccessLocalWrite | verbs.AccessRemoteRead))
		e.U64(0)
	}); err != nil {
		t.Fatalf("REG_MR of own memory by the attached process: %v", err)
	}
	f, err := uc.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRegMR+"="+strconv.FormatUint(uint64(pd), 10))
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "operation not permitted") {
		t.Fatalf("REG_MR of own memory by another process on the connection: %v %s, want EPERM", err, out)
	}
}
