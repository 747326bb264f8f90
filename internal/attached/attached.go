// Package attached is the provider behind package verbs for a device
// attached to the xdproce daemon (package daemon): the device's objects
// live in the daemon, shared with its other clients' but never reachable
// by them. Control operations are requests on the daemon's socket; posts
// and polls are operations on rings the daemon shares, with no system call
// unless the engine serving the QP sleeps.
package attached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// Device is a connection to the daemon.
type Device struct {
	conn *ipc.Conn
	info uverbs.DeviceInfo
	ext  uverbs.DeviceInfoExt // HELLO's tail: zeros where the daemon predates a field
	mtu  int                  // the port's active MTU in bytes
	mac  net.HardwareAddr
	gids []netip.Addr
	page *ipc.Mapping // the doorbell page
	// bells are this client's own doorbells, one per engine, each rung
	// when a QP of that engine sleeps (HELLO gives engine 0's, DOORBELL
	// each other's).
	bells []*ipc.Signaler
	// events is signalled when the daemon queued an asynchronous event; it
	// hangs up when the daemon dropped the session or died (dead).
	events *ipc.Waiter
	dead   atomic.Bool
	stop   context.CancelFunc // ends the watch on the daemon's process

	objMu sync.Mutex
	qps   map[uint32]*QP // by handle: what events name
	cqs   map[uint32]*CQ
	srqs  map[uint32]*SRQ

	mrMu sync.RWMutex
	mrs  map[uint32]*MR // by lkey: inline posts copy from the regions themselves
}

var _ ibv.DeviceOps = (*Device)(nil)

// Dial attaches to the xdproce daemon serving the interface ifname in the
// calling thread's network namespace (xdproce up). Close detaches; the
// daemon then destroys everything the device created.
func Dial(ctx context.Context, ifname string) (*Device, error) {
	r := &Device{mrs: map[uint32]*MR{}, qps: map[uint32]*QP{}, cqs: map[uint32]*CQ{}, srqs: map[uint32]*SRQ{}}
	conn, fds, err := greet(ctx, ifname, r, false)
	if ipc.IsClosed(err) && ctx.Err() == nil {
		// A daemon from before HELLO's extensible request hangs up on it:
		// greet it again with the version alone, as clients before did.
		conn.Close()
		conn, fds, err = greet(ctx, ifname, r, true)
	}
	if conn == nil {
		return nil, err
	}
	r.conn = conn
	if err == nil {
		r.bells, r.events = []*ipc.Signaler{ipc.SignalerOf(fds[1])}, ipc.WaiterOf(fds[2])
		if r.page, err = ipc.MapSharedReadOnly(fds[0], uverbs.DoorbellPageSize); err == nil {
			err = r.fetchBells()
		}
		if err != nil {
			r.closeBells()
			r.events.Close()
		}
	}
	var peer ipc.Peer
	if err == nil {
		peer, err = conn.Peer()
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("verbs: attach to the daemon of %s: %w", ifname, err)
	}
	r.mac, r.mtu = net.HardwareAddr(r.info.MAC[:]), ibv.MTU(r.info.ActiveMTU).Bytes()
	for _, g := range r.info.GIDs {
		r.gids = append(r.gids, netip.AddrFrom16(g).Unmap()) // IPv4 GIDs as an in-process device gives them
	}
	var wctx context.Context
	wctx, r.stop = context.WithCancel(context.Background())
	go r.watch(wctx, peer.PID)
	return r, nil
}

// fetchBells asks for the doorbells of the engines besides engine 0, so
// that a ring wakes the one engine that serves the QP, which waits on it
// itself. A daemon from before them (Doorbells 0) has HELLO's wake all.
func (r *Device) fetchBells() error {
	for e := uint32(1); e < min(r.ext.Doorbells, r.info.Engines); e++ {
		_, fds, err := r.call(uverbs.OpDoorbell, func(enc *uverbs.Encoder) { enc.Put(&uverbs.Doorbell{Engine: e}) })
		if err == nil && len(fds) != 1 {
			ipc.CloseAll(fds)
			err = fmt.Errorf("verbs: DOORBELL reply with %d fds: %w", len(fds), uverbs.ErrMalformed)
		}
		if err != nil {
			return fmt.Errorf("verbs: doorbell of engine %d: %w", e, err)
		}
		r.bells = append(r.bells, ipc.SignalerOf(fds[0]))
	}
	return nil
}

// closeBells closes the client's doorbells.
func (r *Device) closeBells() {
	for _, b := range r.bells {
		b.Close()
	}
}

// greet connects to the daemon of ifname and greets it (HELLO, the version
// alone if versionOnly), into r's device description: the connection (nil
// if none could be made) and HELLO's fds, or an error.
func greet(ctx context.Context, ifname string, r *Device, versionOnly bool) (*ipc.Conn, []int, error) {
	conn, err := ipc.Dial(ctx, ifname)
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	// HELLO is bounded by ctx too: a server that never answers does not
	// hold the caller.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	if versionOnly {
		r.info, r.ext, fds, err = conn.HelloVersionOnly()
	} else {
		r.info, r.ext, fds, err = conn.Hello()
	}
	if !stop() {
		if err == nil {
			ipc.CloseAll(fds)
		}
		err = errors.Join(ctx.Err(), err)
	}
	return conn, fds, err
}

