package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/impair"
)

// Kind is how hosts are joined.
type Kind int

const (
	// Bridge puts every host's veth on a bridge in the wire namespace: one
	// L2 segment, 198.18.0.0/24 (host i is 198.18.0.<i+1>).
	Bridge Kind = iota
	// Direct joins exactly two hosts with one veth pair; there is no wire
	// namespace (and so no fault injection).
	Direct
	// Router gives host i its own subnet 198.18.<i+1>.0/24 (host .2, the
	// wire namespace's port .1 as default gateway) and lets the wire
	// namespace route between them.
	Router
)

func (k Kind) String() string {
	switch k {
	case Bridge:
		return "bridge"
	case Direct:
		return "direct"
	case Router:
		return "router"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Limits of Config.
const (
	DefaultMTU = 1500
	MinMTU     = 68
	MaxMTU     = 65535 // veth's maximum
	MaxQueues  = 256
	MaxHosts   = 200
)

// Errors.
var (
	ErrBadConfig = errors.New("netns: bad config")
	ErrNoWire    = errors.New("netns: topology has no wire namespace")
	ErrNoHost    = errors.New("netns: host not in topology")
)

// Config describes a topology. The zero value is two hosts "a" and "b"
// on a bridge, MTU 1500, kernel-default queue counts, IPv4 only, learned
// neighbours, no faults.
type Config struct {
	// Prefix starts every namespace name ("<Prefix>-<pid>-<n>-<role>")
	// and link name; lower-case letters and digits. Default "xdpt".
	Prefix string
	Kind   Kind
	// Hosts lists the hosts; default two, "a" and "b".
	Hosts []HostConfig
	// MTU of every link unless a host overrides it. Default 1500.
	MTU int
	// Queues is the RX and TX queue count of every veth end unless a host
	// overrides it; 0 keeps the kernel default (one per CPU). AF_XDP users
	// usually want 1. Both ends of a pair get the same count: native XDP
	// on a veth needs its RX queues >= its peer's TX queues.
	Queues int
	// IPv6 adds fd00:198:18::/64-style addresses, usable at once (no DAD).
	// Without it IPv6 is disabled in every namespace (no ND/MLD noise).
	IPv6 bool
	// StaticNeighbors installs permanent neighbour entries for every
	// address a host talks to directly, so no ARP/ND happens.
	StaticNeighbors bool
	// Hub turns learning off on the bridge's ports, so it floods every
	// frame to every port: a host sees the others' traffic, as an observer
	// on a shared segment would. Bridge only.
	Hub bool
	// Faults, if set, attaches a RoCEv2 fault injector to every wire port:
	// traffic sent by host i is impaired with Seed+i. Not for Direct.
	// Change or stop it at run time with Topology.SetFaults.
	Faults *impair.Config
}

// HostConfig describes one host.
type HostConfig struct {
	Name   string // lower-case letters and digits, at most 8; default "a", "b", ...
	MTU    int    // this host's link (both veth ends); 0: Config.MTU
	Queues int    // this host's link (both veth ends); 0: Config.Queues
}

// Host is a network namespace with one veth link to the wire (or, for
// Direct, to the other host).
type Host struct {
	*Namespace
	Name    string           // logical name from HostConfig (the namespace's: Namespace.Name())
	Index   int              // position in Topology.Hosts
	Link    string           // the veth in this host's namespace
	Ifindex int              // its index in this namespace
	MAC     net.HardwareAddr // its address
	MTU     int
	Queues  int        // 0: kernel default
	Addr    netip.Addr // IPv4 address on Link
	Addr6   netip.Addr // IPv6 address, invalid without Config.IPv6
	Bits    int        // IPv4 prefix length (24); IPv6 uses 64
	// Router only: the wire port's addresses, installed as default routes.
	Gateway, Gateway6 netip.Addr
	// PeerLink is the other end of Link: a port in the wire namespace
	// (Bridge, Router) or the other host's Link (Direct).
	PeerLink string
	PeerMAC  net.HardwareAddr
}

// Topology is a set of hosts joined through a wire namespace (or
// directly). Close (or the test cleanup New registers) deletes every
// namespace, which destroys the links in them.
type Topology struct {
	Kind  Kind
	Hosts []*Host
	// Wire is the namespace in the middle (nil for Direct): the place for
	// fault injection, captures and anything else that must see traffic
	// on the way.
	Wire *Namespace
	// Bridge is the bridge's name in Wire (Bridge kind only).
	Bridge string

	mu         sync.Mutex
	namespaces []*Namespace
	injectors  map[*Host]*impair.Injector
	closed     bool
}

// New builds a topology for a test and registers its removal with
// t.Cleanup, which runs also when the test fails or panics. It skips the
// test when not root (fails under CI=true), and fails it if the topology
// cannot be built.
func New(t TB, cfg Config) *Topology {
	t.Helper()
	RequireRoot(t)
	topo, err := Build(cfg)
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("netns: cleanup: %v", err)
		}
	})
	return topo
}

