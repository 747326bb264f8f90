package loader

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
)

// Mode is the XDP attach mode.
type Mode int

const (
	// ModeAuto tries native (driver) mode and falls back to generic mode.
	ModeAuto Mode = iota
	// ModeNative attaches in the driver's receive path (XDP_FLAGS_DRV_MODE).
	ModeNative
	// ModeGeneric attaches after the skb is built (XDP_FLAGS_SKB_MODE); it
	// works on every device, more slowly.
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options tune Attach. The zero value is usable.
type Options struct {
	// Mode forces native or generic attachment; ModeAuto (the default)
	// tries native first.
	Mode Mode
	// Logger receives the line that says which mode was used; nil means
	// slog.Default().
	Logger *slog.Logger
	// Queues is the number of XSKMAP slots (RX queues that can get a
	// socket); 0 means the link's number of RX queues.
	Queues int
}

// Counters are the XDP program's counters summed over all CPUs.
type Counters struct {
	// Passed counts every packet handed to the kernel (XDP_PASS),
	// including those also counted in NotLocal and Fragments.
	Passed uint64
	// Redirected counts RoCE packets redirected to an AF_XDP socket. A
	// redirect can still fail in the kernel afterwards (full RX ring, no
	// fill-ring entry); those drops show in the AF_XDP socket statistics.
	Redirected uint64
	// Malformed counts RoCE packets to a local address that were dropped
	// because they were truncated or had a bad IP/UDP length.
	Malformed uint64
	// NoSocket counts RoCE packets to a local address that were dropped
	// because no socket is registered for their RX queue.
	NoSocket uint64
	// NotLocal counts UDP 4791 packets passed because their destination is
	// not a local address.
	NotLocal uint64
	// Fragments counts IPv4 UDP fragments and IPv6 packets with a Fragment
	// header, all passed to the kernel.
	Fragments uint64
	// The responder fast path (docs/fastpath.md): WRITEs executed into
	// device memory, and ACKs sent for them with XDP_TX.
	FastPlaced, FastAcked uint64
	// Frames of a QP that has had the fast path which went to AF_XDP, by
	// the first check they failed: Go owns the responder, not a WRITE
	// ONLY, lengths, BTH/addresses, PSN != ePSN (duplicates and gaps), a
	// length past the path MTU or FastMaxPayload, access rights, an rkey
	// that names no device-memory region of the QP's PD, past the region
	// or across a page, the ICRC, and a takeover racing the execution.
	FastGoOwned, FastOtherOp, FastTruncated, FastHeader, FastPSN, FastLength, FastAccess,
	FastRKey, FastBounds, FastICRC, FastRace uint64
	// The requester side: ACKs published to the engine and consumed,
	// published and passed on as well (an engine slept), and a fast-path
	// requester's NAKs and RNR NAKs, passed on.
	FastAckConsumed, FastAckWake, FastAckOther uint64
	// ACKs of a fast-path requester outside the window its engine
	// published (FastPath.SetSendWindow), passed on: stale or forged.
	FastAckWindow uint64
}

// Named lists the counters under their names (xdp_ and the field's), in a
// fixed order: the one table of the program's counter names.
func (c Counters) Named() []NamedCounter {
	return []NamedCounter{
		{"xdp_passed", c.Passed}, {"xdp_redirected", c.Redirected}, {"xdp_malformed", c.Malformed},
		{"xdp_no_socket", c.NoSocket}, {"xdp_not_local", c.NotLocal}, {"xdp_fragments", c.Fragments},
		{"xdp_fast_placed", c.FastPlaced}, {"xdp_fast_acked", c.FastAcked},
		{"xdp_fast_go_owned", c.FastGoOwned}, {"xdp_fast_other_op", c.FastOtherOp},
		{"xdp_fast_truncated", c.FastTruncated}, {"xdp_fast_header", c.FastHeader},
		{"xdp_fast_psn", c.FastPSN}, {"xdp_fast_length", c.FastLength}, {"xdp_fast_access", c.FastAccess},
		{"xdp_fast_rkey", c.FastRKey}, {"xdp_fast_bounds", c.FastBounds}, {"xdp_fast_icrc", c.FastICRC},
		{"xdp_fast_race", c.FastRace}, {"xdp_fast_ack_consumed", c.FastAckConsumed},
		{"xdp_fast_ack_wake", c.FastAckWake}, {"xdp_fast_ack_other", c.FastAckOther},
		{"xdp_fast_ack_window", c.FastAckWindow},
	}
}

// NamedCounter is one counter under its name.
type NamedCounter struct {
	Name  string
	Value uint64
}

// ErrClosed is returned by methods of an XDP that has been closed.
var ErrClosed = errors.New("loader: XDP program closed")

// ErrNotXSK is returned by RegisterSocket for a file descriptor that is not
// an AF_XDP socket.
var ErrNotXSK = errors.New("not an AF_XDP socket")

// XDP is the steering program attached to one link. Its methods are safe for
// concurrent use and may be called from any thread: the objects it holds
// keep the network namespace they were created in.
type XDP struct {
	nativeErr error // why native attach failed, when it did
	mu        sync.Mutex
	objs      bpf.SteerObjects
	fast      *FastPath // the fast path's mapping, once asked for
	noFast    error     // why the program runs without the fast path, if it does
	link      link.Link
	nl        *netlink.Handle
	mode      Mode
	ifname    string
	ifindex   int
	queues    int
	closed    bool
}

// Attach loads the steering program and attaches it to the link ifname in
// the calling thread's network namespace. The link's addresses are put in
// the program's local-address map. The attachment is a BPF link that is not
// pinned: it goes away when Close is called or the process exits.
func Attach(ifname string, opts Options) (*XDP, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if opts.Mode < ModeAuto || opts.Mode > ModeGeneric {
		return nil, fmt.Errorf("loader: invalid mode %v", opts.Mode)
	}
	if opts.Queues < 0 {
		return nil, fmt.Errorf("loader: invalid queue count %d", opts.Queues)
	}

	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("loader: netlink: %w", err)
	}
	x := &XDP{nl: nl, ifname: ifname}
	if err := x.attach(opts, logger); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}

