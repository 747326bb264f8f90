package impair

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const socketBufferBytes = 16 << 20

// packetSocket is an AF_PACKET socket bound to one interface, delivering
// each frame after a virtio_net_hdr (so checksum offload state survives the
// round trip) with PACKET_AUXDATA (so offloaded VLAN tags are not lost).
type packetSocket struct {
	file *os.File
	rc   syscall.RawConn
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openPacketSocket opens the socket in the calling thread's network
// namespace. Frames it sends carry mark (SO_MARK).
func openPacketSocket(ifindex int, mark uint32) (*packetSocket, error) {
	// Protocol 0 receives nothing until bind names the interface, so no
	// frame of another interface can slip in before.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("impair: packet socket: %w", err)
	}
	opts := []struct {
		level, name, value int
		what               string
	}{
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"},
		{unix.SOL_PACKET, unix.PACKET_AUXDATA, 1, "PACKET_AUXDATA"},
		{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING"},
		{unix.SOL_SOCKET, unix.SO_MARK, int(mark), "SO_MARK"},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBufferBytes, "SO_RCVBUFFORCE"},
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBufferBytes, "SO_SNDBUFFORCE"},
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("impair: packet socket %s: %w", o.what, err)
		}
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("impair: bind packet socket to ifindex %d: %w", ifindex, err)
	}
	// A non-blocking fd wrapped in os.File joins the runtime poller, so
	// reads park the goroutine and honour read deadlines.
	file := os.NewFile(uintptr(fd), "impair-packet")
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("impair: packet socket: %w", err)
	}
	return &packetSocket{file: file, rc: rc}, nil
}

// takeDrops returns the frames the kernel dropped for lack of receive
// buffer space since the last call (PACKET_STATISTICS resets on read).
func (s *packetSocket) takeDrops() uint64 {
	var drops uint64
	_ = s.rc.Control(func(fd uintptr) {
		st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS)
		if err == nil {
			drops = uint64(st.Drops)
		}
	})
	return drops
}

func (s *packetSocket) Close() error { return s.file.Close() }