var hostNameRE = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

func (c *Config) normalize() error {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(c.Prefix) {
		return fmt.Errorf("%w: Prefix %q (want [a-z][a-z0-9]{0,15})", ErrBadConfig, c.Prefix)
	}
	if c.Kind != Bridge && c.Kind != Direct && c.Kind != Router {
		return fmt.Errorf("%w: Kind %v", ErrBadConfig, c.Kind)
	}
	hosts := append([]HostConfig(nil), c.Hosts...)
	if len(hosts) == 0 {
		hosts = []HostConfig{{}, {}}
	}
	if len(hosts) > MaxHosts {
		return fmt.Errorf("%w: %d hosts, at most %d", ErrBadConfig, len(hosts), MaxHosts)
	}
	if c.Kind == Direct && len(hosts) != 2 {
		return fmt.Errorf("%w: Direct joins exactly 2 hosts, not %d", ErrBadConfig, len(hosts))
	}
	if c.Kind == Direct && c.Faults != nil {
		return fmt.Errorf("%w: Faults need a wire namespace (Bridge or Router)", ErrBadConfig)
	}
	if c.Faults != nil {
		if err := c.Faults.Validate(); err != nil {
			return err
		}
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	seen := map[string]bool{"wire": true}
	for i := range hosts {
		h := &hosts[i]
		if h.Name == "" {
			h.Name = defaultHostName(i)
		}
		if !hostNameRE.MatchString(h.Name) || seen[h.Name] {
			return fmt.Errorf("%w: host name %q (want unique [a-z0-9]{1,8}, not \"wire\")", ErrBadConfig, h.Name)
		}
		seen[h.Name] = true
		if h.MTU == 0 {
			h.MTU = c.MTU
		}
		if h.Queues == 0 {
			h.Queues = c.Queues
		}
		if h.MTU < MinMTU || h.MTU > MaxMTU {
			return fmt.Errorf("%w: host %s MTU %d (want %d..%d)", ErrBadConfig, h.Name, h.MTU, MinMTU, MaxMTU)
		}
		if h.Queues < 0 || h.Queues > MaxQueues {
			return fmt.Errorf("%w: host %s queues %d (want 0..%d)", ErrBadConfig, h.Name, h.Queues, MaxQueues)
		}
	}
	if c.Kind == Direct && hosts[0].MTU != hosts[1].MTU {
		return fmt.Errorf("%w: Direct hosts share one veth pair and so one MTU", ErrBadConfig)
	}
	c.Hosts = hosts
	return nil
}

func defaultHostName(i int) string {
	if i < 26 {
		return string(rune('a' + i))
	}
	return fmt.Sprintf("h%d", i)
}

// Build creates a topology outside a test (for the CLI's demo and bench);
// the caller must Close it. On error nothing is left behind.
func Build(cfg Config) (*Topology, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	// Leftovers of killed runs would otherwise pile up.
	_, _ = Sweep(cfg.Prefix)

	topo := &Topology{Kind: cfg.Kind, injectors: map[*Host]*impair.Injector{}}
	built := false
	defer func() {
		if !built { // also on panic
			_ = topo.Close()
		}
	}()
	if err := topo.build(cfg, os.Getpid(), topologySeq.Add(1)); err != nil {
		if cerr := topo.Close(); cerr != nil {
			err = fmt.Errorf("%w (cleanup: %v)", err, cerr)
		}
		return nil, err
	}
	built = true
	return topo, nil
}

func (t *Topology) build(cfg Config, pid int, seq uint64) error {
	var err error
	if cfg.Kind != Direct {
		t.Wire, err = t.newNamespace(namespaceName(cfg.Prefix, pid, seq, "wire"),
			nsSysctls{ipv6: cfg.IPv6, forward: cfg.Kind == Router})
		if err != nil {
			return err
		}
	}
	for i, hc := range cfg.Hosts {
		ns, err := t.newNamespace(namespaceName(cfg.Prefix, pid, seq, hc.Name), nsSysctls{ipv6: cfg.IPv6})
		if err != nil {
			return err
		}
		h := &Host{Namespace: ns, Name: hc.Name, Index: i, MTU: hc.MTU, Queues: hc.Queues, Bits: 24}
		if h.Link, err = linkName(cfg.Prefix, pid, seq, 'h', i); err != nil {
			return err
		}
		if h.PeerLink, err = linkName(cfg.Prefix, pid, seq, 'w', i); err != nil {
			return err
		}
		h.MAC = hostMAC(i, 2)
		h.PeerMAC = hostMAC(i, 1)
		assignAddresses(h, cfg)
		t.Hosts = append(t.Hosts, h)
	}
	if cfg.Kind == Direct {
		a, b := t.Hosts[0], t.Hosts[1]
		a.PeerLink, b.PeerLink = b.Link, a.Link
		a.PeerMAC, b.PeerMAC = b.MAC, a.MAC
	}

	switch cfg.Kind {
	case Direct:
		err = t.buildDirect()
	case Bridge:
		if t.Bridge, err = linkName(cfg.Prefix, pid, seq, 'b', 0); err == nil {
			err = t.buildWired(cfg)
		}
	case Router:
		err = t.buildWired(cfg)
	}
	if err != nil {
		return err
	}
	for _, h := range t.Hosts {
		if err := h.configure(cfg); err != nil {
			return err
		}
	}
	if err := t.waitReady(); err != nil {
		return err
	}
	if cfg.StaticNeighbors {
		if err := t.addNeighbors(cfg); err != nil {
			return err
		}
	}
	if cfg.Faults != nil {
		for i, h := range t.Hosts {
			fc := *cfg.Faults
			fc.Seed += uint64(i)
			if err := t.SetFaults(h, &fc); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Topology) newNamespace(name string, s nsSysctls) (*Namespace, error) {
	ns, err := createNamespace(name, s)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.namespaces = append(t.namespaces, ns)
	t.mu.Unlock()
	return ns, nil
}

// hostMAC is a locally administered unicast address: 02:78:64 ("xd"),
// then the host index and the side (1 wire, 2 host).
func hostMAC(idx int, side byte) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0x78, 0x64, byte(idx >> 8), byte(idx), side}
}

func assignAddresses(h *Host, cfg Config) {
	i := h.Index
	switch cfg.Kind {
	case Router:
		h.Addr = netip.AddrFrom4([4]byte{198, 18, byte(i + 1), 2})
		h.Gateway = netip.AddrFrom4([4]byte{198, 18, byte(i + 1), 1})
		if cfg.IPv6 {
			h.Addr6 = ipv6Addr(uint16(i+1), 2)
			h.Gateway6 = ipv6Addr(uint16(i+1), 1)
		}
	default:
		h.Addr = netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		if cfg.IPv6 {
			h.Addr6 = ipv6Addr(0, uint16(i+1))
		}
	}
}

// ipv6Addr is fd00:198:18:<subnet>::<host>.
func ipv6Addr(subnet, host uint16) netip.Addr {
	return netip.AddrFrom16([16]byte{
		0xfd, 0x00, 0x01, 0x98, 0x00, 0x18, byte(subnet >> 8), byte(subnet),
		14: byte(host >> 8), 15: byte(host),
	})
}

// firstIndex is where explicitly chosen ifindexes start: well clear of
// the kernel's own numbering in a fresh namespace (lo 1, then 2, 3...).
// Both ends of a pair must not share an ifindex (they may, being in
// different namespaces): a veth whose peer's ifindex equals its own is not
// an "urgent" link-watch event, and its carrier then takes up to a second
// to count as up, delaying IPv6 and the bridge.
const firstIndex = 1000

func vethSpec(name string, index int, mac net.HardwareAddr, peer string, peerMAC net.HardwareAddr, peerNS int, mtu, queues int) *netlink.Veth {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	attrs.Index = index
	attrs.MTU = mtu
	attrs.HardwareAddr = mac
	attrs.NumTxQueues = queues
	attrs.NumRxQueues = queues
	return &netlink.Veth{
		LinkAttrs:        attrs,
		PeerName:         peer,
		PeerHardwareAddr: peerMAC,
		PeerNamespace:    netlink.NsFd(peerNS),
		PeerMTU:          uint32(mtu),
		PeerNumTxQueues:  uint32(queues),
		PeerNumRxQueues:  uint32(queues),
	}
}

func (t *Topology) buildDirect() error {
	a, b := t.Hosts[0], t.Hosts[1]
	nl, err := a.Netlink()
	if err != nil {
		return err
	}
	defer nl.Close()
	// Created in a's namespace with the peer placed straight into b's:
	// no link ever appears in the caller's namespace.
	v := vethSpec(a.Link, firstIndex, a.MAC, b.Link, b.MAC, int(b.handle), a.MTU, a.Queues)
	if err := nl.LinkAdd(v); err != nil {
		return fmt.Errorf("netns: create veth %s/%s: %w", a.Link, b.Link, err)
	}
	return nil
}

// buildWired creates the wire side: a bridge (Bridge) or addressed ports
// (Router), and one veth pair per host.
func (t *Topology) buildWired(cfg Config) error {
	nl, err := t.Wire.Netlink()
	if err != nil {
		return err
	}
	defer nl.Close()
	var br netlink.Link
	if cfg.Kind == Bridge {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = t.Bridge
		if err := nl.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
			return fmt.Errorf("netns: create bridge %s: %w", t.Bridge, err)
		}
		if br, err = nl.LinkByName(t.Bridge); err != nil {
			return fmt.Errorf("netns: bridge %s: %w", t.Bridge, err)
		}
		if err := nl.LinkSetUp(br); err != nil {
			return fmt.Errorf("netns: bridge %s up: %w", t.Bridge, err)
		}
	}
	for _, h := range t.Hosts {
		v := vethSpec(h.PeerLink, firstIndex+h.Index, h.PeerMAC, h.Link, h.MAC, int(h.handle), h.MTU, h.Queues)
		if err := nl.LinkAdd(v); err != nil {
			return fmt.Errorf("netns: create veth %s/%s: %w", h.PeerLink, h.Link, err)
		}
		port, err := nl.LinkByName(h.PeerLink)
		if err != nil {
			return fmt.Errorf("netns: wire port %s: %w", h.PeerLink, err)
		}
		if br != nil {
			if err := nl.LinkSetMaster(port, br); err != nil {
				return fmt.Errorf("netns: add %s to bridge: %w", h.PeerLink, err)
			}
			// Without learning every unicast frame is unknown, and flooded.
			if err := nl.LinkSetLearning(port, !cfg.Hub); cfg.Hub && err != nil {
				return fmt.Errorf("netns: bridge port %s: learning off: %w", h.PeerLink, err)
			}
		} else {
			if err := addAddr(nl, port, h.Gateway, 24); err != nil {
				return err
			}
			if h.Gateway6.IsValid() {
				if err := addAddr(nl, port, h.Gateway6, 64); err != nil {
					return err
				}
			}
		}
		if err := nl.LinkSetUp(port); err != nil {
			return fmt.Errorf("netns: wire port %s up: %w", h.PeerLink, err)
		}
	}
	return nil
}