// Port is the daemon's port: its MAC address, GID table (IPv4 GIDs
// unmapped), active MTU in bytes and data path.
func (r *Device) Port() (mac net.HardwareAddr, gids []netip.Addr, activeMTU int, dataPath string) {
	return r.mac, r.gids, r.mtu, r.info.DataPath
}

// watch waits for the daemon's process to end: the device is then gone, as
// a removed RNIC (IBV_EVENT_DEVICE_FATAL); posts fail. A waiter on the
// events or on a completion channel wakes by itself: the daemon's ends of
// their pipes closed with it.
func (r *Device) watch(ctx context.Context, pid int) {
	if ipc.WaitExit(ctx, pid) != nil {
		return // detached first
	}
	r.dead.Store(true)
}

// GetAsyncEvent returns the oldest asynchronous event the daemon queued
// for this session, EventDeviceFatal once the daemon is gone.
func (r *Device) GetAsyncEvent(ctx context.Context) (ibv.Event, error) {
	for {
		if r.dead.Load() {
			return ibv.Event{Type: ibv.EventDeviceFatal}, nil
		}
		d, err := r.callNoFDs(uverbs.OpGetEvent, nil)
		if err == nil {
			var ev uverbs.Event
			ev.Get(d)
			if err := d.End(); err != nil {
				return ibv.Event{}, err
			}
			out := ibv.Event{Type: ibv.AsyncEventType(ev.Type)}
			r.objMu.Lock()
			switch ev.Kind {
			case uverbs.EventQP:
				if qp := r.qps[ev.Handle]; qp != nil {
					out.QP = qp.owner
				}
			case uverbs.EventCQ:
				if cq := r.cqs[ev.Handle]; cq != nil {
					out.CQ = cq.owner
				}
			case uverbs.EventSRQ:
				if s := r.srqs[ev.Handle]; s != nil {
					out.SRQ = s.owner
				}
			}
			r.objMu.Unlock()
			return out, nil
		}
		if !errors.Is(err, syscall.EAGAIN) {
			if r.dead.Load() {
				return ibv.Event{Type: ibv.EventDeviceFatal}, nil
			}
			return ibv.Event{}, err
		}
		if err := r.events.Wait(ctx); errors.Is(err, ipc.ErrHangup) {
			r.dead.Store(true) // the daemon dropped the session, or died
		} else if err != nil {
			return ibv.Event{}, err
		}
	}
}

// Attached is true.
func (r *Device) Attached() bool { return true }

// Control sends a request of a package layered on verbs (rdmacm's CM_*
// requests) in this device's session: the reply's body and fds, which are
// the caller's.
func (r *Device) Control(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int, error) {
	return r.call(op, body)
}

// call sends one request and returns its reply's body and fds.
func (r *Device) call(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, []int, error) {
	d, got, err := r.conn.Call(op, body, fds...)
	if err != nil {
		r.noteGone(err)
		return nil, nil, fmt.Errorf("verbs: daemon: %w", err)
	}
	return d, got, nil
}

// noteGone marks the device dead when err says the daemon hung up (a
// waiter on the events wakes as the daemon closes its end).
func (r *Device) noteGone(err error) {
	if ipc.IsClosed(err) {
		r.dead.Store(true)
	}
}

// callNoFDs is call for replies that carry no fds.
func (r *Device) callNoFDs(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, error) {
	d, err := r.conn.CallNoFDs(op, body, fds...)
	if err != nil {
		r.noteGone(err)
		return nil, fmt.Errorf("verbs: daemon: %w", err)
	}
	return d, nil
}

// errGone is what posting to a device whose daemon died returns.
func errGone() error { return fmt.Errorf("verbs: the daemon is gone: %w", ibv.ErrDeviceFatal) }

// Close hangs up; the daemon destroys the session's objects. The doorbell
// page and the regions' memory stay mapped for a post racing it: slices
// of it stay valid.
func (r *Device) Close() error {
	r.stop()
	err := r.conn.Close()
	r.closeBells()
	r.events.Close()
	// The CQs' pipes too (a waiter on one returns): the rings stay mapped
	// for a poll racing it.
	r.objMu.Lock()
	for _, cq := range r.cqs {
		cq.notify.Close()
	}
	r.objMu.Unlock()
	return err
}

// StopDaemon asks the daemon to stop (xdproce down), detaches, and waits
// until its process has exited (its XDP program and UDP port released) or
// ctx ends. Only root and the daemon's own user may.
func (r *Device) StopDaemon(ctx context.Context, detach func() error) error {
	peer, err := r.conn.Peer()
	if err != nil {
		return err
	}
	if _, err := r.callNoFDs(uverbs.OpShutdown, nil); err != nil {
		return err
	}
	detach()
	return ipc.WaitExit(ctx, peer.PID)
}

// ResolveMAC knows only the port's own addresses: the daemon resolves
// its clients' next hops itself.
func (r *Device) ResolveMAC(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	return ibv.ResolveMAC(ctx, ip, r.mac, r.gids, nil)
}

// QueueCounters returns the daemon's transport counters, as one queue.
func (r *Device) QueueCounters() ([]ibv.Counters, error) {
	tc, _, err := r.allCounters()
	var c ibv.Counters
	for _, n := range tc {
		c.Set(n.Name, n.Value)
	}
	return []ibv.Counters{c}, err
}

// PortCounters returns the counters of what moves the daemon's frames.
func (r *Device) PortCounters() ([]ibv.NamedCounter, error) {
	_, port, err := r.allCounters()
	var out []ibv.NamedCounter
	for _, n := range port {
		out = append(out, ibv.NamedCounter(n))
	}
	return out, err
}

