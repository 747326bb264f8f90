package loader

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/wire"
)

// logBuffer is a slog destination safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// attach attaches in ns and closes at cleanup.
func attach(t *testing.T, ns *testNS, ifname string, opts Options) *XDP {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	var x *XDP
	ns.run(t, func() error {
		var err error
		x, err = Attach(ifname, opts)
		return err
	})
	t.Cleanup(func() {
		if err := x.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return x
}

func linkInfo(t *testing.T, ns *testNS, ifname string) Link {
	t.Helper()
	var l Link
	ns.run(t, func() error {
		var err error
		l, err = LinkInfo(ifname)
		return err
	})
	return l
}

func TestAttachModes(t *testing.T) {
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{})
			var logs logBuffer
			x := attach(t, p.A, p.AName, Options{Mode: mode, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if x.Mode() != mode {
				t.Errorf("Mode() = %v, want %v", x.Mode(), mode)
			}
			if !strings.Contains(logs.String(), "mode="+mode.String()) || strings.Count(logs.String(), "\n") != 1 {
				t.Errorf("want one log line naming mode %v, got %q", mode, logs.String())
			}
			if got := linkInfo(t, p.A, p.AName).XDPProgramID; got == 0 {
				t.Fatal("link has no XDP program after Attach")
			}
			if err := x.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if got := linkInfo(t, p.A, p.AName).XDPProgramID; got != 0 {
				t.Errorf("link still has XDP program %d after Close", got)
			}
			if err := x.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if _, err := x.Counters(); !errors.Is(err, ErrClosed) {
				t.Errorf("Counters after Close: %v, want ErrClosed", err)
			}
			if err := x.RegisterSocket(0, 0); !errors.Is(err, ErrClosed) {
				t.Errorf("RegisterSocket after Close: %v, want ErrClosed", err)
			}
		})
	}
}