func addAddr(nl *netlink.Handle, link netlink.Link, a netip.Addr, bits int) error {
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}}
	if a.Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := nl.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("netns: add %v/%d to %s: %w", a, bits, link.Attrs().Name, err)
	}
	return nil
}

// configure addresses the host's link, brings it up and adds routes.
func (h *Host) configure(cfg Config) error {
	nl, err := h.Netlink()
	if err != nil {
		return err
	}
	defer nl.Close()
	l, err := nl.LinkByName(h.Link)
	if err != nil {
		return fmt.Errorf("netns %s: link %s: %w", h.name, h.Link, err)
	}
	h.Ifindex = l.Attrs().Index
	if err := addAddr(nl, l, h.Addr, h.Bits); err != nil {
		return err
	}
	if h.Addr6.IsValid() {
		if err := addAddr(nl, l, h.Addr6, 64); err != nil {
			return err
		}
	}
	if err := nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("netns %s: %s up: %w", h.name, h.Link, err)
	}
	for _, gw := range []netip.Addr{h.Gateway, h.Gateway6} {
		if !gw.IsValid() {
			continue
		}
		r := &netlink.Route{LinkIndex: h.Ifindex, Gw: gw.AsSlice()}
		if gw.Is4() {
			r.Dst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
		} else {
			r.Dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
		}
		if err := nl.RouteAdd(r); err != nil {
			return fmt.Errorf("netns %s: default route via %v: %w", h.name, gw, err)
		}
	}
	return nil
}