// allCounters asks for the transport's counters and the port's.
func (r *Device) allCounters() (tc, port []uverbs.Counter, err error) {
	d, err := r.callNoFDs(uverbs.OpCounters, nil)
	if err != nil {
		return nil, nil, err
	}
	tc = uverbs.GetCounters(d)
	port = uverbs.GetCounters(d)
	return tc, port, d.End()
}

// What only a device with engines of its own has: a client's has none.

// QPStatus is the daemon's business: none here.
func (r *Device) QPStatus() ([]ibv.QPStatus, error) { return nil, nil }

// Regions is 0: the daemon holds the regions.
func (r *Device) Regions() int { return 0 }

// AddressHandles is 0: the daemon holds the handles.
func (r *Device) AddressHandles() int { return 0 }

// SetCapture does nothing: the daemon captures (xdproce up --pcap).
func (r *Device) SetCapture(ibv.CaptureFunc) {}

// Progress is false: no engines here.
func (r *Device) Progress() bool { return false }

// SetDoorbellPage does nothing: the daemon owns the page.
func (r *Device) SetDoorbellPage([]byte) {}

// Wake does nothing: posts ring the daemon's engines themselves.
func (r *Device) Wake() {}

// WatchDoorbell is false: no engines here to watch it.
func (r *Device) WatchDoorbell(int, int) (bool, error) { return false, nil }

// UnwatchDoorbell does nothing: WatchDoorbell watched nothing.
func (r *Device) UnwatchDoorbell(int, int) error { return nil }

// Engines is 0: no engines here.
func (r *Device) Engines() int { return 0 }

// errDaemonSide refuses what only the daemon's own (in-process) device
// does: its engines serve the rings.
func errDaemonSide(what string) error {
	return fmt.Errorf("verbs: %s on a device attached to a daemon: %w", what, ibv.ErrNotSup)
}

// CreateSharedCQ is the daemon's: ErrNotSup.
func (r *Device) CreateSharedCQ(int, *uverbs.Ring, func(), any) (ibv.CQOps, error) {
	return nil, errDaemonSide("a shared CQ")
}

// PD is a protection domain of the daemon.
type PD struct {
	dev *Device
	h   uint32
}

// AllocPD creates a protection domain.
func (r *Device) AllocPD() (ibv.PDOps, error) {
	d, err := r.callNoFDs(uverbs.OpAllocPD, nil)
	if err != nil {
		return nil, err
	}
	pd := &PD{dev: r, h: d.U32()}
	return pd, d.End()
}

// Dealloc frees the PD.
func (pd *PD) Dealloc() error {
	_, err := pd.dev.callNoFDs(uverbs.OpDeallocPD, func(e *uverbs.Encoder) { e.U32(pd.h) })
	return err
}

// RegProcMR is the daemon's: ErrNotSup.
func (pd *PD) RegProcMR(ibv.ProcMemory, uint64, uint64, ibv.Access) (ibv.MROps, error) {
	return nil, errDaemonSide("another process's memory")
}

// CreateSharedQP is the daemon's: ErrNotSup.
func (pd *PD) CreateSharedQP(ibv.QPInit, *uverbs.Ring, *uverbs.Ring, func(uint32) *ibv.AH, any) (ibv.QPOps, error) {
	return nil, errDaemonSide("a shared QP")
}

// CreateSharedSRQ is the daemon's: ErrNotSup.
func (pd *PD) CreateSharedSRQ(ibv.SRQInitAttr, *uverbs.Ring, any) (ibv.SRQOps, error) {
	return nil, errDaemonSide("a shared SRQ")
}

// MR is a region of the daemon's.
type MR struct {
	dev        *Device
	h          uint32
	buf        []byte
	addr       uint64
	lkey, rkey uint32
	m          *ipc.Mapping // memory shared with the daemon, if allocated so
}

// LKey is the local key that SGEs name.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the remote key peers name.
func (m *MR) RKey() uint32 { return m.rkey }

// Bytes is the region's memory.
func (m *MR) Bytes() []byte { return m.buf }

// AllocMR registers n bytes of memory shared with the daemon (a sealed
// memfd both map): the engines reach it without a copy or system call.
func (pd *PD) AllocMR(n int, access ibv.Access) (ibv.MROps, error) {
	r := pd.dev
	m, err := ipc.NewMapping("mr", n)
	if err != nil {
		return nil, err
	}
	buf := m.Mem[:n]
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	d, err := r.callNoFDs(uverbs.OpRegMR, func(e *uverbs.Encoder) {
		e.U32(pd.h)
		e.U64(addr)
		e.U64(uint64(n))
		e.U32(uint32(access))
		e.U64(addr)
	}, m.FD)
	m.CloseFD()
	var mr *MR
	if err == nil {
		mr = &MR{dev: r, buf: buf, addr: addr, m: m}
		mr.h, mr.lkey, mr.rkey = d.U32(), d.U32(), d.U32()
		err = d.End()
	}
	if err != nil {
		m.Unmap()
		return nil, err
	}
	r.addMR(mr)
	return mr, nil
}

