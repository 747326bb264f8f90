package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// rawSession is a session of srv for the client process p, driven by the
// test request by request (call), past HELLO.
func rawSession(t *testing.T, srv *Server, p ipc.Peer) *session {
	t.Helper()
	ss := newSession(srv, nil, p)
	t.Cleanup(ss.release)
	ss.proc = procOf(t, p.PID, p.UID, p.GID)
	ss.proc.openMem()
	if _, errno := call(t, ss, uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) }); errno != 0 {
		t.Fatalf("hello: %v", errno)
	}
	return ss
}

// call runs one request of the session's client: the reply's body and errno.
func call(t *testing.T, ss *session, op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, syscall.Errno) {
	t.Helper()
	ss.sender = ss.peer.PID // what serve learns from each request's SCM_CREDENTIALS
	reply, out, err := ss.handle(msg(op, body), fds)
	ipc.CloseAll(out)
	if err != nil {
		t.Fatalf("%v: the daemon disconnected the client: %v", op, err)
	}
	h, d, err := uverbs.Decode(reply)
	if err != nil {
		t.Fatal(err)
	}
	return d, syscall.Errno(h.Errno)
}

// handleOf calls op and returns the handle its reply starts with.
func handleOf(t *testing.T, ss *session, op uverbs.Op, body func(*uverbs.Encoder), fds ...int) uint32 {
	t.Helper()
	d, errno := call(t, ss, op, body, fds...)
	if errno != 0 {
		t.Fatalf("%v: %v", op, errno)
	}
	return d.U32()
}

// rootProcess starts a process of root's, with every capability, for
// sessions to belong to: each such process is a client with its own share.
func rootProcess(t *testing.T) ipc.Peer { return process(t, nil, "") }

// unprivileged starts a process of uid 65534 (no capabilities) that runs
// the shell commands script, for sessions to belong to.
func unprivileged(t *testing.T, script string) ipc.Peer {
	return process(t, &syscall.Credential{Uid: 65534, Gid: 65534}, script)
}

// process starts a process with cred (nil: root's) that runs the shell
// commands script, then becomes the test binary's mapSleep: its memory at
// ownBase is what regOwn registers. It lives as long as the test.
func process(t *testing.T, cred *syscall.Credential, script string) ipc.Peer {
	t.Helper()
	netns.RequireRoot(t)
	bin, p := os.Args[0], ipc.Peer{}
	if cred != nil {
		bin = clientBinary(t) // one nobody may run
		p.UID, p.GID = cred.Uid, cred.Gid
	}
	if script != "" {
		script += " && "
	}
	p.PID = startAs(t, p.UID, p.GID, []string{envMapSleep + "=1"}, true, "sh", "-c", script+`exec "$0" -test.run='^$'`, bin)
	return p
}

// ownBase is where mapSleep maps ownSpan bytes of address space (no
// memory until touched) for regOwn's regions.
const (
	ownBase = 0x5e0000000000
	ownSpan = 1 << 37
)

// mapSleep is the helper role of process: it maps its span and waits for
// its standard input to close.
func mapSleep() error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Add(nil, ownBase), ownSpan, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		return fmt.Errorf("map at %#x: %w", ownBase, err)
	}
	fmt.Println("ready")
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// regOwn registers length bytes at off into the client process's mapping
// at ownBase (mapSleep).
func regOwn(pd uint32, off, length uint64) func(*uverbs.Encoder) {
	addr := ownBase + off
	return func(e *uverbs.Encoder) {
		e.U32(pd)
		e.U64(addr)
		e.U64(length)
		e.U32(uint32(verbs.AccessLocalWrite))
		e.U64(addr)
	}
}

