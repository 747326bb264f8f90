package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Runner runs code in a network namespace: a Host or Namespace here, or a
// benchmark's host in a namespace it did not build.
type Runner interface {
	Do(fn func() error) error
}

// TCPPair connects a TCP socket made in from's namespace to a listener made
// in to's namespace on addr, and returns both ends; Go sets TCP_NODELAY. It
// is the kernel-TCP baseline that benchmarks and demos compare with.
func TCPPair(ctx context.Context, from, to Runner, addr netip.Addr) (client, server net.Conn, err error) {
	var ln net.Listener
	if err := to.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("netns: listen on %v: %w", addr, err)
	}
	defer ln.Close()
	if err := from.Do(func() error {
		var err error
		client, err = (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("netns: dial %v: %w", ln.Addr(), err)
	}
	server, err = ln.Accept()
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("netns: accept on %v: %w", ln.Addr(), err), client.Close())
	}
	return client, server, nil
}
