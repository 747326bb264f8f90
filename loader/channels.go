package loader

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolChannels is struct ethtool_channels (ETHTOOL_GCHANNELS).
type ethtoolChannels struct {
	cmd                                         uint32
	maxRX, maxTX, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with ifr_data, as SIOCETHTOOL takes it.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// activeRXQueues asks the driver how many RX queues are in use
// (ETHTOOL_GCHANNELS: rx plus combined channels). A veth made by
// `ip link add ... type veth` allocates one queue per CPU but uses one;
// binding an AF_XDP socket to an unused queue fails with EINVAL. ok is false
// when the driver does not report channels.
func activeRXQueues(ifname string) (n int, ok bool, err error) {
	if len(ifname) >= unix.IFNAMSIZ {
		return 0, false, fmt.Errorf("loader: interface name %q too long", ifname)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false, fmt.Errorf("loader: ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	var req ifreqData
	copy(req.name[:], ifname)
	req.data = unsafe.Pointer(&ch)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	if errno != 0 {
		if errors.Is(errno, unix.EOPNOTSUPP) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("loader: ETHTOOL_GCHANNELS on %s: %w", ifname, errno)
	}
	n = int(ch.rxCount + ch.combinedCount)
	return n, n > 0, nil
}