func TestAttachAutoFallsBackToGeneric(t *testing.T) {
	ns := newNS(t)
	name := shortName("xld")
	ns.run(t, func() error {
		// A bridge has no native XDP support (and this kernel has no dummy).
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
	err := ns.do(func() error {
		x, err := Attach(name, Options{Mode: ModeNative})
		if err == nil {
			x.Close()
			return errors.New("native attach to a bridge succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	x := attach(t, ns, name, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if x.Mode() != ModeGeneric {
		t.Errorf("Mode() = %v, want generic", x.Mode())
	}
	if s := logs.String(); !strings.Contains(s, "mode=generic") || !strings.Contains(s, "native_error=") {
		t.Errorf("log should name generic mode and the native error: %q", s)
	}
}

func TestAttachMissingLink(t *testing.T) {
	ns := newNS(t)
	err := ns.do(func() error {
		_, err := Attach("xdpl-nosuchlnk", Options{})
		return err
	})
	if !errors.Is(err, ErrLinkNotFound) {
		t.Fatalf("Attach to a missing link: %v, want ErrLinkNotFound", err)
	}
}

func TestAttachWithoutPrivileges(t *testing.T) {
	p := newPair(t, pairOpts{})
	err := p.A.do(func() error {
		// Capabilities are per thread: drop the effective set of this
		// throwaway thread only.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return err
		}
		data[0].Effective, data[1].Effective = 0, 0
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return err
		}
		x, err := Attach(p.AName, Options{})
		if err == nil {
			x.Close()
			return errors.New("Attach succeeded without capabilities")
		}
		if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "CAP_BPF") {
			return fmt.Errorf("Attach without capabilities: %v, want an EPERM error naming CAP_BPF", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAttachInvalidOptions(t *testing.T) {
	if _, err := Attach("lo", Options{Mode: Mode(7)}); err == nil {
		t.Error("Attach accepted mode 7")
	}
	if _, err := Attach("lo", Options{Queues: -1}); err == nil {
		t.Error("Attach accepted -1 queues")
	}
}

// Only a program in xdp.frags can run natively on a veth whose MTU does not
// fit a page; the same program without the frags flag is refused.
func TestNativeAttachNeedsFrags(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 4200})
	x := attach(t, p.A, p.AName, Options{Mode: ModeNative})
	if x.Mode() != ModeNative {
		t.Fatalf("mode %v", x.Mode())
	}
	x.Close()

	spec, err := bpf.LoadSteer()
	if err != nil {
		t.Fatal(err)
	}
	progSpec := spec.Programs[bpf.SteerProgXdpRoceSteer]
	if progSpec.Flags&unix.BPF_F_XDP_HAS_FRAGS == 0 {
		t.Fatalf("program flags %#x lack BPF_F_XDP_HAS_FRAGS", progSpec.Flags)
	}
	progSpec.Flags &^= unix.BPF_F_XDP_HAS_FRAGS
	var objs bpf.SteerObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	err = p.A.do(func() error {
		l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpRoceSteer, Interface: p.AIndex, Flags: link.XDPDriverMode})
		if err == nil {
			l.Close()
			return errors.New("non-frags program attached natively at MTU 4200")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The MTUs native XDP on veth accepts with the frags program, attaching at
// that MTU and changing to it while attached (documented in doc.go).
func TestNativeVethMTUs(t *testing.T) {
	for _, mtu := range []int{1500, 3506, 4200, 9000, 65535} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			p := newPair(t, pairOpts{mtu: mtu})
			x := attach(t, p.A, p.AName, Options{Mode: ModeNative})
			if got := linkInfo(t, p.A, p.AName).MTU; got != mtu {
				t.Fatalf("MTU %d, want %d", got, mtu)
			}
			// And back and forth while attached.
			for _, m := range []int{1500, mtu} {
				p.A.run(t, func() error { return setMTU(p.AName, m) })
			}
			p.B.run(t, func() error { return setMTU(p.BName, mtu) })
			// A frame as large as the MTU allows reaches the program whole.
			size := min(mtu, 9000) - 20 - 8
			if err := sendUDP(p.B, p.AAddr, wire.UDPPort, size, 3); err != nil {
				t.Fatal(err)
			}
			c := waitCounters(t, x, "full-size RoCE datagrams", func(c Counters) bool { return c.NoSocket >= 3 })
			if c.Malformed != 0 {
				t.Errorf("full-size frames counted malformed: %+v", c)
			}
		})
	}
}

func TestCountersNoSocketAndPassed(t *testing.T) {
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{mtu: 4200})
			x := attach(t, p.A, p.AName, Options{Mode: mode})

			// A kernel socket on 4791 in A must not see the RoCE packets.
			var guard *net.UDPConn
			p.A.run(t, func() error {
				var err error
				guard, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.AAddr.AsSlice(), Port: wire.UDPPort})
				return err
			})
			defer guard.Close()

			const n = 5
			if err := sendUDP(p.B, p.AAddr, wire.UDPPort, 1024, n); err != nil {
				t.Fatal(err)
			}
			// 4166-byte frames (RoCE path MTU 4096) are multi-buffer on veth.
			if err := sendUDP(p.B, p.AAddr, wire.UDPPort, 4166-14-20-8, n); err != nil {
				t.Fatal(err)
			}
			c := waitCounters(t, x, "RoCE without socket", func(c Counters) bool { return c.NoSocket >= 2*n })
			if c.NoSocket != 2*n || c.Redirected != 0 || c.Malformed != 0 {
				t.Errorf("counters %+v, want NoSocket %d and no redirect/malformed", c, 2*n)
			}
			_ = guard.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, _, err := guard.ReadFrom(make([]byte, 8192)); err == nil {
				t.Error("a RoCE datagram reached the kernel socket")
			}

			// Other UDP ports, ping and TCP pass.
			var other *net.UDPConn
			p.A.run(t, func() error {
				var err error
				other, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.AAddr.AsSlice(), Port: 4792})
				return err
			})
			defer other.Close()
			if err := sendUDP(p.B, p.AAddr, 4792, 100, 1); err != nil {
				t.Fatal(err)
			}
			_ = other.SetReadDeadline(time.Now().Add(waitLimit))
			if _, _, err := other.ReadFrom(make([]byte, 200)); err != nil {
				t.Errorf("UDP to port 4792 not delivered: %v", err)
			}
			before := c.Passed
			if err := ping(p.B, p.AAddr); err != nil {
				t.Errorf("ping: %v", err)
			}
			if err := tcpEcho(p.A, p.B, p.AAddr, 18515, bytes.Repeat([]byte("roce"), 3000)); err != nil {
				t.Errorf("TCP: %v", err)
			}
			c = waitCounters(t, x, "passed traffic", func(c Counters) bool { return c.Passed >= before+4 })
			if c.NoSocket != 2*n {
				t.Errorf("NoSocket moved to %d with non-RoCE traffic", c.NoSocket)
			}
		})
	}
}