// readyTimeout bounds the wait for links to be operationally up.
const readyTimeout = 5 * time.Second

// waitReady returns once every link is operationally up (carrier seen by
// the kernel's link watcher, which is what IPv6 and the bridge wait for),
// so a test's first packet is not delayed or lost.
func (t *Topology) waitReady() error {
	type check struct {
		ns    *Namespace
		links []string
	}
	var checks []check
	for _, h := range t.Hosts {
		checks = append(checks, check{h.Namespace, []string{h.Link}})
	}
	if t.Wire != nil {
		c := check{ns: t.Wire}
		for _, h := range t.Hosts {
			c.links = append(c.links, h.PeerLink)
		}
		checks = append(checks, c)
	}
	deadline := time.Now().Add(readyTimeout)
	for _, c := range checks {
		nl, err := c.ns.Netlink()
		if err != nil {
			return err
		}
		err = func() error {
			defer nl.Close()
			for _, name := range c.links {
				for {
					l, err := nl.LinkByName(name)
					if err != nil {
						return fmt.Errorf("netns %s: link %s: %w", c.ns.name, name, err)
					}
					if l.Attrs().OperState == netlink.OperUp {
						break
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("netns %s: link %s not up after %v (state %v)", c.ns.name, name,
							readyTimeout, l.Attrs().OperState)
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

func addNeigh(nl *netlink.Handle, ifindex int, ip netip.Addr, mac net.HardwareAddr) error {
	if !ip.IsValid() {
		return nil
	}
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	n := &netlink.Neigh{
		LinkIndex: ifindex, Family: family, State: netlink.NUD_PERMANENT,
		IP: ip.AsSlice(), HardwareAddr: mac,
	}
	if err := nl.NeighAdd(n); err != nil {
		return fmt.Errorf("netns: neighbour %v: %w", ip, err)
	}
	return nil
}

// addNeighbors installs permanent entries: every host for every other host
// (Bridge, Direct), or host <-> its gateway port (Router).
func (t *Topology) addNeighbors(cfg Config) error {
	for _, h := range t.Hosts {
		nl, err := h.Netlink()
		if err != nil {
			return err
		}
		err = func() error {
			defer nl.Close()
			if cfg.Kind == Router {
				if err := addNeigh(nl, h.Ifindex, h.Gateway, h.PeerMAC); err != nil {
					return err
				}
				return addNeigh(nl, h.Ifindex, h.Gateway6, h.PeerMAC)
			}
			for _, o := range t.Hosts {
				if o == h {
					continue
				}
				if err := addNeigh(nl, h.Ifindex, o.Addr, o.MAC); err != nil {
					return err
				}
				if err := addNeigh(nl, h.Ifindex, o.Addr6, o.MAC); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("netns %s: %w", h.name, err)
		}
	}
	if cfg.Kind != Router {
		return nil
	}
	nl, err := t.Wire.Netlink()
	if err != nil {
		return err
	}
	defer nl.Close()
	for _, h := range t.Hosts {
		port, err := nl.LinkByName(h.PeerLink)
		if err != nil {
			return fmt.Errorf("netns: wire port %s: %w", h.PeerLink, err)
		}
		if err := addNeigh(nl, port.Attrs().Index, h.Addr, h.MAC); err != nil {
			return err
		}
		if err := addNeigh(nl, port.Attrs().Index, h.Addr6, h.MAC); err != nil {
			return err
		}
	}
	return nil
}

// Host returns the host with this logical name, or nil.
func (t *Topology) Host(name string) *Host {
	for _, h := range t.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// SetFaults impairs the RoCEv2 traffic host h sends into the wire (its
// wire port's ingress): it attaches an injector on first use, updates it
// afterwards (rates 0 stop impairing; packets then pass in order), and
// cfg == nil detaches it. The injector sits in the wire namespace, the only
// place both AF_XDP senders and kernel senders are seen (see package impair).
func (t *Topology) SetFaults(h *Host, cfg *impair.Config) error {
	if t.Wire == nil {
		return ErrNoWire
	}
	if h == nil || h.Index >= len(t.Hosts) || t.Hosts[h.Index] != h {
		return ErrNoHost
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("netns: topology closed")
	}
	inj := t.injectors[h]
	switch {
	case cfg == nil:
		if inj == nil {
			return nil
		}
		delete(t.injectors, h)
		return inj.Close()
	case inj != nil:
		return inj.Update(*cfg)
	}
	err := t.Wire.Do(func() error {
		var err error
		inj, err = impair.Attach(h.PeerLink, *cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("netns: faults for host %s: %w", h.Name, err)
	}
	t.injectors[h] = inj
	return nil
}

// Injector returns the injector impairing what h sends, or nil.
func (t *Topology) Injector(h *Host) *impair.Injector {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.injectors[h]
}

// Namespaces returns every namespace of the topology (wire first).
func (t *Topology) Namespaces() []*Namespace {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Namespace(nil), t.namespaces...)
}

// Close stops the injectors and deletes every namespace (and with them
// every link). It is safe to call more than once.
func (t *Topology) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for h, inj := range t.injectors {
		if err := inj.Close(); err != nil {
			errs = append(errs, fmt.Errorf("faults of host %s: %w", h.Name, err))
		}
	}
	t.injectors = nil
	for i := len(t.namespaces) - 1; i >= 0; i-- {
		if err := t.namespaces[i].delete(); err != nil {
			errs = append(errs, err)
		}
	}
	t.namespaces = nil
	return errors.Join(errs...)
}