// sparseMemfd is a sealed memfd of size bytes that takes no memory.
func sparseMemfd(t *testing.T, size int64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("sparse", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err == nil {
		err = unix.Ftruncate(fd, size)
	}
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	}
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// Registered bytes count against the client's RLIMIT_MEMLOCK, both kinds
// of region, as ibv_reg_mr's under the kernel: past it ENOMEM, before
// anything is mapped; deregistering gives the pages back; a client with
// CAP_IPC_LOCK is not limited.
func TestRegMRCountsAgainstMemlock(t *testing.T) {
	tb := newTestbed(t)
	const limit = 1 << 20
	p := unprivileged(t, "ulimit -l 1024")
	ss := rawSession(t, tb.srv, p)
	pd := handleOf(t, ss, uverbs.OpAllocPD, nil)
	const half = limit / 2
	own := handleOf(t, ss, uverbs.OpRegMR, regOwn(pd, 0x10000, half))
	// One byte more than a page's worth spans one page more.
	if _, errno := call(t, ss, uverbs.OpRegMR, regOwn(pd, 0x200000+4095, half-4095+1)); errno != syscall.ENOMEM {
		t.Fatalf("own memory past RLIMIT_MEMLOCK: %v, want ENOMEM", errno)
	}
	// A memfd the client shares: the other half fits, then nothing more.
	m, err := ipc.NewMapping("mr", half)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	fd, err := unix.Dup(m.FD)
	if err != nil {
		t.Fatal(err)
	}
	handleOf(t, ss, uverbs.OpRegMR, regOwn(pd, 0x400000, half), fd)
	if _, errno := call(t, ss, uverbs.OpRegMR, regOwn(pd, 0x800000, 4096)); errno != syscall.ENOMEM {
		t.Fatalf("a page past RLIMIT_MEMLOCK: %v, want ENOMEM", errno)
	}
	// 1 TiB of sparse memfd: refused, not mapped.
	if _, errno := call(t, ss, uverbs.OpRegMR, regOwn(pd, 0, verbs.MaxMRSize), sparseMemfd(t, verbs.MaxMRSize)); errno != syscall.ENOMEM {
		t.Fatalf("1 TiB memfd region: %v, want ENOMEM", errno)
	}
	if ss.acct.proc.pages != limit/uint64(os.Getpagesize()) {
		t.Fatalf("%d pages counted, want %d", ss.acct.proc.pages, limit/os.Getpagesize())
	}
	if _, errno := call(t, ss, uverbs.OpDeregMR, func(e *uverbs.Encoder) { e.U32(own) }); errno != 0 {
		t.Fatal(errno)
	}
	handleOf(t, ss, uverbs.OpRegMR, regOwn(pd, 0x800000, 4096))

	// Root (CAP_IPC_LOCK) registers past any RLIMIT_MEMLOCK; the bytes
	// of memfds the daemon maps for it are bounded all the same.
	tb.srv.cfg.Limits = Limits{MappedBytes: 1 << 30}.withDefaults(1024, 65530)
	root := rawSession(t, tb.srv, rootProcess(t))
	rpd := handleOf(t, root, uverbs.OpAllocPD, nil)
	handleOf(t, root, uverbs.OpRegMR, regOwn(rpd, 0x10000, 1<<36))
	handleOf(t, root, uverbs.OpRegMR, regOwn(rpd, 0, 1<<30), sparseMemfd(t, 1<<30))
	if _, errno := call(t, root, uverbs.OpRegMR, regOwn(rpd, 0, verbs.MaxMRSize), sparseMemfd(t, verbs.MaxMRSize)); errno != syscall.ENOMEM {
		t.Fatalf("root: 1 TiB memfd region past its share of the daemon's mappings: %v, want ENOMEM", errno)
	}
}

func createCQ(e *uverbs.Encoder) { e.U32(4) }

// Each client holds at most its share of each pool: past it ENOMEM (the
// daemon's fds: EMFILE), while another client still gets its own.
func TestPerClientShares(t *testing.T) {
	tb := newTestbed(t)
	tb.srv.cfg.Limits = Limits{PDs: 3, MRs: 2, MWs: 2, CQs: 3, QPs: 2, SRQs: 2, AHs: 2, CMIDs: 2, CMChannels: 1}.withDefaults(1024, 65530)
	flood := func(ss *session) map[string]syscall.Errno {
		got := map[string]syscall.Errno{}
		try := func(name string, n int, op uverbs.Op, body func(*uverbs.Encoder)) {
			for i := range n + 1 {
				_, errno := call(t, ss, op, body)
				if (errno != 0) != (i == n) {
					t.Fatalf("%s %d of a share of %d: %v", name, i+1, n, errno)
				}
				got[name] = errno
			}
		}
		try("PD", 3, uverbs.OpAllocPD, nil)
		try("CQ", 3, uverbs.OpCreateCQ, createCQ)
		cq := ss.next // the last CQ made
		try("QP", 2, uverbs.OpCreateQP, func(e *uverbs.Encoder) {
			(&uverbs.CreateQP{PD: 1, SendCQ: cq, RecvCQ: cq, Type: uint8(verbs.QPTypeRC), Cap: uverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}).Put(e)
		})
		try("SRQ", 2, uverbs.OpCreateSRQ, func(e *uverbs.Encoder) { e.U32(1); (&uverbs.SRQAttr{MaxWR: 4, MaxSGE: 1}).Put(e) })
		try("MW", 2, uverbs.OpAllocMW, func(e *uverbs.Encoder) { e.U32(1); e.U8(uint8(verbs.MWType2)) })
		try("AH", 2, uverbs.OpCreateAH, func(e *uverbs.Encoder) {
			e.U32(1)
			(&uverbs.AHAttr{DGID: ipB.As16(), Port: 1, IsGlobal: true, HopLimit: 64}).Put(e)
		})
		try("MR", 2, uverbs.OpRegMR, regOwn(1, 0x10000, 4096))
		try("CM channel", 1, uverbs.OpCMCreateChannel, nil)
		ch := ss.next
		try("CM ID", 2, uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(ch); e.U16(uint16(rdmacm.PortSpaceTCP)) })
		return got
	}
	first := rootProcess(t)
	for i, p := range []ipc.Peer{first, rootProcess(t)} {
		got := flood(rawSession(t, tb.srv, p))
		for name, errno := range got {
			if errno != syscall.ENOMEM {
				t.Errorf("client %d past its share of %ss: %v, want ENOMEM", i+1, name, errno)
			}
		}
	}
	// Another session of a process shares its share.
	if _, errno := call(t, rawSession(t, tb.srv, first), uverbs.OpAllocPD, nil); errno != syscall.ENOMEM {
		t.Fatalf("a PD in a second session of a client at its share: %v, want ENOMEM", errno)
	}

	// The daemon's fds: one per CQ, besides the session's three.
	tb.srv.cfg.Limits = Limits{FDs: sessionFDs + 3}.withDefaults(1024, 65530)
	ss := rawSession(t, tb.srv, rootProcess(t))
	for range 3 {
		handleOf(t, ss, uverbs.OpCreateCQ, createCQ)
	}
	if _, errno := call(t, ss, uverbs.OpCreateCQ, createCQ); errno != syscall.EMFILE {
		t.Fatalf("a CQ past the client's share of the daemon's fds: %v, want EMFILE", errno)
	}
	// The daemon's mappings: one per CQ, two per QP.
	tb.srv.cfg.Limits = Limits{Mappings: 3}.withDefaults(1024, 65530)
	ss = rawSession(t, tb.srv, rootProcess(t))
	handleOf(t, ss, uverbs.OpAllocPD, nil)
	handleOf(t, ss, uverbs.OpCreateCQ, createCQ)
	handleOf(t, ss, uverbs.OpCreateQP, func(e *uverbs.Encoder) {
		(&uverbs.CreateQP{PD: 1, SendCQ: 2, RecvCQ: 2, Type: uint8(verbs.QPTypeUD), Cap: uverbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}).Put(e)
	})
	if _, errno := call(t, ss, uverbs.OpCreateCQ, createCQ); errno != syscall.ENOMEM {
		t.Fatalf("a CQ past the client's share of the daemon's mappings: %v, want ENOMEM", errno)
	}
}

