package impair

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrBusy is returned by Attach when the interface already has an
// injector (or the leftovers of one: see Detach).
var ErrBusy = errors.New("impair: interface already has an injector")

const (
	// reinjectMark tags the injector's output inside the namespace so the
	// divert program lets it through instead of diverting it again. Marks
	// do not cross namespaces, so no outside packet carries it.
	reinjectMark = 0x526f4345 // "RoCE"
	// tc filter identity on the impaired port (priority, handle, name).
	filterPriority = 4791
	filterHandle   = 1
	filterName     = "xdproce-impair"
	helperMTU      = 65535
	stopTimeout    = 5 * time.Second
	// IN6_ADDR_GEN_MODE_NONE: no link-local address, so the helper links
	// never send anything of their own.
	addrGenModeNone = 1
)

// helperNames are the helper veth pair's names for a port: the divert end
// (in the port's namespace, where tc sends diverted packets) and the
// injector end (where the packet socket listens).
func helperNames(ifindex int) (divert, inject string) {
	return fmt.Sprintf("imp%dd", ifindex), fmt.Sprintf("imp%di", ifindex)
}

// Injector impairs the RoCEv2 packets received on one interface. Its
// methods are safe for concurrent use.
type Injector struct {
	ifname string
	nl     *netlink.Handle

	objs          impairObjects
	port          netlink.Link
	divertLink    netlink.Link
	injectLink    netlink.Link
	portFilter    *netlink.BpfFilter
	createdClsact bool

	sock  *packetSocket
	fwd   *forwarder
	cfg   atomic.Pointer[settings]
	stats sharedStats
	log   decisionLog

	mu        sync.Mutex
	current   Config
	sockDrops uint64
	closed    bool
	closeErr  error
	final     Counters // Counters at Close
}

// Attach starts impairing the RoCEv2 packets that arrive on ifname,
// an interface of the calling OS thread's network namespace (lock the
// thread and switch, e.g. with the netns harness's Host.Do). The interface
// must be a forwarding hop's port (see the package documentation): packets
// it receives continue on their normal path (bridge, routing) after the
// injector. Close undoes everything.
func Attach(ifname string, cfg Config) (*Injector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("impair: netlink: %w", err)
	}
	in := &Injector{ifname: ifname, nl: nl, current: cfg}
	in.log.limit = cfg.LogLimit
	in.log.entries = make([]Decision, 0, min(cfg.LogLimit, 4096))
	in.cfg.Store(compile(cfg))
	if err := in.attach(); err != nil {
		if terr := in.teardown(); terr != nil {
			err = fmt.Errorf("%w (undo: %v)", err, terr)
		}
		return nil, err
	}
	return in, nil
}

func (in *Injector) attach() error {
	var err error
	if in.port, err = in.nl.LinkByName(in.ifname); err != nil {
		return fmt.Errorf("impair: interface %q: %w", in.ifname, err)
	}
	if err := in.createHelpers(); err != nil {
		return err
	}
	if err := in.loadPrograms(); err != nil {
		return err
	}
	if in.sock, err = openPacketSocket(in.injectLink.Attrs().Index, reinjectMark); err != nil {
		return err
	}
	in.fwd = newForwarder(in.sock, &in.cfg, &in.stats, &in.log, in.port.Attrs().MTU)
	go in.fwd.run()

	if err := in.attachTC(in.divertLink, in.objs.Reinject, "reinject"); err != nil {
		return err
	}
	if err := in.attachTC(in.injectLink, in.objs.Sink, "sink"); err != nil {
		return err
	}
	// Last: from here on RoCEv2 packets are diverted.
	return in.attachPort()
}