func (x *XDP) attach(opts Options, logger *slog.Logger) error {
	l, err := linkByName(x.nl, x.ifname)
	if err != nil {
		return err
	}
	x.ifindex = l.Attrs().Index
	if err := checkPrivileges(); err != nil {
		return err
	}

	x.queues = opts.Queues
	if x.queues == 0 {
		x.queues = max(l.Attrs().NumRxQueues, 1)
	}
	spec, err := bpf.LoadSteer()
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	spec.Maps[bpf.SteerMapXsks].MaxEntries = uint32(x.queues)
	if err := x.load(spec, logger); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("loader: loading XDP objects needs root or CAP_BPF and CAP_NET_ADMIN: %w", err)
		}
		return fmt.Errorf("loader: load XDP objects: %w", err)
	}
	if err := x.sync(); err != nil {
		return err
	}

	var nativeErr error
	defer func() { x.nativeErr = nativeErr }()
	if opts.Mode != ModeGeneric {
		x.link, nativeErr = link.AttachXDP(link.XDPOptions{
			Program:   x.objs.XdpRoceSteer,
			Interface: x.ifindex,
			Flags:     link.XDPDriverMode,
		})
		x.mode = ModeNative
		if nativeErr != nil && opts.Mode == ModeNative {
			return fmt.Errorf("loader: attach XDP to %s in native mode: %w", x.ifname, nativeErr)
		}
	}
	if x.link == nil {
		x.link, err = link.AttachXDP(link.XDPOptions{
			Program:   x.objs.XdpRoceSteer,
			Interface: x.ifindex,
			Flags:     link.XDPGenericMode,
		})
		x.mode = ModeGeneric
		if err != nil {
			if nativeErr != nil {
				return fmt.Errorf("loader: attach XDP to %s: native mode: %v; generic mode: %w", x.ifname, nativeErr, err)
			}
			return fmt.Errorf("loader: attach XDP to %s in generic mode: %w", x.ifname, err)
		}
	}

	attrs := []any{"link", x.ifname, "ifindex", x.ifindex, "mode", x.mode.String(), "queues", x.queues}
	if nativeErr != nil {
		attrs = append(attrs, "native_error", nativeErr.Error())
	}
	logger.Debug("loader: XDP steering program attached", attrs...)
	return nil
}

// load loads the maps and the program with the responder fast path; where
// the kernel's verifier refuses that program (6.1 cannot follow its
// map-value arithmetic), the same steering without it, and the fast path is
// then unavailable (FastPath returns ErrNoFastPath). Either way the program
// is x.objs.XdpRoceSteer.
func (x *XDP) load(spec *ebpf.CollectionSpec, logger *slog.Logger) error {
	var fast struct {
		bpf.SteerMaps
		Prog *ebpf.Program `ebpf:"xdp_roce_steer"`
	}
	fastErr := spec.LoadAndAssign(&fast, nil)
	if fastErr == nil {
		x.objs.SteerMaps, x.objs.XdpRoceSteer = fast.SteerMaps, fast.Prog
		return nil
	}
	if errors.Is(fastErr, unix.EPERM) {
		return fastErr
	}
	var plain struct {
		bpf.SteerMaps
		Prog *ebpf.Program `ebpf:"xdp_roce_plain"`
	}
	if err := spec.LoadAndAssign(&plain, nil); err != nil {
		return errors.Join(fastErr, err)
	}
	x.objs.SteerMaps, x.objs.XdpRoceSteer = plain.SteerMaps, plain.Prog
	x.noFast = fastErr
	logger.Debug("loader: the kernel refuses the XDP fast path; steering without it", "link", x.ifname, "error", firstLine(fastErr))
	return nil
}