// With the default shares, one client flooding QPs is stopped at a
// quarter of the device's QPNs: a second client still creates its own.
func TestQPFloodLeavesOthersTheirShare(t *testing.T) {
	tb := newTestbed(t)
	flooder, other := rawSession(t, tb.srv, rootProcess(t)), rawSession(t, tb.srv, rootProcess(t))
	qp := func(ss *session) syscall.Errno {
		_, errno := call(t, ss, uverbs.OpCreateQP, func(e *uverbs.Encoder) {
			(&uverbs.CreateQP{PD: 1, SendCQ: 2, RecvCQ: 2, Type: uint8(verbs.QPTypeUD), Cap: uverbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}).Put(e)
		})
		return errno
	}
	for _, ss := range []*session{flooder, other} {
		handleOf(t, ss, uverbs.OpAllocPD, nil)
		handleOf(t, ss, uverbs.OpCreateCQ, createCQ)
	}
	n := 0
	var errno syscall.Errno
	for ; n < verbs.MaxQP; n++ {
		if errno = qp(flooder); errno != 0 {
			break
		}
	}
	if errno != syscall.ENOMEM || n > verbs.MaxQP/4 {
		t.Fatalf("a client made %d QPs, then %v; want ENOMEM within a quarter of %d", n, errno, verbs.MaxQP)
	}
	if errno := qp(other); errno != 0 {
		t.Fatalf("another client's QP: %v", errno)
	}
}