func (in *Injector) createHelpers() error {
	divert, inject := helperNames(in.port.Attrs().Index)
	for _, name := range []string{divert, inject} {
		if _, err := in.nl.LinkByName(name); err == nil {
			return fmt.Errorf("%w: %s (helper link %s exists; impair.Detach(%q) removes leftovers)",
				ErrBusy, in.ifname, name, in.ifname)
		}
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = divert
	attrs.MTU = helperMTU
	attrs.NumTxQueues, attrs.NumRxQueues = 1, 1
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: inject, PeerMTU: helperMTU}
	if err := in.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("impair: create helper veth %s/%s: %w", divert, inject, err)
	}
	var err error
	if in.divertLink, err = in.nl.LinkByName(divert); err != nil {
		return fmt.Errorf("impair: helper %s: %w", divert, err)
	}
	if in.injectLink, err = in.nl.LinkByName(inject); err != nil {
		return fmt.Errorf("impair: helper %s: %w", inject, err)
	}
	for _, l := range []netlink.Link{in.divertLink, in.injectLink} {
		// Best effort (fails harmlessly where IPv6 is disabled): silence.
		_ = in.nl.LinkSetIP6AddrGenMode(l, addrGenModeNone)
		if err := in.nl.LinkSetARPOff(l); err != nil {
			return fmt.Errorf("impair: helper %s: arp off: %w", l.Attrs().Name, err)
		}
		if err := in.nl.LinkSetUp(l); err != nil {
			return fmt.Errorf("impair: helper %s: up: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

func (in *Injector) loadPrograms() error {
	spec, err := loadImpair()
	if err != nil {
		return fmt.Errorf("impair: load BPF spec: %w", err)
	}
	for name, v := range map[string]uint32{
		"divert_ifindex": uint32(in.divertLink.Attrs().Index),
		"port_ifindex":   uint32(in.port.Attrs().Index),
		"reinject_mark":  reinjectMark,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("impair: set %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&in.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return fmt.Errorf("impair: BPF verifier: %+v", verr)
		}
		return fmt.Errorf("impair: load BPF programs: %w", err)
	}
	return nil
}

// ensureClsact adds a clsact qdisc to link; created reports whether it was
// not there before.
func (in *Injector) ensureClsact(link netlink.Link) (created bool, err error) {
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: link.Attrs().Index,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
	err = in.nl.QdiscAdd(q)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EEXIST):
		return false, nil
	}
	return false, fmt.Errorf("impair: clsact on %s: %w", link.Attrs().Name, err)
}

func ingressFilter(link netlink.Link, prog *ebpf.Program, name string) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: link.Attrs().Index,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Handle:    filterHandle,
			Protocol:  unix.ETH_P_ALL,
			Priority:  filterPriority,
		},
		Fd:           prog.FD(),
		Name:         name,
		DirectAction: true,
	}
}

func (in *Injector) attachTC(link netlink.Link, prog *ebpf.Program, what string) error {
	if _, err := in.ensureClsact(link); err != nil {
		return err
	}
	if err := in.nl.FilterAdd(ingressFilter(link, prog, filterName+"-"+what)); err != nil {
		return fmt.Errorf("impair: tc %s on %s: %w", what, link.Attrs().Name, err)
	}
	return nil
}

func (in *Injector) attachPort() error {
	created, err := in.ensureClsact(in.port)
	if err != nil {
		return err
	}
	in.createdClsact = created
	f := ingressFilter(in.port, in.objs.Divert, filterName)
	if err := in.nl.FilterAdd(f); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %s (tc filter priority %d exists)", ErrBusy, in.ifname, filterPriority)
		}
		return fmt.Errorf("impair: tc divert on %s: %w", in.ifname, err)
	}
	in.portFilter = f
	return nil
}

// Update changes the rates, seed, distance and timeout from the next batch
// of packets on; LogLimit is ignored. Packet numbering (the seq that
// decisions depend on) continues: for a replay, attach a new injector.
// Setting all rates to zero stops impairing (packets still pass through
// the injector, in order).
func (in *Injector) Update(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	cfg.LogLimit = in.current.LogLimit
	in.current = cfg
	in.cfg.Store(compile(cfg))
	return nil
}

// Config returns the configuration in force.
func (in *Injector) Config() Config {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.current
}

// Interface returns the impaired interface's name.
func (in *Injector) Interface() string { return in.ifname }

// Counters returns the totals so far. Received counts a packet once its
// batch is done, so right after traffic stops it may lag by one batch.
func (in *Injector) Counters() Counters {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return in.final
	}
	return in.countersLocked()
}

