package nic

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/wire"
)

// BindGuard binds kernel UDP sockets to 0.0.0.0:4791 and [::]:4791 in the
// calling thread's network namespace; see GuardPort.
func BindGuard() (io.Closer, error) {
	return GuardPort(wire.UDPPort)
}

// GuardPort binds kernel UDP sockets to 0.0.0.0:port and [::]:port
// (IPV6_V6ONLY) in the calling thread's network namespace and never reads
// them. While they are open the kernel does not answer RoCE packets it sees
// (those XDP passes) with ICMP port unreachable, and no other program can
// take the port; rdma_rxe does the same. If the port is taken the error
// wraps EADDRINUSE. If IPv6 is disabled only the IPv4 socket is bound.
func GuardPort(port int) (io.Closer, error) {
	if port <= 0 || port > 0xffff {
		return nil, fmt.Errorf("nic: guard: invalid UDP port %d", port)
	}
	g := &guard{}
	for _, b := range []struct {
		network string
		ip      net.IP
	}{
		{"udp4", net.IPv4zero},
		{"udp6", net.IPv6unspecified}, // Go sets IPV6_V6ONLY for "udp6"
	} {
		c, err := net.ListenUDP(b.network, &net.UDPAddr{IP: b.ip, Port: port})
		if err != nil {
			if b.network == "udp6" && errors.Is(err, unix.EAFNOSUPPORT) {
				continue
			}
			g.Close()
			if errors.Is(err, unix.EADDRINUSE) {
				return nil, fmt.Errorf("nic: guard UDP port %d is already in use (rdma_rxe loaded or another RoCE endpoint running?): %w", port, err)
			}
			return nil, fmt.Errorf("nic: guard UDP port %d: %w", port, err)
		}
		// Nothing reads these sockets: keep what can queue up small.
		_ = c.SetReadBuffer(1)
		g.conns = append(g.conns, c)
	}
	return g, nil
}

type guard struct {
	once  sync.Once
	err   error
	conns []*net.UDPConn
}

// Close releases the port; it is idempotent.
func (g *guard) Close() error {
	g.once.Do(func() {
		var errs []error
		for _, c := range g.conns {
			errs = append(errs, c.Close())
		}
		g.err = errors.Join(errs...)
	})
	return g.err
}