// RegMR registers memory the application already has: the daemon copies
// to and from it with process_vm_readv/writev, at iova for SGEs and peers.
func (pd *PD) RegMR(buf []byte, iova uint64, access ibv.Access) (ibv.MROps, error) {
	r := pd.dev
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	d, err := r.callNoFDs(uverbs.OpRegMR, func(e *uverbs.Encoder) {
		e.U32(pd.h)
		e.U64(addr)
		e.U64(uint64(len(buf)))
		e.U32(uint32(access))
		e.U64(iova)
	})
	if err != nil {
		return nil, err
	}
	mr := &MR{dev: r, buf: buf, addr: iova}
	mr.h, mr.lkey, mr.rkey = d.U32(), d.U32(), d.U32()
	if err := d.End(); err != nil {
		return nil, err
	}
	r.addMR(mr)
	return mr, nil
}

func (r *Device) addMR(mr *MR) {
	r.mrMu.Lock()
	r.mrs[mr.lkey] = mr
	r.mrMu.Unlock()
}

// Dereg deregisters the region.
func (m *MR) Dereg() error {
	r := m.dev
	if _, err := r.callNoFDs(uverbs.OpDeregMR, func(e *uverbs.Encoder) { e.U32(m.h) }); err != nil {
		return err
	}
	r.mrMu.Lock()
	delete(r.mrs, m.lkey)
	r.mrMu.Unlock()
	if m.m == nil {
		return nil // the application's own memory
	}
	return m.m.Unmap()
}

// MW is a memory window of the daemon's.
type MW struct {
	dev  *Device
	h    uint32
	rkey atomic.Uint32 // as the daemon will have it once the binds posted are done
}

// AllocMW creates a memory window.
func (pd *PD) AllocMW(typ ibv.MWType) (ibv.MWOps, error) {
	d, err := pd.dev.callNoFDs(uverbs.OpAllocMW, func(e *uverbs.Encoder) {
		e.U32(pd.h)
		e.U8(uint8(typ))
	})
	if err != nil {
		return nil, err
	}
	mw := &MW{dev: pd.dev, h: d.U32()}
	mw.rkey.Store(d.U32())
	return mw, d.End()
}

// RKey is the window's remote key once the binds posted are done.
func (mw *MW) RKey() uint32 { return mw.rkey.Load() }

// Dealloc frees the window.
func (mw *MW) Dealloc() error {
	_, err := mw.dev.callNoFDs(uverbs.OpDeallocMW, func(e *uverbs.Encoder) { e.U32(mw.h) })
	return err
}

// AH is an address handle of the daemon's.
type AH struct {
	dev  *Device
	h    uint32
	attr ibv.AH
}

// CreateAH makes an address handle; the daemon resolves its MAC address.
func (pd *PD) CreateAH(ah ibv.AH) (ibv.AHOps, error) {
	d, err := pd.dev.callNoFDs(uverbs.OpCreateAH, func(e *uverbs.Encoder) {
		e.U32(pd.h)
		w := ah.Wire()
		w.Put(e)
	})
	if err != nil {
		return nil, err
	}
	a := &AH{dev: pd.dev, h: d.U32(), attr: ah}
	mac := d.Raw()
	if err := d.End(); err != nil {
		return nil, err
	}
	a.attr.DMAC = append([]byte(nil), mac...)
	return a, nil
}

// Attr is the handle's vector.
func (a *AH) Attr() *ibv.AH { return &a.attr }

// Destroy frees the handle.
func (a *AH) Destroy() error {
	_, err := a.dev.callNoFDs(uverbs.OpDestroyAH, func(e *uverbs.Encoder) { e.U32(a.h) })
	return err
}

// CQ is a client's side of a daemon's CQ: the ring the daemon's engines
// write completions to, read here.
type CQ struct {
	h      uint32
	depth  int
	owner  any
	m      *ipc.Mapping
	notify *ipc.Waiter // hangs up when the daemon is gone
	ring   *uverbs.Ring
	head   atomic.Uint64 // completions polled (advanced under pollMu)
	empty  atomic.Uint32 // empty polls, for idle's yields
	// pollMu orders concurrent pollers among themselves, as ibv_poll_cq's
	// lock does.
	pollMu sync.Mutex
}

// CreateCQ creates a completion queue of depth completions.
func (r *Device) CreateCQ(depth int, owner any) (ibv.CQOps, error) {
	dec, fds, err := r.call(uverbs.OpCreateCQ, func(e *uverbs.Encoder) { e.U32(uint32(depth)) })
	if err != nil {
		return nil, err
	}
	if len(fds) != 2 {
		ipc.CloseAll(fds)
		return nil, fmt.Errorf("verbs: CREATE_CQ reply carried %d fds, 2 expected", len(fds))
	}
	h, slots := dec.U32(), dec.U32()
	cq := &CQ{h: h, depth: depth, owner: owner, notify: ipc.WaiterOf(fds[1])}
	if err = dec.End(); err == nil {
		cq.m, cq.ring, err = ipc.MapRing(fds[0], slots, uverbs.CQESize)
	} else {
		ipc.CloseAll(fds[:1])
	}
	if err != nil {
		cq.notify.Close()
		return nil, err
	}
	r.objMu.Lock()
	r.cqs[h] = cq
	r.objMu.Unlock()
	return cq, nil
}

// Depth is the depth asked for.
func (cq *CQ) Depth() int { return cq.depth }

