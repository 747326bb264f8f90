// Package inproc is the in-process provider behind package verbs: a
// device whose objects and engines run in the calling process
// (internal/transport), and the daemon's side of the rings it shares with
// its clients (internal/sharedring). It implements ibv's ops interfaces
// over transport's objects, most of which are their own ops; what it adds
// is what the API's objects need beyond the engines: resolving a next
// hop's MAC address, the address handles, and translating work requests.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/internal/sharedring"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/uverbs"
)

// Config describes the port: the engines' configuration, and what the
// API's device asks of the port beyond them.
type Config struct {
	port.Config
	// Resolve finds the MAC address of a destination (ARP/ND).
	Resolve func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)
	// PortCounters reads the counters of what moves the port's frames.
	PortCounters func() ([]ibv.NamedCounter, error)
	// FastPath, if set, is the XDP program's responder fast path
	// (fastpath.go): idle RC responders and device memory are shared with it.
	FastPath *loader.FastPath
}

// Device is an in-process RNIC: transport's NIC (embedded: its engines,
// tables, counters and test hooks) and the address handles.
type Device struct {
	*transport.NIC
	cfg Config
	ahs atomic.Int32 // address handles alive
	// maxDM finds once whether the kernel gives device memory.
	maxDM func() int
}

var _ ibv.DeviceOps = (*Device)(nil)

// New starts a device with one engine per link, each link one queue of
// the port. Close stops it.
func New(links []link.Link, cfg Config) (*Device, error) {
	if cfg.FastPath != nil {
		cfg.Config.FastPath = fastPath{cfg.FastPath}
	}
	nic, err := transport.New(links, cfg.Config)
	if err != nil {
		return nil, err
	}
	return &Device{NIC: nic, cfg: cfg, maxDM: sync.OnceValue(probeDM)}, nil
}

// Close stops the engines.
func (d *Device) Close() error {
	d.NIC.Close()
	return nil
}

// AllocPD creates a protection domain.
func (d *Device) AllocPD() (ibv.PDOps, error) {
	pd, err := d.NIC.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{pd: pd, dev: d}, nil
}

// CreateCQ creates a completion queue of depth completions.
func (d *Device) CreateCQ(depth int, owner any) (ibv.CQOps, error) {
	cq := d.NIC.CreateCQ(depth)
	cq.Owner = owner
	return &CQ{CQ: cq, dev: d}, nil
}

// CQ is a completion queue: transport's (embedded), which the engines
// fill.
type CQ struct {
	*queue.CQ
	dev *Device
}

// ResizeShared moves a shared CQ to ring, of depth completions, with the
// completions its client has not read; the engines write only ring once
// it returns.
func (cq *CQ) ResizeShared(depth int, ring *uverbs.Ring) error {
	if ring == nil || int(ring.Slots()) < depth || ring.SlotSize() < uverbs.CQESize {
		return fmt.Errorf("verbs: resizing a shared CQ to %d on a ring too small: %w", depth, ibv.ErrInvalid)
	}
	return cq.dev.ResizeCQSink(cq.CQ, depth, func(sink queue.CQSink, tail uint32) (queue.CQSink, error) {
		old, ok := sink.(*sharedring.CQ)
		if !ok {
			return nil, fmt.Errorf("verbs: CQ is not shared: %w", ibv.ErrInvalid)
		}
		return old.MoveTo(ring, depth, tail)
	})
}

// CreateSharedCQ creates a CQ whose completions go to ring, memory
// shared with a client, which reads them itself; notify runs, on an
// engine, when a completion matches the request the client armed.
func (d *Device) CreateSharedCQ(depth int, ring *uverbs.Ring, notify func(), owner any) (ibv.CQOps, error) {
	if ring == nil || int(ring.Slots()) < depth || ring.SlotSize() < uverbs.CQESize {
		return nil, fmt.Errorf("verbs: shared CQ of depth %d on a ring too small: %w", depth, ibv.ErrInvalid)
	}
	cq := d.NIC.CreateCQSink(depth, sharedring.NewCQ(ring, notify))
	cq.Owner = owner
	return &CQ{CQ: cq, dev: d}, nil
}

// GetAsyncEvent returns the oldest asynchronous event, naming the owners
// of its objects.
func (d *Device) GetAsyncEvent(ctx context.Context) (ibv.Event, error) {
	ev, err := d.NIC.NextEvent(ctx)
	if err != nil {
		return ibv.Event{}, err
	}
	out := ibv.Event{Type: ev.Type}
	if ev.QP != nil {
		out.QP = ev.QP.Owner
	}
	if ev.CQ != nil {
		out.CQ = ev.CQ.Owner
	}
	if ev.SRQ != nil {
		out.SRQ = ev.SRQ.Owner
	}
	return out, nil
}