// firstLine is an error's first line (a verifier log can run to hundreds).
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Close detaches the program and frees its maps. It is idempotent.
func (x *XDP) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	var errs []error
	if x.link != nil {
		if err := x.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("loader: detach XDP from %s: %w", x.ifname, err))
		}
	}
	if err := x.fast.close(); err != nil {
		errs = append(errs, fmt.Errorf("loader: unmap the fast path's QP table: %w", err))
	}
	if err := closeObjects(&x.objs); err != nil {
		errs = append(errs, err)
	}
	x.nl.Close()
	return errors.Join(errs...)
}

// closeObjects closes whatever LoadAndAssign managed to create (Close of a
// nil *ebpf.Program or *ebpf.Map is a no-op).
func closeObjects(o *bpf.SteerObjects) error {
	return errors.Join(o.XdpRoceSteer.Close(), o.XdpRocePlain.Close(), o.LocalAddrs.Close(), o.Stats.Close(), o.Xsks.Close(),
		o.FpQps.Close(), o.FpMrs.Close(), o.DmMaps.Close(), o.FpSleepers.Close())
}

// Mode reports the mode the program was attached in (ModeNative or
// ModeGeneric).
func (x *XDP) Mode() Mode { return x.mode }

// NativeError is why native mode was not used: nil when it was, or when
// generic mode was asked for.
func (x *XDP) NativeError() error { return x.nativeErr }

// Ifindex reports the index of the link the program is attached to.
func (x *XDP) Ifindex() int { return x.ifindex }

// Queues reports the number of XSKMAP slots: RegisterSocket accepts queues
// 0 to Queues()-1.
func (x *XDP) Queues() int { return x.queues }

// RegisterSocket steers the RoCE packets received on RX queue queue into the
// AF_XDP socket fd, which must be bound to this link and queue.
func (x *XDP) RegisterSocket(queue int, fd int) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	if queue < 0 || queue >= x.queues {
		return fmt.Errorf("loader: register socket: queue %d out of range [0, %d)", queue, x.queues)
	}
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("loader: register socket fd %d for queue %d: %w: %w", fd, queue, ErrNotXSK, err)
	}
	if domain != unix.AF_XDP {
		return fmt.Errorf("loader: register socket fd %d for queue %d: %w (address family %d)", fd, queue, ErrNotXSK, domain)
	}
	if err := x.objs.Xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("loader: register socket fd %d for queue %d (is it bound to %s queue %d?): %w",
			fd, queue, x.ifname, queue, err)
	}
	return nil
}

// UnregisterSocket removes queue's socket; RoCE packets on that queue are
// then dropped and counted as NoSocket. Unregistering a queue without a
// socket is not an error.
func (x *XDP) UnregisterSocket(queue int) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	if queue < 0 || queue >= x.queues {
		return fmt.Errorf("loader: unregister socket: queue %d out of range [0, %d)", queue, x.queues)
	}
	if err := x.objs.Xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: unregister socket of queue %d: %w", queue, err)
	}
	return nil
}

// Counters reads the program's counters, summed over all CPUs.
func (x *XDP) Counters() (Counters, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return Counters{}, ErrClosed
	}
	return readCounters(x.objs.Stats)
}