// Poll reads completions from the CQ's ring.
func (cq *CQ) Poll(wcs []ibv.WorkCompletion) int {
	r := cq.ring
	if r.Producer() == uint32(cq.head.Load()) {
		cq.idle()
		return 0 // an empty poll: two loads, no lock, no store to the shared line
	}
	cq.pollMu.Lock()
	defer cq.pollMu.Unlock()
	h := uint32(cq.head.Load())
	k := min(uint32(len(wcs)), r.Producer()-h, r.Slots())
	var c uverbs.CQE
	for i := range k {
		uverbs.CQEOf(r.Slot(h+i), &c)
		wcs[i] = ibv.WorkCompletion{WRID: c.WRID, Status: ibv.WCStatus(c.Status), Opcode: ibv.WCOpcode(c.Opcode), VendorErr: c.VendorErr,
			ByteLen: c.ByteLen, ImmData: c.Imm, InvalidatedKey: c.InvalidatedKey, QPNum: c.QPNum, SrcQP: c.SrcQP, Flags: ibv.WCFlags(c.WCFlags),
			IPVersion: c.NetHdr}
	}
	cq.head.Store(uint64(h + k))
	r.SetConsumer(h + k)
	return int(k)
}

// ReqNotify arms the completion channel: the daemon's engines read the
// request in the ring.
func (cq *CQ) ReqNotify(solicitedOnly bool) {
	if solicitedOnly {
		cq.ring.Aux().Store(uverbs.NotifySolicited)
	} else {
		cq.ring.Aux().Store(uverbs.NotifyAny)
	}
}

// Wait blocks until the armed notification fires or ctx ends.
func (cq *CQ) Wait(ctx context.Context) error {
	err := cq.notify.Wait(ctx)
	if errors.Is(err, ipc.ErrHangup) {
		// The daemon is gone (or dropped the session): as the kernel's
		// completion channel of a disassociated device, EIO.
		return fmt.Errorf("verbs: completion channel: %w", ibv.ErrDeviceFatal)
	}
	return err
}

// Resize is not there yet: the Go client does not remap its ring (the C
// library does).
func (cq *CQ) Resize(int) error {
	return fmt.Errorf("verbs: resizing a CQ through the Go client: %w", ibv.ErrNotSup)
}

// ResizeShared is the daemon's: ErrNotSup.
func (cq *CQ) ResizeShared(int, *uverbs.Ring) error { return errDaemonSide("a shared CQ") }

// Overflowed reports whether the daemon lost completions of the CQ.
func (cq *CQ) Overflowed() bool { return cq.ring.Aux2().Load() != 0 }

// QP is a client's side of a daemon's QP: its rings.
type QP struct {
	dev      *Device
	h        uint32
	qpn      uint32
	typ      ibv.QPType
	cap      ibv.QPCap
	hasSRQ   bool
	owner    any
	sq, rq   *uverbs.Ring
	maps     [2]*ipc.Mapping
	sendMu   sync.Mutex
	recvMu   sync.Mutex
	sqp, rqp uint32 // producer indices
}

// checkQPRings checks a CREATE_QP reply's rings against what it granted,
// as the daemon's word is not trusted: slots that hold their header, as
// many as the depths granted, and no more SGEs than a work request carries.
func checkQPRings(rep *uverbs.QPCreated) error {
	c := &rep.Cap
	if rep.SendSlotSize < uverbs.SendSlotHeader || rep.RecvSlotSize < uverbs.RecvSlotHeader || c.MaxSendWR > rep.SendSlots ||
		c.MaxRecvWR > rep.RecvSlots || c.MaxSendSGE > ibv.MaxSGE || c.MaxRecvSGE > ibv.MaxSGE {
		return fmt.Errorf("verbs: CREATE_QP granted %+v in send slots %d×%d, receive slots %d×%d: %w", *c, rep.SendSlots, rep.SendSlotSize,
			rep.RecvSlots, rep.RecvSlotSize, uverbs.ErrMalformed)
	}
	return nil
}

// CreateQP creates a QP in the daemon and maps its rings.
func (pd *PD) CreateQP(init ibv.QPInit, owner any) (ibv.QPOps, error) {
	r := pd.dev
	if init.GSI {
		return nil, fmt.Errorf("verbs: QP1 belongs to the daemon: %w", ibv.ErrNotSup)
	}
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("verbs: a QP needs a send and a receive CQ of its device: %w", ibv.ErrInvalid)
	}
	var srq uint32
	if init.SRQ != nil {
		s, ok := init.SRQ.(*SRQ)
		if !ok {
			return nil, fmt.Errorf("verbs: the SRQ belongs to another device: %w", ibv.ErrInvalid)
		}
		srq = s.h
	}
	c := init.Cap
	req := uverbs.CreateQP{PD: pd.h, SendCQ: scq.h, RecvCQ: rcq.h, SRQ: srq, Type: uint8(init.Type), SigAll: init.SigAll,
		Cap: uverbs.QPCap{MaxSendWR: uint32(c.MaxSendWR), MaxRecvWR: uint32(c.MaxRecvWR), MaxSendSGE: uint32(c.MaxSendSGE),
			MaxRecvSGE: uint32(c.MaxRecvSGE), MaxInlineData: uint32(c.MaxInlineData)}}
	dec, fds, err := r.call(uverbs.OpCreateQP, req.Put)
	if err != nil {
		return nil, err
	}
	if len(fds) != 2 {
		ipc.CloseAll(fds)
		return nil, fmt.Errorf("verbs: CREATE_QP reply carried %d fds, 2 expected", len(fds))
	}
	var rep uverbs.QPCreated
	rep.Get(dec)
	qp := &QP{dev: r, h: rep.QP, qpn: rep.QPN, typ: init.Type, hasSRQ: init.SRQ != nil, owner: owner,
		cap: ibv.QPCap{MaxSendWR: int(rep.Cap.MaxSendWR), MaxRecvWR: int(rep.Cap.MaxRecvWR), MaxSendSGE: int(rep.Cap.MaxSendSGE),
			MaxRecvSGE: int(rep.Cap.MaxRecvSGE), MaxInlineData: int(rep.Cap.MaxInlineData)}}
	err = dec.End()
	if err == nil {
		err = checkQPRings(&rep)
	}
	for i, fd := range fds {
		slots, size := rep.SendSlots, rep.SendSlotSize
		if i == 1 {
			slots, size = rep.RecvSlots, rep.RecvSlotSize
		}
		if err != nil {
			ipc.CloseAll([]int{fd})
			continue
		}
		var ring *uverbs.Ring
		if qp.maps[i], ring, err = ipc.MapRing(fd, slots, int(size)); err != nil {
			continue
		}
		if i == 0 {
			qp.sq = ring
		} else {
			qp.rq = ring
		}
	}
	if err != nil {
		return nil, errors.Join(err, qp.Destroy())
	}
	r.objMu.Lock()
	r.qps[qp.h] = qp
	r.objMu.Unlock()
	return qp, nil
}

