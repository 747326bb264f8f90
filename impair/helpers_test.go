package impair_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/internal/netns"
)

// RoCEv2-shaped payloads: a BTH (SEND_ONLY to QP 0x11, PSN = seq), the
// sequence number again, a filler that depends on seq and a fake ICRC.
const (
	bthLen   = 12
	icrcLen  = 4
	rocePort = 4791
	srcPort  = 0xC000
)

func payload(seq uint32, size int) []byte {
	b := make([]byte, size)
	b[0] = 0x04 // RC SEND_ONLY
	binary.BigEndian.PutUint16(b[2:4], 0xFFFF)
	binary.BigEndian.PutUint32(b[4:8], 0x11)
	binary.BigEndian.PutUint32(b[8:12], seq&0xFFFFFF)
	binary.BigEndian.PutUint32(b[12:16], seq)
	for i := 16; i < size-icrcLen; i++ {
		b[i] = byte(uint32(i) * (seq + 7))
	}
	binary.BigEndian.PutUint32(b[size-icrcLen:], 0xDEADBEEF^seq)
	return b
}

func seqOf(p []byte) uint32 { return binary.BigEndian.Uint32(p[12:16]) }

// udpSocket makes a UDP socket in h's namespace.
func udpSocket(t testing.TB, h *netns.Host, v6 bool, bind netip.AddrPort, connect netip.AddrPort, noCheck bool) int {
	t.Helper()
	var fd int
	err := h.Do(func() error {
		family := unix.AF_INET
		if v6 {
			family = unix.AF_INET6
		}
		var err error
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
			return err
		}
		if noCheck {
			// RoCEv2 sends UDP checksum 0.
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
				return err
			}
		}
		if bind.IsValid() {
			if err := unix.Bind(fd, sockaddr(bind)); err != nil {
				return fmt.Errorf("bind %v: %w", bind, err)
			}
		}
		if connect.IsValid() {
			if err := unix.Connect(fd, sockaddr(connect)); err != nil {
				return fmt.Errorf("connect %v: %w", connect, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("udp socket in %s: %v", h.Name, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

// flow is one test run: n numbered packets from A to B's port.
type flow struct {
	n, size int
	v6      bool
	noCheck bool
	port    uint16
}

// sendAll sends n packets from a pinned thread, pacing on the injector:
// at most window packets may be in flight before it has read them, so no
// queue on the way overflows and losses are the injector's decisions only.
func sendAll(t testing.TB, fd int, f flow, inj *impair.Injector) {
	t.Helper()
	var progress func() uint64
	if inj != nil {
		progress = func() uint64 { return inj.Counters().Received }
	}
	sendPaced(t, f.n, 32, progress, func(seq uint32) error {
		_, err := unix.Write(fd, payload(seq, f.size))
		return err
	})
}

// sendPaced calls send for seq 0..n-1 from a pinned thread; with progress
// (a count of packets that got through so far) it keeps at most window in
// flight, as sendAll describes.
func sendPaced(t testing.TB, n, window int, progress func() uint64, send func(seq uint32) error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		// Pinned and never unlocked: one CPU, so the kernel's per-CPU
		// queues cannot reorder the stream before the injector sees it;
		// the thread is discarded afterwards.
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(0)
		_ = unix.SchedSetaffinity(0, &set)
		base := uint64(0)
		if progress != nil {
			base = progress()
		}
		for i := 0; i < n; i++ {
			if progress != nil && i%window == 0 {
				deadline := time.Now().Add(5 * time.Second)
				for progress()-base+uint64(window) < uint64(i) {
					if time.Now().After(deadline) {
						errc <- fmt.Errorf("stuck at %d of %d", progress()-base, i)
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			if err := send(uint32(i)); err != nil {
				errc <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// receive reads datagrams until want arrived (then checks briefly for
// surplus) or nothing came for quiet.
func receive(t testing.TB, fd int, want int, quiet time.Duration) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]byte, 65536)
	setTimeout := func(d time.Duration) {
		tv := unix.NsecToTimeval(d.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
	}
	setTimeout(quiet)
	for len(got) <= want+want/2+16 {
		if len(got) == want {
			setTimeout(20 * time.Millisecond)
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append([]byte(nil), buf[:n]...))
	}
	return got
}

type run struct {
	topo     *netns.Topology
	a, b     *netns.Host
	sender   int
	receiver int
}

func newRun(t testing.TB, f flow, topoCfg netns.Config) *run {
	t.Helper()
	topo := netns.New(t, topoCfg)
	r := &run{topo: topo, a: topo.Hosts[0], b: topo.Hosts[1]}
	port := f.port
	if port == 0 {
		port = rocePort
	}
	dst, src := r.b.Addr, r.a.Addr
	if f.v6 {
		dst, src = r.b.Addr6, r.a.Addr6
	}
	r.receiver = udpSocket(t, r.b, f.v6, netip.AddrPortFrom(dst, port), netip.AddrPort{}, false)
	r.sender = udpSocket(t, r.a, f.v6, netip.AddrPortFrom(src, srcPort), netip.AddrPortFrom(dst, port), f.noCheck)
	return r
}