// PortCounters reads the port's counters, none on an in-memory link.
func (d *Device) PortCounters() ([]ibv.NamedCounter, error) {
	if d.cfg.PortCounters == nil {
		return nil, nil
	}
	return d.cfg.PortCounters()
}

// ResolveMAC finds the MAC address of the neighbour ip through the port's
// resolver.
func (d *Device) ResolveMAC(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	return ibv.ResolveMAC(ctx, ip, d.cfg.MAC, d.cfg.GIDs, d.cfg.Resolve)
}

// resolveAV is the next hop's MAC address for ah: its DMAC, or what the
// neighbour resolver finds.
func (d *Device) resolveAV(ah *ibv.AH) (net.HardwareAddr, error) {
	if len(ah.DMAC) == 6 {
		return ah.DMAC, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return d.ResolveMAC(ctx, ah.DGID)
}

// AddressHandles is how many address handles the device holds.
func (d *Device) AddressHandles() int { return int(d.ahs.Load()) }

// Control is the daemon's business: ErrNotSup in-process.
func (d *Device) Control(op uverbs.Op, _ func(*uverbs.Encoder)) (*uverbs.Decoder, []int, error) {
	return nil, nil, fmt.Errorf("verbs: %v on an in-process device: %w", op, ibv.ErrNotSup)
}

// StopDaemon: an in-process device is no daemon's.
func (d *Device) StopDaemon(context.Context, func() error) error {
	return fmt.Errorf("verbs: the device is not a daemon's: %w", ibv.ErrInvalid)
}

// Attached is false: the device runs here.
func (d *Device) Attached() bool { return false }

// MaxDMSize is ibv.MaxDMSize where the kernel gives device memory (an
// mmapable array map; probed once), else 0.
func (d *Device) MaxDMSize() int { return d.maxDM() }

func probeDM() int {
	m, err := loader.NewDeviceMemory(loader.DMPage)
	if err != nil {
		return 0
	}
	m.Close()
	return ibv.MaxDMSize
}

// AllocDM allocates device memory the XDP program can write, mapped into
// the process (loader.DeviceMemory): EOPNOTSUPP where the kernel has none.
func (d *Device) AllocDM(length int) (ibv.DMOps, error) {
	m, err := loader.NewDeviceMemory(length)
	if err != nil {
		return nil, err
	}
	if d.cfg.FastPath == nil {
		return m, nil
	}
	idx, err := d.cfg.FastPath.AddDM(m)
	if err != nil {
		return m, nil // the program's table is full: this block is Go's alone
	}
	return &dm{DeviceMemory: m, fast: d.cfg.FastPath, idx: idx}, nil
}

// PD is a protection domain.
type PD struct {
	pd  *transport.PD
	dev *Device
}

// Dealloc frees the PD: EBUSY while an object uses it, as ibv_dealloc_pd.
func (pd *PD) Dealloc() error {
	if n := pd.pd.Users(); n > 0 {
		return fmt.Errorf("verbs: PD used by %d objects: %w", n, ibv.ErrBusy)
	}
	return nil
}

// RegMR registers buf at address iova.
func (pd *PD) RegMR(buf []byte, iova uint64, access ibv.Access) (ibv.MROps, error) {
	return pd.mr(pd.dev.NIC.RegMR(pd.pd, buf, iova, access))
}

// AllocMR registers n bytes of the process's memory.
func (pd *PD) AllocMR(n int, access ibv.Access) (ibv.MROps, error) {
	buf := make([]byte, n)
	return pd.RegMR(buf, uint64(uintptr(unsafe.Pointer(&buf[0]))), access)
}

// RegDMMR registers part of device memory this device allocated: the
// engines write the same pages the XDP program and the application see.
func (pd *PD) RegDMMR(dm ibv.DMOps, offset, length int, access ibv.Access) (ibv.MROps, error) {
	return pd.RegMR(dm.Bytes()[offset:offset+length], 0, access)
}

// RegProcMR registers another process's memory, reached through mem.
func (pd *PD) RegProcMR(mem ibv.ProcMemory, iova, length uint64, access ibv.Access) (ibv.MROps, error) {
	return pd.mr(pd.dev.NIC.RegProcMR(pd.pd, mem, iova, length, access))
}

func (pd *PD) mr(m *transport.MR, err error) (ibv.MROps, error) {
	if err != nil {
		return nil, err
	}
	return &MR{MR: m, dev: pd.dev}, nil
}

// MR is a memory region (package memory's, embedded), deregistered on
// the engines.
type MR struct {
	*transport.MR
	dev *Device
}

// Dereg deregisters the region between two packets of every engine.
func (m *MR) Dereg() error { return m.dev.NIC.DeregMR(m.MR) }

// MW is a memory window (package memory's, embedded), freed on the
// engines.
type MW struct {
	*transport.MW
	dev *Device
}

// Dealloc frees the window; its rkey stops working when Dealloc returns.
func (mw *MW) Dealloc() error { return mw.dev.NIC.DeallocMW(mw.MW) }

// AllocMW creates a memory window.
func (pd *PD) AllocMW(typ ibv.MWType) (ibv.MWOps, error) {
	mw, err := pd.dev.NIC.AllocMW(pd.pd, typ == ibv.MWType1)
	if err != nil {
		return nil, err
	}
	return &MW{MW: mw, dev: pd.dev}, nil
}

// AH is an address handle: its vector, the MAC address resolved once, as
// the kernel does for RoCE (ib_resolve_eth_dmac).
type AH struct {
	pd   *PD
	attr ibv.AH
}

// Attr is the handle's vector.
func (a *AH) Attr() *ibv.AH { return &a.attr }

// Destroy frees the handle (the API lets it be called once), once the
// engines took what clients posted through it (TakePosted).
func (a *AH) Destroy() error {
	a.pd.dev.TakePosted()
	a.pd.dev.ahs.Add(-1)
	a.pd.pd.AddUsers(-1)
	return nil
}

// CreateAH makes an address handle, resolving its MAC address now.
func (pd *PD) CreateAH(ah ibv.AH) (ibv.AHOps, error) {
	d := pd.dev
	if d.ahs.Add(1) > ibv.MaxAH {
		d.ahs.Add(-1)
		return nil, fmt.Errorf("verbs: %d address handles: %w", ibv.MaxAH, ibv.ErrNoMem)
	}
	mac, err := d.resolveAV(&ah)
	if err != nil {
		d.ahs.Add(-1)
		return nil, err
	}
	ah.DMAC = mac
	pd.pd.AddUsers(1)
	return &AH{pd: pd, attr: ah}, nil
}

// CreateQP creates a QP; the API checked init and its objects are this
// device's.
func (pd *PD) CreateQP(init ibv.QPInit, owner any) (ibv.QPOps, error) {
	return pd.createQP(init, owner)
}

func (pd *PD) createQP(init ibv.QPInit, owner any) (*QP, error) {
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("verbs: a CQ belongs to another device: %w", ibv.ErrInvalid)
	}
	t := queue.QPInit{Type: init.Type, SendCQ: scq.CQ, RecvCQ: rcq.CQ, Cap: init.Cap, SigAll: init.SigAll, GSI: init.GSI}
	if init.SRQ != nil {
		srq, ok := init.SRQ.(*SRQ)
		if !ok {
			return nil, fmt.Errorf("verbs: the SRQ belongs to another device: %w", ibv.ErrInvalid)
		}
		t.SRQ, t.Cap.MaxRecvWR = srq.SRQ, 0
	}
	qp, err := pd.dev.NIC.CreateQP(pd.pd, t)
	if err != nil {
		return nil, err
	}
	qp.Owner = owner
	return &QP{QP: qp, dev: pd.dev}, nil
}

