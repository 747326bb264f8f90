package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// TCPPair connects a TCP socket in from's namespace to a listener in to's
// namespace (on to's address) and returns both ends; Go sets TCP_NODELAY.
// It is the kernel-TCP baseline that benchmarks and demos compare with.
func TCPPair(ctx context.Context, from, to *Host) (client, server net.Conn, err error) {
	var ln net.Listener
	if err := to.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(to.Addr, 0).String())
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("netns: listen in %s: %w", to.Name, err)
	}
	defer ln.Close()
	if err := from.Do(func() error {
		var err error
		client, err = (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("netns: dial from %s: %w", from.Name, err)
	}
	server, err = ln.Accept()
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("netns: accept in %s: %w", to.Name, err), client.Close())
	}
	return client, server, nil
}
