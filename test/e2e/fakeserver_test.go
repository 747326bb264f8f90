package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// fakeServer answers on @xdproce/NAME as a daemon would, but with the
// hostile reply its mode names (server_check.c's scenarios):
//
//	ok      plausible replies throughout
//	bigh    CREATE_CQ's handle is 0x80000000
//	short   CREATE_CQ's ring is an empty memfd
//	unseal  CREATE_CQ's ring is the right size but not sealed against shrinking
//	huge    CREATE_CQ's ring is a sealed hugetlbfs memfd (its pages can be punched out)
//	page    HELLO's doorbell page is an empty memfd
//	slot    CREATE_QP's send slots are 8 bytes, less than a slot's header
//	silent  HELLO is never answered
//	dm      ALLOC_DM's fd is an empty memfd, not an mmapable array map
//	old     HELLO's reply stops before its tail (a daemon that predates its fields)
//	future  HELLO is refused with EPROTONOSUPPORT (a daemon of other ABI versions)
//	strict  a daemon from before HELLO's extensible request: it hangs up on
//	        a HELLO of more than the version, and sends its whole reply tail
type fakeServer struct {
	l    *net.UnixListener
	mode string
	wg   sync.WaitGroup
}

// listenFake starts a fake server for name in h's namespace; it stops at
// the test's end.
func listenFake(t *testing.T, h *netns.Host, name, mode string) *fakeServer {
	t.Helper()
	var l *net.UnixListener
	if err := h.Do(func() (err error) { l, err = ipc.Listen(name); return err }); err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{l: l, mode: mode}
	ctx, cancel := context.WithCancel(context.Background())
	f.wg.Add(1)
	go f.accept(ctx)
	t.Cleanup(func() {
		cancel()
		f.l.Close()
		f.wg.Wait()
	})
	return f
}

func (f *fakeServer) accept(ctx context.Context) {
	defer f.wg.Done()
	for {
		c, err := f.l.AcceptUnix()
		if err != nil {
			return
		}
		conn := ipc.NewConn(c)
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer stop()
			defer conn.Close()
			_ = f.serve(ctx, conn)
		}()
	}
}

// serve answers conn's requests until it hangs up.
func (f *fakeServer) serve(ctx context.Context, conn *ipc.Conn) error {
	for {
		msg, fds, err := conn.Recv()
		if err != nil {
			return err
		}
		ipc.CloseAll(fds)
		h, d, err := uverbs.Decode(msg)
		if err != nil {
			return err
		}
		e := uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: h.Op, Seq: h.Seq})
		var out []int
		switch h.Op {
		case uverbs.OpHello:
			var hello uverbs.Hello
			n := d.GetExt(&hello)
			switch {
			case f.mode == "strict" && n != 2:
				return nil
			case f.mode == "silent":
				<-ctx.Done()
				return ctx.Err()
			case d.End() != nil || hello.Version != uverbs.ABIVersion:
				return fmt.Errorf("fake server: HELLO %+v: %v", hello, d.End())
			case f.mode == "future":
				e = uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: h.Op, Seq: h.Seq, Errno: int32(unix.EPROTONOSUPPORT)})
				if err := conn.Send(e.Bytes()); err != nil {
					return err
				}
				continue
			}
			info := uverbs.DeviceInfo{Name: "xdp_fake", MaxQP: 16, MaxQPWR: 64, MaxSGE: 4, MaxCQE: 256, MaxInlineData: 64,
				MaxMRSize: 1 << 30, MaxMsgSize: 1 << 30, MaxMTU: 3, ActiveMTU: 3, Engines: 1}
			info.Put(e)
			switch f.mode {
			case "old":
			case "strict":
				e.PutExt(&uverbs.DeviceInfoExt{MaxDMSize: verbs.MaxDMSize}, uverbs.ExtLen(uverbs.DeviceInfoExt{}))
			default:
				e.PutExt(&uverbs.DeviceInfoExt{MaxDMSize: verbs.MaxDMSize}, int(hello.ReplyExt))
			}
			var page int
			if f.mode == "page" {
				page, err = rawMemfd(0)
			} else {
				page, err = sealedMemfd(uverbs.DoorbellPageSize)
			}
			if err != nil {
				return err
			}
			out = append(out, page)
			for range 2 {
				ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
				if err != nil {
					ipc.CloseAll(out)
					return err
				}
				out = append(out, ev)
			}
		case uverbs.OpAllocPD:
			e.U32(1)
		case uverbs.OpCreateCQ:
			const slots = 256
			h := uint32(2)
			if f.mode == "bigh" {
				h = 0x80000000
			}
			var ring int
			switch f.mode {
			case "short":
				ring, err = rawMemfd(0)
			case "unseal":
				ring, err = rawMemfd(uverbs.RingBytes(slots, 64))
			case "huge":
				ring, err = hugeMemfd()
			default:
				ring, err = sealedMemfd(uverbs.RingBytes(slots, 64))
			}
			if err != nil {
				return err
			}
			ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
			if err != nil {
				unix.Close(ring)
				return err
			}
			e.U32(h)
			e.U32(slots)
			out = []int{ring, ev}
		case uverbs.OpCreateQP:
			q := uverbs.QPCreated{QP: 3, QPN: 0x11, Cap: uverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
				SendSlots: 16, SendSlotSize: 128, RecvSlots: 16, RecvSlotSize: 32}
			if f.mode == "slot" {
				q.SendSlotSize = 8
			}
			q.Put(e)
			for _, size := range []uint32{q.SendSlotSize, q.RecvSlotSize} {
				ring, err := sealedMemfd(uverbs.RingBytes(16, int(size)))
				if err != nil {
					ipc.CloseAll(out)
					return err
				}
				out = append(out, ring)
			}
		case uverbs.OpAllocDM:
			fd, err := rawMemfd(0)
			if err != nil {
				return err
			}
			e.Put(&uverbs.DMCreated{DM: 5, MapLength: 4096})
			out = []int{fd}
		case uverbs.OpGetEvent:
			e = uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: h.Op, Seq: h.Seq, Errno: int32(unix.EAGAIN)})
		}
		err = conn.Send(e.Bytes(), out...)
		ipc.CloseAll(out)
		if err != nil {
			return err
		}
	}
}