// The daemon raises its fd soft limit to the hard one.
func TestNewRaisesNoFile(t *testing.T) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Max < 512 {
		t.Skipf("hard RLIMIT_NOFILE %d", r.Max)
	}
	low := unix.Rlimit{Cur: r.Max / 2, Max: r.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &r)
	newTestbed(t)
	var got unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &got)
	if got.Cur != r.Max {
		t.Fatalf("soft RLIMIT_NOFILE %d after New, want the hard limit %d", got.Cur, r.Max)
	}
}

// A daemon out of fds (EMFILE on accept) keeps serving: once fds are free
// again it accepts the clients that waited, and new ones.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	tb := newTestbed(t)
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	// Fill the fd table up to a low soft limit, keeping one for the
	// client's socket.
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := r
	low.Cur = uint64(len(open)) + 64
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var filler []int
	release := func() {
		ipc.CloseAll(filler)
		filler = nil
		unix.Setrlimit(unix.RLIMIT_NOFILE, &r)
	}
	defer release()
	for range low.Cur {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		filler = append(filler, fd)
	}
	unix.Close(filler[len(filler)-1])
	filler = filler[:len(filler)-1]
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	if err := unix.Connect(sock, &unix.SockaddrUnix{Name: ipc.SocketName(tb.name)}); err != nil {
		t.Fatal(err)
	}
	// The daemon fails to accept it, a few times.
	time.Sleep(100 * time.Millisecond)
	release()
	// The waiting client is accepted, and a new one too.
	deadline := time.Now().Add(5 * time.Second)
	for tb.srv.Clients() < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := tb.srv.Clients(); n != 1 {
		t.Fatalf("%d clients after fds were freed, want the one that waited", n)
	}
	if _, err := tb.dial(t).AllocPD(); err != nil {
		t.Fatalf("a new client after EMFILE: %v", err)
	}
}

