package nic

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
)

func TestGuardBlocksSecondBind(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1, IPv6: true})
	err := topo.Hosts[0].Do(func() error {
		g, err := BindGuard()
		if err != nil {
			return err
		}
		defer g.Close()
		for _, network := range []string{"udp4", "udp6"} {
			c, err := net.ListenPacket(network, ":4791")
			if err == nil {
				c.Close()
				return errors.New(network + ": second bind to 4791 succeeded")
			}
			if !errors.Is(err, unix.EADDRINUSE) {
				return err
			}
		}
		if _, err := BindGuard(); !errors.Is(err, unix.EADDRINUSE) {
			return errors.New("second BindGuard: want EADDRINUSE, got " + errString(err))
		}
		if err := g.Close(); err != nil {
			return err
		}
		if err := g.Close(); err != nil {
			return errors.New("second Close: " + err.Error())
		}
		g2, err := BindGuard()
		if err != nil {
			return errors.New("BindGuard after Close: " + err.Error())
		}
		return g2.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func TestGuardInvalidPort(t *testing.T) {
	for _, p := range []int{0, -1, 65536} {
		if _, err := GuardPort(p); err == nil {
			t.Errorf("GuardPort(%d) succeeded", p)
		}
	}
}

// Without a guard the kernel answers a datagram to a closed port with ICMP
// port unreachable, which a connected sender sees as ECONNREFUSED; with the
// guard it stays silent.
func TestGuardSuppressesPortUnreachable(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	const port = 14791 // GuardPort on another port keeps the test independent of 4791
	refused := func() bool {
		t.Helper()
		var got bool
		err := b.Do(func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Addr, port)))
			if err != nil {
				return err
			}
			defer c.Close()
			// Several tries: the first may wait for ARP, and under the
			// load of other tests the kernel's ICMP rate limits may eat
			// a reply or two.
			for range 15 {
				if _, err := c.Write([]byte("roce")); err != nil {
					if errors.Is(err, unix.ECONNREFUSED) {
						got = true
						return nil
					}
					return err
				}
				_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				_, err := c.Read(make([]byte, 16))
				if errors.Is(err, unix.ECONNREFUSED) {
					got = true
					return nil
				}
				if err != nil && !errors.Is(err, unix.EAGAIN) && !isTimeout(err) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if !refused() {
		t.Fatal("no port unreachable without the guard: the test cannot see the difference")
	}
	var g io.Closer
	if err := a.Do(func() (err error) {
		g, err = GuardPort(port)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if refused() {
		t.Error("port unreachable despite the guard")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
