package bench

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/internal/netns"
)

// Host is one end of the measured link: an interface with an IPv4 address in
// a network namespace.
type Host struct {
	Name string
	Link string
	Addr netip.Addr
	MTU  int
	// do runs fn with the calling goroutine's OS thread in the host's namespace.
	do func(fn func() error) error
}

// Do runs fn in the host's network namespace; sockets and devices created in
// fn belong to it.
func (h *Host) Do(fn func() error) error { return h.do(fn) }

// namespacePrefix names the namespaces the benchmark creates.
const namespacePrefix = "xdpbench"

// buildHosts creates two namespaces joined by one veth pair with queues RX
// and TX queues (at least one) and returns their hosts and a function that
// removes everything.
func buildHosts(mtu, queues int) ([2]*Host, func() error, error) {
	if _, err := netns.Sweep(namespacePrefix); err != nil {
		return [2]*Host{}, nil, fmt.Errorf("bench: removing stale namespaces: %w", err)
	}
	topo, err := netns.Build(netns.Config{Prefix: namespacePrefix, Kind: netns.Direct, MTU: mtu, Queues: max(queues, 1)})
	if err != nil {
		return [2]*Host{}, nil, fmt.Errorf("bench: building namespaces: %w", err)
	}
	var hosts [2]*Host
	for i, h := range topo.Hosts {
		hosts[i] = &Host{Name: h.Namespace.Name(), Link: h.Link, Addr: h.Addr, MTU: h.MTU, do: h.Do}
	}
	return hosts, topo.Close, nil
}