// sealedMemfd is a memfd of size bytes as the daemon makes them.
func sealedMemfd(size int) (int, error) {
	m, err := ipc.NewMapping("fake", size)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Dup(m.FD)
	return fd, errors.Join(err, m.Unmap())
}

// rawMemfd is a memfd of size bytes, not sealed.
func rawMemfd(size int) (int, error) {
	fd, err := unix.MemfdCreate("fake", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ftruncate: %w", err)
	}
	return fd, nil
}

// hugeMemfd is a hugetlbfs memfd of one 2 MiB page, sealed against
// shrinking and growing.
func hugeMemfd() (int, error) {
	fd, err := unix.MemfdCreate("fake", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_HUGETLB)
	if err != nil {
		return -1, fmt.Errorf("memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, 2<<20); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ftruncate: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("seal: %w", err)
	}
	return fd, nil
}

// listenFull listens on @xdproce/NAME in h's namespace with a backlog
// already full (one connection nobody accepts, backlog 0): a client's
// connect would wait.
func listenFull(t *testing.T, h *netns.Host, name string) {
	t.Helper()
	var fds []int
	t.Cleanup(func() { ipc.CloseAll(fds) })
	if err := h.Do(func() error {
		l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, l)
		addr := &unix.SockaddrUnix{Name: "@xdproce/" + name}
		if err := unix.Bind(l, addr); err != nil {
			return err
		}
		if err := unix.Listen(l, 0); err != nil {
			return err
		}
		c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		fds = append(fds, c)
		return unix.Connect(c, addr)
	}); err != nil {
		t.Fatal(err)
	}
}

// listenAs listens on @xdproce/NAME in h's namespace as user uid: the
// socket's SO_PEERCRED is its listener's credentials, taken at listen(2).
// The thread that listens drops to uid and is never used again (a locked
// goroutine's thread ends with it), so the test's other threads stay root.
// Nothing accepts: a client that checks its server sends nothing.
func listenAs(t *testing.T, h *netns.Host, name string, uid int) {
	t.Helper()
	var l *net.UnixListener
	if err := h.Do(func() (err error) {
		// Bound but not listening: net.ListenUnix would listen at once.
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@xdproce/" + name}); err != nil {
			unix.Close(fd)
			return err
		}
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
				errc <- fmt.Errorf("setresuid: %w", e)
				return
			}
			errc <- unix.Listen(fd, 16)
		}()
		if err := <-errc; err != nil {
			unix.Close(fd)
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		fl, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return err
		}
		l = fl.(*net.UnixListener)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// TestStockLibraryDistrustsServer runs server_check, an application of
// rdma-core's API on xdproce's libibverbs.so.1, against fake daemons in a
// namespace: replies with a handle of 0x80000000, a ring or doorbell page
// that is an empty or unsealed memfd, send slots smaller than their header,
// a block of device memory that is an empty memfd instead of a map,
// a HELLO never answered. Each must fail cleanly (an errno, no crash, no
// hang). A server bound by uid 65534 is not listed, and one that became
// uid 65534's between listing and opening is refused with EACCES: an
// abstract name has no permissions, any local user can bind it while the
// daemon is down. A name whose listener's backlog is full (another user's)
// does not slow the listing down.
func TestStockLibraryDistrustsServer(t *testing.T) {
	netns.RequireRoot(t)
	lib := providerLibs(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct})
	h := topo.Hosts[0]
	for _, mode := range []string{"ok", "bigh", "short", "unseal", "huge", "page", "slot", "silent", "dm", "old", "future", "strict"} {
		listenFake(t, h, "xp"+mode, mode)
	}
	swap := listenFake(t, h, "xpswap", "ok")
	listenAs(t, h, "xpuntr", 65534)
	listenFull(t, h, "xpfull")

	check := buildProviderCheck(t, "server_check", "-libverbs")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, check, h.Path())
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	cmd.Stderr = os.Stderr
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
	var out bytes.Buffer
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if sc.Text() == "swap" {
			swap.l.Close()
			listenAs(t, h, "xpswap", 65534)
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Error(err)
			}
		}
	}
	stdin.Close()
	err = cmd.Wait()
	t.Logf("server_check:\n%s", out.Bytes())
	if err != nil {
		t.Fatalf("server_check: %v", err)
	}
	if n := checksPassed(t, out.Bytes()); n != 16 {
		t.Fatalf("server_check ran %d checks, want 16", n)
	}
}