// QPN is the QP's number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Cap is what the daemon granted.
func (qp *QP) Cap() ibv.QPCap { return qp.cap }

// Handle is the daemon's handle of the QP.
func (qp *QP) Handle() uint32 { return qp.h }

// AttachMcast asks the daemon to attach the QP to the group gid.
func (qp *QP) AttachMcast(gid netip.Addr, lid uint16) error {
	return qp.mcast(uverbs.OpAttachMcast, gid, lid)
}

// DetachMcast asks the daemon to detach the QP from the group gid.
func (qp *QP) DetachMcast(gid netip.Addr, lid uint16) error {
	return qp.mcast(uverbs.OpDetachMcast, gid, lid)
}

func (qp *QP) mcast(op uverbs.Op, gid netip.Addr, lid uint16) error {
	m := uverbs.McastReq{QP: qp.h, GID: gid.As16(), LID: lid}
	_, err := qp.dev.callNoFDs(op, m.Put)
	return err
}

// State is the QP's state, as the daemon publishes it in the send ring.
func (qp *QP) State() ibv.QPState { return ibv.QPState(qp.sq.Aux().Load()) }

// PublishState does nothing: the daemon publishes.
func (qp *QP) PublishState() {}

// Destroy destroys the QP and unmaps its rings.
func (qp *QP) Destroy() error {
	r := qp.dev
	_, err := r.callNoFDs(uverbs.OpDestroyQP, func(e *uverbs.Encoder) { e.U32(qp.h) })
	if err != nil {
		return err
	}
	r.objMu.Lock()
	delete(r.qps, qp.h)
	r.objMu.Unlock()
	for _, m := range qp.maps {
		if m != nil {
			m.Unmap()
		}
	}
	return nil
}

// Modify asks the daemon, which checks the transition itself (check is
// the in-process provider's).
func (qp *QP) Modify(attr ibv.QPAttr, mask ibv.AttrMask, _ func(ibv.QPState, bool) error) error {
	w := attr.Wire()
	_, err := qp.dev.callNoFDs(uverbs.OpModifyQP, func(e *uverbs.Encoder) {
		e.U32(qp.h)
		e.U32(uint32(mask))
		w.Put(e)
	})
	return err
}

// Query asks the daemon for the QP's attributes.
func (qp *QP) Query() (ibv.QPAttr, error) {
	d, err := qp.dev.callNoFDs(uverbs.OpQueryQP, func(e *uverbs.Encoder) { e.U32(qp.h) })
	if err != nil {
		return ibv.QPAttr{}, err
	}
	var w uverbs.QPAttr
	w.Get(d)
	if err := d.End(); err != nil {
		return ibv.QPAttr{}, err
	}
	return ibv.QPAttrFromWire(&w), nil
}

// checkWR checks wr as the in-process provider checks it, so the daemon
// takes each as if posted in-process.
func (qp *QP) checkWR(wr *ibv.SendWR) error {
	s := ibv.WRShape{ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, SGList: wr.SGList, RemoteAddr: wr.RemoteAddr, RemoteQPN: wr.RemoteQPN,
		AH: wr.AH != nil, AHBad: wr.AHBad}
	if b := wr.Bind; b != nil {
		s.Bind, s.BindMW, s.BindForeign = true, b.MW != nil, b.Foreign
	}
	_, err := ibv.CheckSendWR(&s, qp.typ, &qp.cap, qp.dev.mtu)
	return err
}

