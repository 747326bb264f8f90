package loader

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrLinkNotFound is returned when the named link does not exist in the
// calling thread's network namespace.
var ErrLinkNotFound = errors.New("link not found")

// Link describes a network interface.
type Link struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	MTU   int
	// OperState is the RFC 2863 operational state as the kernel reports
	// it: "up", "down", "unknown", "lower-layer-down", "dormant", ...
	OperState string
	// Up reports whether the link is administratively up (IFF_UP).
	Up bool
	// NumRXQueues is how many RX queues the driver uses (its ethtool
	// channels); where it does not report them, how many it allocated.
	NumRXQueues int
	NumTXQueues int
	// XDPProgramID is the ID of the attached XDP program, 0 if none.
	XDPProgramID uint32
	// Addrs are the link's IPv4 addresses then its IPv6 addresses, each in
	// the kernel's order (the GID table follows it).
	Addrs []netip.Addr
}

// LinkInfo describes the link ifname of the calling thread's network
// namespace.
func LinkInfo(ifname string) (Link, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return Link{}, fmt.Errorf("loader: netlink: %w", err)
	}
	defer h.Close()
	l, err := linkByName(h, ifname)
	if err != nil {
		return Link{}, err
	}
	a := l.Attrs()
	info := Link{
		Name:        a.Name,
		Index:       a.Index,
		MAC:         a.HardwareAddr,
		MTU:         a.MTU,
		OperState:   a.OperState.String(),
		Up:          a.Flags&net.FlagUp != 0,
		NumRXQueues: a.NumRxQueues,
		NumTXQueues: a.NumTxQueues,
	}
	if a.Xdp != nil && a.Xdp.Attached {
		info.XDPProgramID = a.Xdp.ProgId
	}
	if info.Addrs, err = linkAddrs(h, l); err != nil {
		return Link{}, fmt.Errorf("loader: addresses of %s: %w", ifname, err)
	}
	if n, ok, err := activeRXQueues(a.Name); err != nil {
		return Link{}, err
	} else if ok && n < info.NumRXQueues {
		info.NumRXQueues = n
	}
	return info, nil
}

func linkByName(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("loader: link %q: %w in this network namespace", name, ErrLinkNotFound)
		}
		return nil, fmt.Errorf("loader: link %q: %w", name, err)
	}
	return l, nil
}

// DumpRetries bounds the retries of a netlink dump that the kernel reports
// as interrupted (the table changed during the dump).
const DumpRetries = 5

func addrList(h *netlink.Handle, l netlink.Link, family int) ([]netlink.Addr, error) {
	var (
		addrs []netlink.Addr
		err   error
	)
	for range DumpRetries {
		addrs, err = h.AddrList(l, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return addrs, err
}

// linkAddrs lists the link's IPv4 addresses then its IPv6 addresses, in the
// kernel's order.
func linkAddrs(h *netlink.Handle, l netlink.Link) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		addrs, err := addrList(h, l, family)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