func TestMalformedAndNotLocal(t *testing.T) {
	p := newPair(t, pairOpts{})
	x := attach(t, p.A, p.AName, Options{Mode: ModeNative})
	// B must not answer for frames we inject: they go from B's port to A.
	frames := [][]byte{
		roceFrame(p, p.AAddr, 40, func(_, udp []byte) { binary.BigEndian.PutUint16(udp[4:], 200) }), // UDP length beyond IP payload
		roceFrame(p, p.AAddr, 40, func(_, udp []byte) { binary.BigEndian.PutUint16(udp[4:], 9) }),   // no room for BTH+ICRC
		roceFrame(p, p.AAddr, 40, func(ip, _ []byte) { binary.BigEndian.PutUint16(ip[2:], 400) }),   // IP longer than frame
		roceFrame(p, p.AAddr, 8, nil), // payload shorter than BTH+ICRC
	}
	notLocal := roceFrame(p, netip.MustParseAddr("198.18.100.77"), 40, nil)
	fragment := roceFrame(p, p.AAddr, 40, func(ip, _ []byte) { binary.BigEndian.PutUint16(ip[6:], 0x2000) })
	good := roceFrame(p, p.AAddr, 40, nil)
	if err := sendFrames(p.B, p.BName, append(frames, notLocal, fragment, good)...); err != nil {
		t.Fatal(err)
	}
	c := waitCounters(t, x, "injected frames", func(c Counters) bool {
		return c.Malformed >= 4 && c.NotLocal >= 1 && c.Fragments >= 1 && c.NoSocket >= 1
	})
	if c.Malformed != 4 || c.NotLocal != 1 || c.Fragments != 1 || c.NoSocket != 1 {
		t.Errorf("counters %+v, want Malformed 4, NotLocal 1, Fragments 1, NoSocket 1", c)
	}
}

func TestLocalAddrs(t *testing.T) {
	p := newPair(t, pairOpts{})
	v6 := netip.MustParseAddr("fd00:198:18:100::1")
	p.A.run(t, func() error { return addAddr6(p.AName, v6) })
	x := attach(t, p.A, p.AName, Options{Mode: ModeGeneric})

	addrs, err := x.LocalAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []netip.Addr{p.AAddr, v6} {
		if !slices.Contains(addrs, want) {
			t.Errorf("local addresses %v lack %v", addrs, want)
		}
	}

	extra := netip.MustParseAddr("198.18.100.5")
	send := func() {
		t.Helper()
		if err := sendFrames(p.B, p.BName, roceFrame(p, extra, 40, nil)); err != nil {
			t.Fatal(err)
		}
	}
	send()
	waitCounters(t, x, "RoCE to a foreign address", func(c Counters) bool { return c.NotLocal == 1 })

	// A new address on the link becomes local after Sync.
	p.A.run(t, func() error {
		l, err := netlink.LinkByName(p.AName)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(l, &netlink.Addr{IPNet: prefix(extra, 24)})
	})
	if err := x.Sync(); err != nil {
		t.Fatal(err)
	}
	send()
	waitCounters(t, x, "RoCE to a synced address", func(c Counters) bool { return c.NoSocket == 1 })

	// Removed from the link, gone after Sync.
	p.A.run(t, func() error {
		l, err := netlink.LinkByName(p.AName)
		if err != nil {
			return err
		}
		return netlink.AddrDel(l, &netlink.Addr{IPNet: prefix(extra, 24)})
	})
	if err := x.Sync(); err != nil {
		t.Fatal(err)
	}
	if addrs, _ := x.LocalAddrs(); slices.Contains(addrs, extra) {
		t.Errorf("%v still local after removal and Sync: %v", extra, addrs)
	}
	send()
	waitCounters(t, x, "RoCE to a removed address", func(c Counters) bool { return c.NotLocal == 2 })

	// Explicit add/remove.
	if err := x.AddLocalAddr(extra); err != nil {
		t.Fatal(err)
	}
	send()
	waitCounters(t, x, "RoCE to an added address", func(c Counters) bool { return c.NoSocket == 2 })
	if err := x.RemoveLocalAddr(extra); err != nil {
		t.Fatal(err)
	}
	if err := x.RemoveLocalAddr(extra); err != nil {
		t.Errorf("removing an absent address: %v", err)
	}
	send()
	waitCounters(t, x, "RoCE to a removed address", func(c Counters) bool { return c.NotLocal == 3 })
	if err := x.AddLocalAddr(netip.Addr{}); err == nil {
		t.Error("AddLocalAddr accepted the zero Addr")
	}
}