// PostSend writes send work requests to the QP's ring, checked as the
// in-process provider checks them.
func (qp *QP) PostSend(wrs []ibv.SendWR) (int, error) {
	r := qp.dev
	if r.dead.Load() {
		return 0, errGone()
	}
	st := qp.State()
	if st == ibv.StateReset || st == ibv.StateInit || st == ibv.StateRTR {
		return 0, fmt.Errorf("verbs: post send in state %v: %w", st, ibv.ErrInvalid)
	}
	qp.sendMu.Lock()
	defer qp.sendMu.Unlock()
	var sgl [ibv.MaxSGE]uverbs.SGE
	posted := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if err = qp.checkWR(wr); err != nil {
			break
		}
		if qp.sqp-qp.sq.Consumer() >= uint32(qp.cap.MaxSendWR) {
			err = fmt.Errorf("verbs: send queue full (%d WRs): %w", qp.cap.MaxSendWR, ibv.ErrNoMem)
			break
		}
		w := uverbs.SendWQE{WRID: wr.ID, Opcode: uint8(wr.Opcode), SendFlags: uint8(wr.Flags), Imm: wr.ImmData, RemoteAddr: wr.RemoteAddr,
			RKey: wr.RKey, InvRKey: wr.InvRKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap, RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey}
		if wr.AH != nil {
			ah, ok := wr.AH.(*AH) // checked: a live handle of this device
			if !ok {
				err = fmt.Errorf("verbs: send WR %d: an address handle of another device: %w", wr.ID, ibv.ErrInvalid)
				break
			}
			w.AH = ah.h
		}
		slot := qp.sq.Slot(qp.sqp)
		if wr.Opcode == ibv.WRBindMW {
			b := wr.Bind
			mw, ok := b.MW.(*MW) // checked: a window of this device
			if !ok {
				err = fmt.Errorf("verbs: send WR %d: a memory window of another device: %w", wr.ID, ibv.ErrInvalid)
				break
			}
			w.InvRKey, w.RKey, w.RemoteAddr = mw.RKey(), b.RKey, b.Addr
			var lkey uint32
			if b.MR != nil {
				lkey = b.MR.LKey()
			}
			w.SetBind(b.Length, uint32(b.Access), lkey)
			uverbs.PutSendWQE(slot, &w, nil, nil)
			// The window's key once the bind is done, as the daemon will
			// have it (a failed bind completes with MW_BIND_ERR).
			mw.rkey.Store(mw.RKey()&^0xff | b.RKey&0xff)
		} else if wr.Flags&ibv.SendInline != 0 {
			err = r.putInline(slot, &w, wr)
		} else {
			for j, s := range wr.SGList {
				sgl[j] = uverbs.SGE(s)
			}
			if !uverbs.PutSendWQE(slot, &w, sgl[:len(wr.SGList)], nil) {
				err = fmt.Errorf("verbs: send WR %d does not fit its slot: %w", wr.ID, ibv.ErrInvalid)
			}
		}
		if err != nil {
			break
		}
		qp.sqp++
		posted++
	}
	if posted > 0 {
		qp.sq.SetProducer(qp.sqp)
		r.ring(qp.sq)
	}
	return posted, err
}

// putInline copies an INLINE request's data into its slot, from the
// regions its SGEs name, as PostSend does in-process.
func (r *Device) putInline(slot []byte, w *uverbs.SendWQE, wr *ibv.SendWR) error {
	r.mrMu.RLock()
	defer r.mrMu.RUnlock()
	data := slot[uverbs.SendSlotHeader:uverbs.SendSlotHeader]
	for _, s := range wr.SGList {
		mr := r.mrs[s.LKey]
		var b []byte
		ok := mr != nil
		if ok {
			b, ok = ibv.SliceAt(mr.buf, mr.addr, s.Addr, s.Length)
		}
		if !ok || len(data)+len(b) > cap(data) {
			return fmt.Errorf("verbs: inline send WR %d: bad lkey %#x or SGE: %w", wr.ID, s.LKey, ibv.ErrInvalid)
		}
		data = append(data, b...)
	}
	if !uverbs.PutSendWQE(slot, w, nil, data) {
		return fmt.Errorf("verbs: inline send WR %d does not fit its slot: %w", wr.ID, ibv.ErrInvalid)
	}
	return nil
}

// PostRecv writes receive work requests to the QP's receive ring.
func (qp *QP) PostRecv(wrs []ibv.RecvWR) (int, error) {
	if qp.dev.dead.Load() {
		return 0, errGone()
	}
	if qp.hasSRQ {
		return 0, fmt.Errorf("verbs: the QP receives from an SRQ; post there: %w", ibv.ErrInvalid)
	}
	if st := qp.State(); st == ibv.StateReset {
		return 0, fmt.Errorf("verbs: post receive in state %v: %w", st, ibv.ErrInvalid)
	}
	qp.recvMu.Lock()
	defer qp.recvMu.Unlock()
	posted, err := postToRecvRing(qp.rq, &qp.rqp, qp.cap.MaxRecvWR, qp.cap.MaxRecvSGE, "QP", wrs)
	if posted > 0 {
		qp.rq.SetProducer(qp.rqp)
		qp.dev.ring(qp.sq)
	}
	return posted, err
}

// postToRecvRing writes receive work requests to a receive ring (a QP's or
// an SRQ's of what) after *prod, checked as PostRecv checks them, and
// returns how many it wrote; the caller publishes them.
func postToRecvRing(ring *uverbs.Ring, prod *uint32, maxWR, maxSGE int, what string, wrs []ibv.RecvWR) (int, error) {
	var sgl [ibv.MaxSGE]uverbs.SGE
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGList) > maxSGE {
			return i, fmt.Errorf("verbs: receive WR %d: %d SGEs, the %s allows %d: %w", wr.ID, len(wr.SGList), what, maxSGE, ibv.ErrInvalid)
		}
		if *prod-ring.Consumer() >= uint32(maxWR) {
			return i, fmt.Errorf("verbs: the %s's receive queue is full (%d WRs): %w", what, maxWR, ibv.ErrNoMem)
		}
		for j, s := range wr.SGList {
			sgl[j] = uverbs.SGE(s)
		}
		uverbs.PutRecvWQE(ring.Slot(*prod), wr.ID, sgl[:len(wr.SGList)])
		*prod++
	}
	return len(wrs), nil
}