// readCounters sums the stats map's counters over the CPUs.
func readCounters(stats *ebpf.Map) (Counters, error) {
	var c Counters
	fields := []struct {
		idx bpf.SteerStat
		dst *uint64
	}{
		{bpf.SteerStatSTAT_PASSED, &c.Passed},
		{bpf.SteerStatSTAT_REDIRECTED, &c.Redirected},
		{bpf.SteerStatSTAT_MALFORMED, &c.Malformed},
		{bpf.SteerStatSTAT_NO_SOCKET, &c.NoSocket},
		{bpf.SteerStatSTAT_NOT_LOCAL, &c.NotLocal},
		{bpf.SteerStatSTAT_FRAGMENT, &c.Fragments},
		{bpf.SteerStatSTAT_FP_PLACED, &c.FastPlaced},
		{bpf.SteerStatSTAT_FP_ACKED, &c.FastAcked},
		{bpf.SteerStatSTAT_FP_GO_OWNED, &c.FastGoOwned},
		{bpf.SteerStatSTAT_FP_OTHER_OP, &c.FastOtherOp},
		{bpf.SteerStatSTAT_FP_TRUNCATED, &c.FastTruncated},
		{bpf.SteerStatSTAT_FP_HEADER, &c.FastHeader},
		{bpf.SteerStatSTAT_FP_PSN, &c.FastPSN},
		{bpf.SteerStatSTAT_FP_LENGTH, &c.FastLength},
		{bpf.SteerStatSTAT_FP_ACCESS, &c.FastAccess},
		{bpf.SteerStatSTAT_FP_RKEY, &c.FastRKey},
		{bpf.SteerStatSTAT_FP_BOUNDS, &c.FastBounds},
		{bpf.SteerStatSTAT_FP_ICRC, &c.FastICRC},
		{bpf.SteerStatSTAT_FP_RACE, &c.FastRace},
		{bpf.SteerStatSTAT_FP_ACK_CONSUMED, &c.FastAckConsumed},
		{bpf.SteerStatSTAT_FP_ACK_WAKE, &c.FastAckWake},
		{bpf.SteerStatSTAT_FP_ACK_OTHER, &c.FastAckOther},
		{bpf.SteerStatSTAT_FP_ACK_WINDOW, &c.FastAckWindow},
	}
	var perCPU []uint64
	for _, f := range fields {
		if err := stats.Lookup(uint32(f.idx), &perCPU); err != nil {
			return Counters{}, fmt.Errorf("loader: read counter %d: %w", f.idx, err)
		}
		for _, v := range perCPU {
			*f.dst += v
		}
	}
	return c, nil
}

// AddLocalAddr makes the program steer RoCE packets sent to addr.
func (x *XDP) AddLocalAddr(addr netip.Addr) error {
	key, err := addrKey(addr)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	if err := x.objs.LocalAddrs.Put(key, uint8(1)); err != nil {
		return fmt.Errorf("loader: add local address %s: %w", addr, err)
	}
	return nil
}

// RemoveLocalAddr stops steering packets sent to addr. Removing an address
// that is not in the map is not an error.
func (x *XDP) RemoveLocalAddr(addr netip.Addr) error {
	key, err := addrKey(addr)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	if err := x.objs.LocalAddrs.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: remove local address %s: %w", addr, err)
	}
	return nil
}

// LocalAddrs lists the addresses the program currently treats as local.
func (x *XDP) LocalAddrs() ([]netip.Addr, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, ErrClosed
	}
	keys, err := x.localKeys()
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, 0, len(keys))
	for _, k := range keys {
		addrs = append(addrs, netip.AddrFrom16(k).Unmap())
	}
	return addrs, nil
}

// Sync makes the local-address map equal to the link's current addresses,
// read over netlink in the namespace Attach ran in.
func (x *XDP) Sync() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	return x.sync()
}

func (x *XDP) sync() error {
	l, err := x.nl.LinkByIndex(x.ifindex)
	if err != nil {
		return fmt.Errorf("loader: link %s (index %d): %w", x.ifname, x.ifindex, err)
	}
	addrs, err := linkAddrs(x.nl, l)
	if err != nil {
		return fmt.Errorf("loader: addresses of %s: %w", x.ifname, err)
	}
	want := make(map[[16]byte]bool, len(addrs))
	for _, a := range addrs {
		key, err := addrKey(a)
		if err != nil {
			return err
		}
		want[key] = true
		if err := x.objs.LocalAddrs.Put(key, uint8(1)); err != nil {
			return fmt.Errorf("loader: add local address %s: %w", a, err)
		}
	}
	have, err := x.localKeys()
	if err != nil {
		return err
	}
	for _, k := range have {
		if want[k] {
			continue
		}
		if err := x.objs.LocalAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("loader: remove local address %s: %w", netip.AddrFrom16(k).Unmap(), err)
		}
	}
	return nil
}

func (x *XDP) localKeys() ([][16]byte, error) {
	var (
		key  [16]byte
		val  uint8
		keys [][16]byte
	)
	it := x.objs.LocalAddrs.Iterate()
	for it.Next(&key, &val) {
		keys = append(keys, key)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("loader: list local addresses: %w", err)
	}
	return keys, nil
}

// addrKey is the local_addrs map key: the 16-byte address, IPv4 mapped as
// ::ffff:a.b.c.d. The IPv6 zone is irrelevant to the packet and dropped.
func addrKey(a netip.Addr) ([16]byte, error) {
	if !a.IsValid() {
		return [16]byte{}, errors.New("loader: invalid IP address")
	}
	return a.Unmap().As16(), nil
}