// xsk is a minimal AF_XDP socket: a UMEM and rings, bound to a queue, with
// an empty fill ring (frames redirected to it are counted in its statistics
// as dropped).
type xsk struct {
	fd  int
	mem []byte
}

func newXSK(ifindex, queue int) (*xsk, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	s := &xsk{fd: fd}
	const frames, frameSize = 16, 4096
	s.mem, err = unix.Mmap(-1, 0, frames*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		s.close()
		return nil, err
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.mem[0]))), Len: uint64(len(s.mem)), Size: frameSize}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		s.close()
		return nil, fmt.Errorf("XDP_UMEM_REG: %w", e)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, frames); err != nil {
			s.close()
			return nil, fmt.Errorf("ring option %d: %w", opt, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: uint32(queue)}); err != nil {
		s.close()
		return nil, fmt.Errorf("bind: %w", err)
	}
	return s, nil
}

// received is the number of frames the kernel tried to put in the socket:
// with an empty fill ring each is dropped and counted in rx_dropped.
func (s *xsk) received() (uint64, error) {
	var st unix.XDPStatistics
	l := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return 0, e
	}
	return st.Rx_dropped, nil
}

func (s *xsk) close() {
	unix.Close(s.fd)
	if s.mem != nil {
		unix.Munmap(s.mem)
	}
}