// CreateSharedQP creates a QP whose work requests a client posts to sq
// and rq, memory it shares: slots of the sizes uverbs.SendSlotSize and
// RecvSlotSize give for the QP's capabilities.
func (pd *PD) CreateSharedQP(init ibv.QPInit, sq, rq *uverbs.Ring, av func(h uint32) *ibv.AH, owner any) (ibv.QPOps, error) {
	c := init.Cap
	if sq == nil || rq == nil || int(sq.Slots()) < c.MaxSendWR || int(rq.Slots()) < c.MaxRecvWR ||
		sq.SlotSize() < uverbs.SendSlotSize(c.MaxSendSGE, c.MaxInlineData) || rq.SlotSize() < uverbs.RecvSlotSize(max(c.MaxRecvSGE, 1)) {
		return nil, fmt.Errorf("verbs: shared rings too small for %+v: %w", c, ibv.ErrInvalid)
	}
	qp, err := pd.createQP(init, owner)
	if err != nil {
		return nil, err
	}
	if err := pd.dev.ShareQP(qp.QP, sharedring.NewQP(sq, rq, av)); err != nil {
		return nil, errors.Join(err, qp.Destroy())
	}
	return qp, nil
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr ibv.SRQInitAttr, owner any) (ibv.SRQOps, error) {
	return pd.createSRQ(attr, owner), nil
}

func (pd *PD) createSRQ(attr ibv.SRQInitAttr, owner any) *SRQ {
	s := pd.dev.NIC.CreateSRQ(pd.pd, attr)
	s.Owner = owner
	return &SRQ{SRQ: s, dev: pd.dev}
}

