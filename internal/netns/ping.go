package netns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/wire"
)

const (
	icmpEchoRequest   = 8
	icmpEchoReply     = 0
	icmp6EchoRequest  = 128
	icmp6EchoReply    = 129
	icmpHeaderLen     = 8
	pingResend        = 200 * time.Millisecond
	ipv4MinHeaderSize = 20
)

var pingID atomic.Uint32

// Ping sends ICMP echo requests with size payload bytes from this namespace
// to dst, one every 200 ms, until one is answered (nil) or ctx ends. The
// requests may not be fragmented (IPv4 DF, IPv6 no fragmentation), so a
// size that does not fit the route's MTU fails at once with an error
// wrapping unix.EMSGSIZE. No ping binary is needed.
func (n *Namespace) Ping(ctx context.Context, dst netip.Addr, size int) error {
	if size < 0 || size > 65000 {
		return fmt.Errorf("netns: ping size %d", size)
	}
	dst = dst.Unmap()
	var fd int
	err := n.Do(func() error {
		var err error
		if dst.Is4() {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
			}
		} else {
			fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			}
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
			}
		}
		if err != nil && fd > 0 {
			unix.Close(fd)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("netns %s: ping socket: %w", n.name, err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("netns %s: ping: %w", n.name, err)
	}

	id := uint16(os.Getpid()) ^ uint16(pingID.Add(1)<<8)
	req := make([]byte, icmpHeaderLen+size)
	for i := icmpHeaderLen; i < len(req); i++ {
		req[i] = byte(i)
	}
	var to unix.Sockaddr
	if dst.Is4() {
		req[0] = icmpEchoRequest
		to = &unix.SockaddrInet4{Addr: dst.As4()}
	} else {
		req[0] = icmp6EchoRequest
		to = &unix.SockaddrInet6{Addr: dst.As16()}
	}
	binary.BigEndian.PutUint16(req[4:6], id)
	reply := make([]byte, 65536)
	for seq := uint16(1); ; seq++ {
		binary.BigEndian.PutUint16(req[6:8], seq)
		if dst.Is4() {
			binary.BigEndian.PutUint16(req[2:4], 0)
			binary.BigEndian.PutUint16(req[2:4], wire.Checksum(req, 0))
		} // the kernel fills in the ICMPv6 checksum
		if err := unix.Sendto(fd, req, 0, to); err != nil {
			return fmt.Errorf("netns %s: ping %v size %d: %w", n.name, dst, size, err)
		}
		resend := time.Now().Add(pingResend)
		for time.Now().Before(resend) {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("netns %s: ping %v size %d: no reply: %w", n.name, dst, size, err)
			}
			m, from, err := unix.Recvfrom(fd, reply, 0)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("netns %s: ping %v: %w", n.name, dst, err)
			}
			if isEchoReply(reply[:m], from, dst, id, seq, size) {
				return nil
			}
		}
	}
}

func isEchoReply(b []byte, from unix.Sockaddr, dst netip.Addr, id, seq uint16, size int) bool {
	var src netip.Addr
	switch sa := from.(type) {
	case *unix.SockaddrInet4:
		src = netip.AddrFrom4(sa.Addr)
		// IPv4 raw sockets deliver the IP header too.
		if len(b) < ipv4MinHeaderSize {
			return false
		}
		ihl := int(b[0]&0x0F) * 4
		if ihl < ipv4MinHeaderSize || len(b) < ihl {
			return false
		}
		b = b[ihl:]
		if len(b) < icmpHeaderLen || b[0] != icmpEchoReply {
			return false
		}
	case *unix.SockaddrInet6:
		src = netip.AddrFrom16(sa.Addr)
		if len(b) < icmpHeaderLen || b[0] != icmp6EchoReply {
			return false
		}
	default:
		return false
	}
	return src == dst && len(b) == icmpHeaderLen+size &&
		binary.BigEndian.Uint16(b[4:6]) == id && binary.BigEndian.Uint16(b[6:8]) == seq
}