// TestGoClientDistrustsServer is TestStockLibraryDistrustsServer for the Go
// client (verbs.Dial): a server of uid 65534 is refused with EACCES, one
// that never answers HELLO fails the dial at its context's deadline, a
// block of device memory whose fd is not an mmapable array map is EPROTO
// (mapping an empty memfd would fault at the first copy), and a
// CREATE_QP reply whose send slots cannot hold their header is malformed
// (posting into them would have written past them). A HELLO reply that
// stops before its tail opens the device with the fields it predates zero;
// a HELLO refused for its ABI version fails the dial with EPROTONOSUPPORT
// and says so; a daemon from before HELLO's extensible request, which hangs
// up on it, is greeted again with the version alone.
func TestGoClientDistrustsServer(t *testing.T) {
	netns.RequireRoot(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct})
	h := topo.Hosts[0]
	listenFake(t, h, "goslot", "slot")
	listenFake(t, h, "gosilent", "silent")
	listenFake(t, h, "godm", "dm")
	listenFake(t, h, "goold", "old")
	listenFake(t, h, "gofuture", "future")
	listenFake(t, h, "gostrict", "strict")
	listenAs(t, h, "gountr", 65534)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := h.Do(func() error {
		uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
		defer ucancel()
		if d, err := verbs.Dial(uctx, "gountr"); !errors.Is(err, unix.EACCES) {
			if d != nil {
				d.Close()
			}
			return fmt.Errorf("verbs.Dial of uid 65534's socket: %v, want EACCES", err)
		}
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		if d, err := verbs.Dial(sctx, "gosilent"); !errors.Is(err, context.DeadlineExceeded) {
			if d != nil {
				d.Close()
			}
			return fmt.Errorf("verbs.Dial of a server that never answers HELLO: %v, want the context's deadline", err)
		}
		if d, err := verbs.Dial(ctx, "gofuture"); !errors.Is(err, unix.EPROTONOSUPPORT) || !strings.Contains(fmt.Sprint(err), "does not serve ABI version") {
			if d != nil {
				d.Close()
			}
			return fmt.Errorf("verbs.Dial of a server refusing the ABI version: %v, want EPROTONOSUPPORT saying so", err)
		}
		od, err := verbs.Dial(ctx, "goold")
		if err != nil {
			return fmt.Errorf("verbs.Dial of a server whose HELLO reply stops before its tail: %w", err)
		}
		defer od.Close()
		if n := od.QueryDevice().MaxDMSize; n != 0 {
			return fmt.Errorf("max_dm_size %d from a HELLO reply without it, want 0", n)
		}
		sd, err := verbs.Dial(ctx, "gostrict")
		if err != nil {
			return fmt.Errorf("verbs.Dial of a daemon from before HELLO's extensible request: %w", err)
		}
		defer sd.Close()
		if n := sd.QueryDevice().MaxDMSize; n != verbs.MaxDMSize {
			return fmt.Errorf("max_dm_size %d from a daemon from before HELLO's extensible request, want %d", n, verbs.MaxDMSize)
		}
		dd, err := verbs.Dial(ctx, "godm")
		if err != nil {
			return fmt.Errorf("verbs.Dial: %w", err)
		}
		defer dd.Close()
		if dm, err := dd.AllocDM(4096); !errors.Is(err, unix.EPROTO) {
			return fmt.Errorf("AllocDM with an empty memfd for the block: %v (%v), want EPROTO", err, dm)
		}
		d, err := verbs.Dial(ctx, "goslot")
		if err != nil {
			return fmt.Errorf("verbs.Dial: %w", err)
		}
		defer d.Close()
		pd, err := d.AllocPD()
		if err != nil {
			return fmt.Errorf("AllocPD: %w", err)
		}
		cq, err := d.CreateCQ(16)
		if err != nil {
			return fmt.Errorf("CreateCQ: %w", err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if !errors.Is(err, uverbs.ErrMalformed) {
			return fmt.Errorf("CreateQP with 8-byte send slots: %v (QP %v), want malformed", err, qp)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
