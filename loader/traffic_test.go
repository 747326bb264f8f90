package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/wire"
)

// Traffic helpers for the namespace tests. Every wait is bounded.

const waitLimit = 5 * time.Second

// waitCounters polls x's counters until ok accepts them or waitLimit passes.
func waitCounters(t *testing.T, x *XDP, what string, ok func(Counters) bool) Counters {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		c, err := x.Counters()
		if err != nil {
			t.Fatalf("counters: %v", err)
		}
		if ok(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: counters did not get there within %v: %+v", what, waitLimit, c)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sendUDP sends n datagrams of size bytes from the namespace to dst:port.
func sendUDP(ns *testNS, dst netip.Addr, port, size, n int) error {
	return ns.do(func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(port))))
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, size)
		for range n {
			if _, err := c.Write(buf); err != nil {
				return fmt.Errorf("send to %v:%d: %w", dst, port, err)
			}
		}
		return nil
	})
}

// sendFrames writes raw Ethernet frames on ifname through an AF_PACKET
// socket.
func sendFrames(ns *testNS, ifname string, frames ...[]byte) error {
	return ns.do(func() error {
		l, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: l.Index, Halen: 6}
		for _, f := range frames {
			copy(sa.Addr[:], f[:6])
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				return fmt.Errorf("send frame: %w", err)
			}
		}
		return nil
	})
}

// ping sends ICMP echo requests from the namespace to dst until one is
// answered or waitLimit passes.
func ping(ns *testNS, dst netip.Addr) error {
	return ns.do(func() error {
		c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		const id = 0x5844
		deadline := time.Now().Add(waitLimit)
		for seq := uint16(1); time.Now().Before(deadline); seq++ {
			req := []byte{8, 0, 0, 0, id >> 8, id & 0xff, byte(seq >> 8), byte(seq), 'x', 'd', 'p'}
			binary.BigEndian.PutUint16(req[2:], wire.Checksum(req, 0))
			if _, err := c.WriteTo(req, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 1500)
			for {
				n, from, err := c.ReadFrom(buf)
				if err != nil {
					break // timeout: send the next request
				}
				// Raw ICMP sockets deliver the ICMP message without the IP header.
				if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id &&
					from.(*net.IPAddr).IP.Equal(dst.AsSlice()) {
					return nil
				}
			}
		}
		return fmt.Errorf("no echo reply from %s", dst)
	})
}

// tcpEcho starts a TCP echo server in server at addr:port and checks that a
// client in client gets msg echoed back.
func tcpEcho(server, client *testNS, addr netip.Addr, port int, msg []byte) error {
	var ln net.Listener
	err := server.do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		return err
	})
	if err != nil {
		return err
	}
	defer ln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		_, _ = io.CopyN(c, c, int64(len(msg)))
	}()
	return client.do(func() error {
		d := net.Dialer{Timeout: waitLimit}
		c, err := d.Dial("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		if err != nil {
			ln.Close()
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if !bytes.Equal(got, msg) {
			return errors.New("echo mismatch")
		}
		return nil
	})
}

// roceFrame builds an Ethernet/IPv4/UDP frame to port 4791 with payload
// bytes after the UDP header; mutate may damage it.
func roceFrame(p *pair, dst netip.Addr, payload int, mutate func(ip, udp []byte)) []byte {
	f := make([]byte, 14+20+8+payload)
	copy(f[0:6], p.AMAC)
	copy(f[6:12], p.BMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	s, d := p.BAddr.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], 0xc000)
	binary.BigEndian.PutUint16(udp[2:], wire.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+payload))
	if mutate != nil {
		mutate(ip, udp)
	}
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], wire.Checksum(ip, 0))
	return f
}