// CreateSharedSRQ creates an SRQ whose receive work requests a client
// posts to ring (receive slots for attr.MaxSGE, at least attr.MaxWR of
// them). It cannot grow past the ring.
func (pd *PD) CreateSharedSRQ(attr ibv.SRQInitAttr, ring *uverbs.Ring, owner any) (ibv.SRQOps, error) {
	if ring == nil || int(ring.Slots()) < attr.MaxWR || ring.SlotSize() < uverbs.RecvSlotSize(max(attr.MaxSGE, 1)) {
		return nil, fmt.Errorf("verbs: shared ring too small for SRQ %+v: %w", attr, ibv.ErrInvalid)
	}
	s := pd.createSRQ(attr, owner)
	if err := pd.dev.ShareSRQ(s.SRQ, sharedring.NewSRQ(ring)); err != nil {
		return nil, errors.Join(err, s.Destroy())
	}
	return s, nil
}

// QP is a queue pair: transport's (embedded), whose work requests it
// translates.
type QP struct {
	*queue.QP
	dev *Device
}

// Handle is 0: an in-process QP has no daemon's handle.
func (qp *QP) Handle() uint32 { return 0 }

// Destroy removes the QP from the engines.
func (qp *QP) Destroy() error { return qp.dev.DestroyQP(qp.QP) }

// Query returns the QP's attributes.
func (qp *QP) Query() (ibv.QPAttr, error) { return qp.dev.QueryQP(qp.QP) }

// AttachMcast attaches the QP to the group gid on the engines.
func (qp *QP) AttachMcast(gid netip.Addr, _ uint16) error { return qp.dev.AttachMcast(qp.QP, gid) }

// DetachMcast detaches the QP from the group gid.
func (qp *QP) DetachMcast(gid netip.Addr, _ uint16) error { return qp.dev.DetachMcast(qp.QP, gid) }

// Modify resolves the next hop's MAC address when the path changes, then
// applies the change on the engines.
func (qp *QP) Modify(attr ibv.QPAttr, mask ibv.AttrMask, check func(cur ibv.QPState, draining bool) error) error {
	var dmac net.HardwareAddr
	if mask&ibv.AttrAV != 0 {
		var err error
		if dmac, err = qp.dev.resolveAV(&attr.AH); err != nil {
			return err
		}
	}
	return qp.dev.ModifyQP(qp.QP, attr, mask, dmac, check)
}

// PostSend queues send work requests (transport's PostSend checks them).
func (qp *QP) PostSend(wrs []ibv.SendWR) (int, error) {
	// Converted one at a time as they are queued: a post of any length
	// needs no heap.
	return qp.QP.PostSendWith(len(wrs), func(i int, w *queue.WR) { *w = wrOf(&wrs[i]) })
}

// wrOf is wr as the engines take it: its address handle's vector and its
// bind's window and region the engines' own, a private copy of the bind,
// and whether any of them is destroyed or another device's (which the
// provider's check refuses, as it would refuse their pointers).
func wrOf(wr *ibv.SendWR) queue.WR {
	w := queue.WR{ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, SGList: wr.SGList, ImmData: wr.ImmData, InvRKey: wr.InvRKey,
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap, RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey,
		AHBad: wr.AHBad}
	if wr.AH != nil {
		w.AH = wr.AH.Attr()
	}
	if b := wr.Bind; b != nil {
		c := &queue.Bind{RKey: b.RKey, Addr: b.Addr, Length: b.Length, Access: b.Access, Foreign: b.Foreign}
		if b.MW != nil {
			if mw, ok := b.MW.(*MW); ok {
				c.MW = mw.MW
			} else {
				c.MW, c.Foreign = &transport.MW{}, true // a daemon's: refused, as Foreign says
			}
		}
		if b.MR != nil {
			if mr, ok := b.MR.(*MR); ok {
				c.MR = mr.MR
			} else {
				c.Foreign = true
			}
		}
		w.Bind = c
	}
	return w
}

// SRQ is a shared receive queue: transport's (embedded); the NIC destroys
// it.
type SRQ struct {
	*queue.SRQ
	dev *Device
}

// Destroy releases the SRQ; EBUSY while QPs use it.
func (s *SRQ) Destroy() error { return s.dev.DestroySRQ(s.SRQ) }

// The provider's objects.
var (
	_ ibv.QPOps  = (*QP)(nil)
	_ ibv.CQOps  = (*CQ)(nil)
	_ ibv.SRQOps = (*SRQ)(nil)
	_ ibv.MROps  = (*MR)(nil)
	_ ibv.MWOps  = (*MW)(nil)
	_ ibv.AHOps  = (*AH)(nil)
	_ ibv.PDOps  = (*PD)(nil)
)