func (in *Injector) countersLocked() Counters {
	st := &in.stats
	c := Counters{
		Received:   st.received.Load(),
		Sent:       st.sent.Load(),
		Dropped:    st.dropped.Load(),
		Duplicate:  st.duplicate.Load(),
		Corrupted:  st.corrupted.Load(),
		Reordered:  st.reordered.Load(),
		TimedOut:   st.timedOut.Load(),
		Held:       st.held.Load(),
		Truncated:  st.truncated.Load(),
		SendErrors: st.sendErrors.Load(),
		Unparsed:   st.unparsed.Load(),
	}
	if in.sock != nil {
		in.sockDrops += in.sock.takeDrops()
	}
	c.Lost = in.sockDrops
	// A helper veth that cannot hand a frame to its peer counts it in its
	// own tx_dropped.
	for _, l := range []netlink.Link{in.divertLink, in.injectLink} {
		if l == nil {
			continue
		}
		if cur, err := in.nl.LinkByIndex(l.Attrs().Index); err == nil && cur.Attrs().Statistics != nil {
			c.Lost += cur.Attrs().Statistics.TxDropped
		}
	}
	if in.objs.Stats != nil {
		var perCPU []uint64
		if err := in.objs.Stats.Lookup(uint32(impairStatSTAT_DIVERTED), &perCPU); err == nil {
			for _, v := range perCPU {
				c.Diverted += v
			}
		}
	}
	return c
}

// Log returns the decisions recorded so far (at most Config.LogLimit, in
// packet order).
func (in *Injector) Log() []Decision {
	in.log.mu.Lock()
	defer in.log.mu.Unlock()
	return append([]Decision(nil), in.log.entries...)
}

// Close stops diverting, sends what the injector still holds, and removes
// the tc programs and helper links. It is safe to call more than once, and
// after the namespace is gone.
func (in *Injector) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return in.closeErr
	}
	in.closed = true
	in.closeErr = in.teardown()
	return in.closeErr
}

// teardown undoes whatever Attach got done, in reverse order.
func (in *Injector) teardown() error {
	var errs []error
	ignoreGone := func(err error, what string) {
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) &&
			!errors.Is(err, unix.EINVAL) && !isLinkNotFound(err) {
			errs = append(errs, fmt.Errorf("impair: %s: %w", what, err))
		}
	}
	if in.portFilter != nil {
		ignoreGone(in.nl.FilterDel(in.portFilter), "remove tc filter from "+in.ifname)
		if in.createdClsact {
			ignoreGone(in.nl.QdiscDel(&netlink.GenericQdisc{
				QdiscAttrs: netlink.QdiscAttrs{
					LinkIndex: in.port.Attrs().Index,
					Handle:    netlink.MakeHandle(0xffff, 0),
					Parent:    netlink.HANDLE_CLSACT,
				},
				QdiscType: "clsact",
			}), "remove clsact from "+in.ifname)
		}
	}
	if in.fwd != nil {
		if !in.fwd.requestStop(stopTimeout) {
			errs = append(errs, fmt.Errorf("impair: forwarder on %s did not stop within %v", in.ifname, stopTimeout))
		}
	}
	in.final = in.countersLocked()
	if in.sock != nil {
		if err := in.sock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("impair: close packet socket: %w", err))
		}
	}
	// Deleting one end of the helper pair deletes both, with their qdiscs.
	if in.divertLink != nil {
		ignoreGone(in.nl.LinkDel(in.divertLink), "remove helper "+in.divertLink.Attrs().Name)
	}
	if err := in.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("impair: close BPF objects: %w", err))
	}
	in.nl.Close()
	return errors.Join(errs...)
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// Detach removes an injector's leftovers from ifname (in the calling
// thread's namespace) after its process died without Close: the tc filter
// that diverts RoCEv2 packets and the helper links. It does not touch a
// live injector's goroutine; use Injector.Close for those.
func Detach(ifname string) error {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("impair: netlink: %w", err)
	}
	defer nl.Close()
	port, err := nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("impair: interface %q: %w", ifname, err)
	}
	var errs []error
	filters, err := nl.FilterList(port, netlink.HANDLE_MIN_INGRESS)
	if err != nil && !errors.Is(err, unix.EINVAL) {
		errs = append(errs, fmt.Errorf("impair: list tc filters on %s: %w", ifname, err))
	}
	for _, f := range filters {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == filterName {
			if err := nl.FilterDel(bf); err != nil {
				errs = append(errs, fmt.Errorf("impair: remove tc filter from %s: %w", ifname, err))
			}
		}
	}
	divert, inject := helperNames(port.Attrs().Index)
	for _, name := range []string{divert, inject} {
		if l, err := nl.LinkByName(name); err == nil {
			if err := nl.LinkDel(l); err != nil && !isLinkNotFound(err) {
				errs = append(errs, fmt.Errorf("impair: remove helper %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}