// newResolveServer is a daemon whose device resolves no neighbour: each
// resolution waits for its end. It is not run: the test drives sessions
// itself, so that every goroutine it has exists when New returns.
func newResolveServer(t *testing.T, lim Limits) *Server {
	t.Helper()
	la, _ := memlink.NewPair(9000)
	dev, err := verbs.NewDevice(la, verbs.DeviceConfig{MAC: macA, GIDs: []netip.Addr{ipA}, ActiveMTU: 1024,
		Resolve: func(ctx context.Context, _ netip.Addr) (net.HardwareAddr, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	var r [6]byte
	rand.Read(r[:])
	srv, err := New(Config{Ifname: "test-" + hex.EncodeToString(r[:]), Device: dev, Group: -1, Logger: discardLogger(), Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.ln.Close()
		srv.cm.Close()
	})
	return srv
}

// resolveFlood has the client resolve toward a host that never answers,
// with an hour's timeout, on n IDs: the IDs, and how many were refused.
func resolveFlood(t *testing.T, ss *session, n int) (ids []uint32, refused int) {
	t.Helper()
	ch := handleOf(t, ss, uverbs.OpCMCreateChannel, nil)
	for range n {
		id := handleOf(t, ss, uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(ch); e.U16(uint16(rdmacm.PortSpaceTCP)) })
		ids = append(ids, id)
		_, errno := call(t, ss, uverbs.OpCMResolveAddr, func(e *uverbs.Encoder) {
			e.U32(id)
			(&uverbs.CMAddr{Family: 4, IP: netip.IPv4Unspecified().As16()}).Put(e)
			(&uverbs.CMAddr{Family: 4, IP: netip.AddrFrom4([4]byte{198, 18, 0, 99}).As16(), Port: 9}).Put(e)
			e.U32(3600 * 1000)
		})
		switch errno {
		case 0:
		case syscall.ENOMEM:
			refused++
		default:
			t.Fatalf("resolve_addr: %v", errno)
		}
	}
	return ids, refused
}

// settleGoroutines waits until no more goroutines run than want.
func settleGoroutines(t *testing.T, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > want {
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
		t.Fatalf("%d goroutines %s, %d before", n, what, want)
	}
}

// Address resolutions end with their ID and with the client, whatever
// timeout it asked for; a client has a bounded number in progress, and
// their timeout is capped.
func TestResolutionsEndWithTheirIDs(t *testing.T) {
	srv := newResolveServer(t, Limits{})
	base := runtime.NumGoroutine()
	ss := rawSession(t, srv, rootProcess(t))
	ids, refused := resolveFlood(t, ss, 200)
	if want := 200 - srv.cfg.Limits.Resolutions; refused != want {
		t.Fatalf("%d of 200 resolutions refused, want %d (ENOMEM past %d in progress)", refused, want, srv.cfg.Limits.Resolutions)
	}
	// About one goroutine per resolution (not exactly: the runtime's and
	// the test's own come and go).
	if n := runtime.NumGoroutine(); n < base+srv.cfg.Limits.Resolutions/2 {
		t.Fatalf("%d goroutines while resolving, %d before: the test resolves nothing", n, base)
	}
	for _, id := range ids {
		if _, errno := call(t, ss, uverbs.OpCMDestroyID, func(e *uverbs.Encoder) { e.U32(id) }); errno != 0 {
			t.Fatal(errno)
		}
	}
	settleGoroutines(t, base, "after CM_DESTROY_ID")

	// The client leaves with its resolutions in progress.
	ss2 := newSession(srv, nil, rootProcess(t))
	call(t, ss2, uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
	resolveFlood(t, ss2, 10)
	ss2.release()
	settleGoroutines(t, base, "after the client left")

	// An hour's timeout is cut to the daemon's cap.
	srv.cfg.Limits.ResolveTimeout = 200 * time.Millisecond
	ss3 := rawSession(t, srv, rootProcess(t))
	resolveFlood(t, ss3, 1)
	deadline := time.Now().Add(3 * time.Second)
	for {
		d, errno := call(t, ss3, uverbs.OpCMGetEvent, func(e *uverbs.Encoder) { e.U32(1) })
		if errno == 0 {
			var ev uverbs.CMEvent
			ev.Get(d)
			if rdmacm.EventType(ev.Type) != rdmacm.EventAddrError || ev.Status != -int32(syscall.ETIMEDOUT) {
				t.Fatalf("event %+v, want ADDR_ERROR ETIMEDOUT", ev)
			}
			break
		}
		if errno != syscall.EAGAIN || time.Now().After(deadline) {
			t.Fatalf("no ADDR_ERROR within 3 s of a resolution capped at 200 ms: %v", errno)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmListen has the client listen on ipA:port: the channel and the ID.
func cmListen(t *testing.T, ss *session, port uint16) (ch, id uint32) {
	t.Helper()
	ch = handleOf(t, ss, uverbs.OpCMCreateChannel, nil)
	id = handleOf(t, ss, uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(ch); e.U16(uint16(rdmacm.PortSpaceTCP)) })
	if _, errno := call(t, ss, uverbs.OpCMBind, func(e *uverbs.Encoder) {
		e.U32(id)
		(&uverbs.CMAddr{Family: 4, IP: ipA.As16(), Port: port}).Put(e)
	}); errno != 0 {
		t.Fatalf("bind: %v", errno)
	}
	if _, errno := call(t, ss, uverbs.OpCMListen, func(e *uverbs.Encoder) { e.U32(id); e.U32(8) }); errno != 0 {
		t.Fatalf("listen: %v", errno)
	}
	return ch, id
}

// CONNECT_REQUESTs the client never fetched are rejected when their
// listener goes, by CM_DESTROY_ID or with the client: the peer's connect
// fails at once (REJ) and the daemon keeps no ID or connection of them.
func TestUnfetchedRequestsRejected(t *testing.T) {
	tb := newTestbed(t)
	svcB, err := rdmacm.Start(tb.b, rdmacm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer svcB.Close()
	for i, how := range []string{"CM_DESTROY_ID", "the client's exit"} {
		port := uint16(7300 + i)
		ss := newSession(tb.srv, nil, rootProcess(t))
		call(t, ss, uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
		ch, id := cmListen(t, ss, port)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		dialed := make(chan error, 1)
		qp := newEnd(t, tb.b, 64).qp
		go func() {
			_, err := svcB.Dial(ctx, qp, netip.AddrPortFrom(ipA, port), rdmacm.ConnParam{RetryCount: 7})
			dialed <- err
		}()
		deadline := time.Now().Add(5 * time.Second)
		for ss.cm.channels[ch].ch.Len() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if ss.cm.channels[ch].ch.Len() == 0 {
			t.Fatal("no CONNECT_REQUEST queued")
		}
		if i == 0 {
			if _, errno := call(t, ss, uverbs.OpCMDestroyID, func(e *uverbs.Encoder) { e.U32(id) }); errno != 0 {
				t.Fatal(errno)
			}
		} else {
			ss.release()
		}
		err := <-dialed
		cancel()
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("after %s: the peer's connect: %v, want ECONNREFUSED", how, err)
		}
		for tb.srv.cm.IDs() != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n, c := tb.srv.cm.IDs(), tb.srv.cm.Connections(); n != 0 || c != 0 {
			t.Fatalf("after %s the daemon keeps %d IDs, %d connections", how, n, c)
		}
		if i == 0 {
			ss.release()
		}
	}
}

// CM ports below ip_unprivileged_port_start need CAP_NET_BIND_SERVICE, as
// the kernel's cma_get_port: EACCES without it, by CM_BIND or by
// CM_RESOLVE_ADDR's source port.
func TestPrivilegedCMPorts(t *testing.T) {
	tb := newTestbed(t)
	user := rawSession(t, tb.srv, unprivileged(t, ""))
	ch := handleOf(t, user, uverbs.OpCMCreateChannel, nil)
	newID := func(ss *session, ch uint32) uint32 {
		return handleOf(t, ss, uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(ch); e.U16(uint16(rdmacm.PortSpaceTCP)) })
	}
	bind := func(ss *session, id uint32, port uint16) syscall.Errno {
		_, errno := call(t, ss, uverbs.OpCMBind, func(e *uverbs.Encoder) {
			e.U32(id)
			(&uverbs.CMAddr{Family: 4, IP: ipA.As16(), Port: port}).Put(e)
		})
		return errno
	}
	low := tb.srv.privPorts - 1
	if low == 0 || low == 0xffff {
		t.Skipf("ip_unprivileged_port_start is %d", tb.srv.privPorts)
	}
	id := newID(user, ch)
	if errno := bind(user, id, low); errno != syscall.EACCES {
		t.Fatalf("an unprivileged client binding port %d: %v, want EACCES", low, errno)
	}
	if errno := bind(user, id, tb.srv.privPorts); errno != 0 {
		t.Fatalf("an unprivileged client binding port %d: %v", tb.srv.privPorts, errno)
	}
	if _, errno := call(t, user, uverbs.OpCMResolveAddr, func(e *uverbs.Encoder) {
		e.U32(newID(user, ch))
		(&uverbs.CMAddr{Family: 4, IP: ipA.As16(), Port: low}).Put(e)
		(&uverbs.CMAddr{Family: 4, IP: ipB.As16(), Port: 9}).Put(e)
		e.U32(1000)
	}); errno != syscall.EACCES {
		t.Fatalf("an unprivileged client resolving from port %d: %v, want EACCES", low, errno)
	}
	root := rawSession(t, tb.srv, rootProcess(t))
	if errno := bind(root, newID(root, handleOf(t, root, uverbs.OpCMCreateChannel, nil)), low); errno != 0 {
		t.Fatalf("root binding port %d: %v", low, errno)
	}
}

// A session that ends gives its process's share back; the account goes
// with the process's last session.
func TestShareReturnsWithSessions(t *testing.T) {
	tb := newTestbed(t)
	tb.srv.cfg.Limits = Limits{CQs: 2}.withDefaults(1024, 65530)
	p := rootProcess(t)
	a, b := newSession(tb.srv, nil, p), newSession(tb.srv, nil, p)
	for _, ss := range []*session{a, b} {
		call(t, ss, uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
		handleOf(t, ss, uverbs.OpCreateCQ, createCQ)
	}
	if _, errno := call(t, b, uverbs.OpCreateCQ, createCQ); errno != syscall.ENOMEM {
		t.Fatalf("a third CQ of a process with a share of 2: %v, want ENOMEM", errno)
	}
	a.release()
	handleOf(t, b, uverbs.OpCreateCQ, createCQ)
	b.release()
	tb.srv.mu.Lock()
	defer tb.srv.mu.Unlock()
	if n := len(tb.srv.accounts); n != 0 {
		t.Fatalf("%d accounts after every session left", n)
	}
}

// regPastMemlock is the "memlock" client's action: with an RLIMIT_MEMLOCK
// of 1 MiB, 512 KiB of its memory register, 2 MiB more do not.
func regPastMemlock(pd *verbs.PD) error {
	if _, err := pd.RegMR(make([]byte, 512<<10), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("512 KiB: %w", err)
	}
	_, err := pd.RegMR(make([]byte, 2<<20), verbs.AccessLocalWrite)
	if err == nil {
		return errors.New("2 MiB past RLIMIT_MEMLOCK registered")
	}
	return fmt.Errorf("2 MiB: %w", err)
}

// A client attached through the socket: its RLIMIT_MEMLOCK, read at
// attach, bounds what it registers.
func TestMemlockOfAttachedClient(t *testing.T) {
	netns.RequireRoot(t)
	tb := newTestbedGroup(t, 4242)
	// The client inherits a soft limit of 1 MiB.
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 1 << 20, Max: r.Max}); err != nil {
		t.Fatal(err)
	}
	out, err := dialAsDoing(t, tb.name, "memlock", 65534, 4242)
	unix.Setrlimit(unix.RLIMIT_MEMLOCK, &r)
	if err == nil || !strings.Contains(out, "2 MiB: ") || !strings.Contains(out, "cannot allocate memory") {
		t.Fatalf("a client registering past its RLIMIT_MEMLOCK: %v %s, want ENOMEM", err, out)
	}
}

// An unprivileged user's processes share one share: forking gives no
// second one. Each root process has its own.
func TestUnprivilegedUserShare(t *testing.T) {
	tb := newTestbed(t)
	tb.srv.cfg.Limits = Limits{PDs: 2}.withDefaults(1024, 65530)
	a := newSession(tb.srv, nil, unprivileged(t, ""))
	b := rawSession(t, tb.srv, unprivileged(t, ""))
	call(t, a, uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
	handleOf(t, a, uverbs.OpAllocPD, nil)
	handleOf(t, a, uverbs.OpAllocPD, nil)
	if _, errno := call(t, b, uverbs.OpAllocPD, nil); errno != syscall.ENOMEM {
		t.Fatalf("a PD of another process of a user at its share: %v, want ENOMEM", errno)
	}
	for range 2 {
		handleOf(t, rawSession(t, tb.srv, rootProcess(t)), uverbs.OpAllocPD, nil)
	}
	a.release()
	handleOf(t, b, uverbs.OpAllocPD, nil)
}

// A client's connections cost the daemon fds too: past its share the
// daemon refuses the connection, and goes on serving the ones it has.
func TestConnectionsWithinFDShare(t *testing.T) {
	tb := newTestbedWith(t, -1, Limits{FDs: 2*sessionFDs + 1})
	a, b := tb.dial(t), tb.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := verbs.Dial(ctx, tb.name); err == nil {
		c.Close()
		t.Fatal("a third connection past the client's share of the daemon's fds was served")
	}
	for _, d := range []*verbs.Device{a, b} {
		if _, err := d.AllocPD(); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for tb.srv.Clients() > 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	tb.dial(t)
}