// ring wakes the engine serving a QP (named in its send ring) if it sleeps,
// with the client's doorbell for that engine. An index the daemon wrote
// past its engines (it may not) rings a doorbell all the same.
func (r *Device) ring(sq *uverbs.Ring) {
	e := sq.Aux2().Load()
	if uverbs.Sleeping(r.page.Mem, e) {
		r.bells[e%uint32(len(r.bells))].Signal()
	}
}

// SRQ is a client's side of a daemon's SRQ: its ring.
type SRQ struct {
	dev   *Device
	h     uint32
	owner any
	ring  *uverbs.Ring
	m     *ipc.Mapping
	mu    sync.Mutex
	prod  uint32
	attr  ibv.SRQAttr // as last created, modified or queried
}

// CreateSRQ creates an SRQ in the daemon and maps its ring.
func (pd *PD) CreateSRQ(attr ibv.SRQInitAttr, owner any) (ibv.SRQOps, error) {
	r := pd.dev
	a := uverbs.SRQAttr{MaxWR: uint32(attr.MaxWR), MaxSGE: uint32(attr.MaxSGE), Limit: uint32(attr.Limit)}
	d, fds, err := r.call(uverbs.OpCreateSRQ, func(e *uverbs.Encoder) {
		e.U32(pd.h)
		a.Put(e)
	})
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		ipc.CloseAll(fds)
		return nil, fmt.Errorf("verbs: CREATE_SRQ reply carried %d fds, 1 expected", len(fds))
	}
	s := &SRQ{dev: r, h: d.U32(), owner: owner}
	a.Get(d)
	slots, size := d.U32(), d.U32()
	if err = d.End(); err == nil && (size < uverbs.RecvSlotHeader || a.MaxWR > slots || a.MaxSGE > ibv.MaxSGE) {
		err = fmt.Errorf("verbs: CREATE_SRQ granted %d WRs of %d SGEs in %d slots of %d bytes: %w", a.MaxWR, a.MaxSGE, slots, size, uverbs.ErrMalformed)
	}
	if err != nil {
		ipc.CloseAll(fds)
	} else {
		s.m, s.ring, err = ipc.MapRing(fds[0], slots, int(size))
	}
	s.attr = ibv.SRQAttr{MaxWR: int(a.MaxWR), MaxSGE: int(a.MaxSGE), Limit: int(a.Limit)}
	if err != nil {
		return nil, errors.Join(err, s.Destroy())
	}
	r.objMu.Lock()
	r.srqs[s.h] = s
	r.objMu.Unlock()
	return s, nil
}

// PostRecv writes receive work requests to the SRQ's ring.
func (s *SRQ) PostRecv(wrs []ibv.RecvWR) (int, error) {
	r := s.dev
	if r.dead.Load() {
		return 0, errGone()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	posted, err := postToRecvRing(s.ring, &s.prod, s.attr.MaxWR, s.attr.MaxSGE, "SRQ", wrs)
	if posted > 0 {
		s.ring.SetProducer(s.prod)
		r.ring(s.ring) // aux2 0: engine 0 takes SRQ posts
	}
	return posted, err
}

// Modify asks the daemon to resize the SRQ or arm its limit.
func (s *SRQ) Modify(attr ibv.SRQAttr, mask ibv.SRQAttrMask) error {
	a := uverbs.SRQAttr{MaxWR: uint32(attr.MaxWR), MaxSGE: uint32(attr.MaxSGE), Limit: uint32(attr.Limit)}
	if _, err := s.dev.callNoFDs(uverbs.OpModifySRQ, func(e *uverbs.Encoder) {
		e.U32(s.h)
		e.U32(uint32(mask))
		a.Put(e)
	}); err != nil {
		return err
	}
	s.mu.Lock()
	if mask&ibv.SRQAttrMaxWR != 0 {
		s.attr.MaxWR = attr.MaxWR
	}
	if mask&ibv.SRQAttrLimit != 0 {
		s.attr.Limit = attr.Limit
	}
	s.mu.Unlock()
	return nil
}

// Query asks the daemon for the SRQ's attributes (the last known if it
// cannot answer).
func (s *SRQ) Query() ibv.SRQAttr {
	d, err := s.dev.callNoFDs(uverbs.OpQuerySRQ, func(e *uverbs.Encoder) { e.U32(s.h) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		var a uverbs.SRQAttr
		a.Get(d)
		if d.End() == nil {
			s.attr = ibv.SRQAttr{MaxWR: int(a.MaxWR), MaxSGE: int(a.MaxSGE), Limit: int(a.Limit)}
		}
	}
	return s.attr
}

// Destroy destroys the SRQ and unmaps its ring.
func (s *SRQ) Destroy() error {
	r := s.dev
	if _, err := r.callNoFDs(uverbs.OpDestroySRQ, func(e *uverbs.Encoder) { e.U32(s.h) }); err != nil {
		return err
	}
	r.objMu.Lock()
	delete(r.srqs, s.h)
	r.objMu.Unlock()
	if s.m != nil {
		return s.m.Unmap()
	}
	return nil
}

var (
	_ ibv.PDOps  = (*PD)(nil)
	_ ibv.QPOps  = (*QP)(nil)
	_ ibv.CQOps  = (*CQ)(nil)
	_ ibv.SRQOps = (*SRQ)(nil)
	_ ibv.MROps  = (*MR)(nil)
	_ ibv.MWOps  = (*MW)(nil)
	_ ibv.AHOps  = (*AH)(nil)
)