func TestRegisterSocket(t *testing.T) {
	p := newPair(t, pairOpts{})
	x := attach(t, p.A, p.AName, Options{Mode: ModeNative})
	if x.Queues() != 1 {
		t.Fatalf("Queues() = %d, want the link's 1 RX queue", x.Queues())
	}

	udpConn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udpConn.Close()
	raw, err := udpConn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var regErr error
	if err := raw.Control(func(fd uintptr) { regErr = x.RegisterSocket(0, int(fd)) }); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(regErr, ErrNotXSK) {
		t.Errorf("RegisterSocket(UDP socket): %v, want ErrNotXSK", regErr)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := x.RegisterSocket(0, int(f.Fd())); !errors.Is(err, ErrNotXSK) {
		t.Errorf("RegisterSocket(/dev/null): %v, want ErrNotXSK", err)
	}

	var bound *xsk
	p.A.run(t, func() error {
		var err error
		bound, err = newXSK(p.AIndex, 0)
		return err
	})
	defer bound.close()
	if err := x.RegisterSocket(1, bound.fd); err == nil {
		t.Error("RegisterSocket accepted queue 1 of a 1-queue link")
	}
	if err := x.RegisterSocket(0, bound.fd); err != nil {
		t.Fatalf("RegisterSocket(bound AF_XDP socket): %v", err)
	}

	if err := sendFrames(p.B, p.BName, roceFrame(p, p.AAddr, 40, nil), roceFrame(p, p.AAddr, 40, nil)); err != nil {
		t.Fatal(err)
	}
	waitCounters(t, x, "redirect", func(c Counters) bool { return c.Redirected == 2 && c.NoSocket == 0 })
	deadline := time.Now().Add(waitLimit)
	for {
		n, err := bound.received()
		if err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket statistics show %d frames, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := x.UnregisterSocket(0); err != nil {
		t.Fatal(err)
	}
	if err := x.UnregisterSocket(0); err != nil {
		t.Errorf("second UnregisterSocket: %v", err)
	}
	if err := sendFrames(p.B, p.BName, roceFrame(p, p.AAddr, 40, nil)); err != nil {
		t.Fatal(err)
	}
	waitCounters(t, x, "after unregister", func(c Counters) bool { return c.Redirected == 2 && c.NoSocket == 1 })
}

// Child process for TestDetachOnProcessExit: attaches, reports, then exits
// or waits to be killed, never calling Close.
func TestHelperProcessAttach(t *testing.T) {
	spec := os.Getenv("XDPROCE_LOADER_HELPER")
	if spec == "" {
		t.Skip("helper process for TestDetachOnProcessExit")
	}
	nsName, rest, _ := strings.Cut(spec, ",")
	ifname, how, _ := strings.Cut(rest, ",")
	runtime.LockOSThread()
	h, err := netns.GetFromName(nsName)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	if err := netns.Set(h); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	x, err := Attach(ifname, Options{Mode: ModeNative, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("ATTACHED", x.Mode())
	if how == "exit" {
		os.Exit(0)
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until killed
	os.Exit(0)
}

func TestDetachOnProcessExit(t *testing.T) {
	for _, how := range []string{"exit", "kill"} {
		t.Run(how, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessAttach$", "-test.count=1")
			cmd.Env = append(os.Environ(), "XDPROCE_LOADER_HELPER="+p.A.name+","+p.AName+","+how)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := false
			defer func() {
				if !waited {
					cmd.Process.Kill()
					cmd.Wait()
				}
			}()
			lines := make(chan string, 1)
			go func() {
				s := bufio.NewScanner(out)
				for s.Scan() {
					if l := s.Text(); strings.HasPrefix(l, "ATTACHED") || strings.HasPrefix(l, "ERROR") {
						lines <- l
						break
					}
				}
				close(lines)
				_, _ = io.Copy(io.Discard, out)
			}()
			select {
			case l := <-lines:
				if !strings.HasPrefix(l, "ATTACHED") {
					t.Fatalf("child: %q", l)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("child did not attach within 30s")
			}
			if how == "kill" {
				if id := linkInfo(t, p.A, p.AName).XDPProgramID; id == 0 {
					t.Fatal("no XDP program while the child runs")
				}
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			_ = cmd.Wait()
			waited = true
			deadline := time.Now().Add(waitLimit)
			for {
				id := linkInfo(t, p.A, p.AName).XDPProgramID
				if id == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("XDP program %d still attached after the process ended", id)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestCountersSumCPUs(t *testing.T) {
	// Counters must sum every CPU's slot: the program ran on whichever CPU
	// the packet arrived on, so push traffic from goroutines on all CPUs.
	p := newPair(t, pairOpts{})
	x := attach(t, p.A, p.AName, Options{Mode: ModeGeneric})
	const perWorker, workers = 20, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- sendUDP(p.B, p.AAddr, wire.UDPPort, 64, perWorker)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	waitCounters(t, x, "all datagrams", func(c Counters) bool { return c.NoSocket == perWorker*workers })

	// Cross-check against the raw per-CPU map.
	var perCPU []uint64
	if err := x.objs.Stats.Lookup(uint32(bpf.SteerStatSTAT_NO_SOCKET), &perCPU); err != nil {
		t.Fatal(err)
	}
	if len(perCPU) != mustPossibleCPUs(t) {
		t.Errorf("per-CPU slice has %d entries, want %d", len(perCPU), mustPossibleCPUs(t))
	}
}

func mustPossibleCPUs(t *testing.T) int {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
