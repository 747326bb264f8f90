package verbs

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
	"github.com/xdproce/xdproce/internal/transport"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// A client's side of the xdproce daemon (package daemon): a Device whose
// objects live in the daemon, driven through the same API. Control
// operations are requests on the daemon's socket; posts and polls are
// operations on rings the daemon shares, with no system call unless the
// engine serving the QP sleeps.

// attachment is a Device's connection to its daemon.
type attachment struct {
	conn *ipc.Conn
	info uverbs.DeviceInfo
	page *ipc.Mapping  // the doorbell page
	bell *ipc.Signaler // this client's own doorbell, rung when a QP's engine sleeps
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

type attachedQP struct {
	h        uint32
	sq, rq   *uverbs.Ring
	maps     [2]*ipc.Mapping
	sendMu   sync.Mutex
	recvMu   sync.Mutex
	sqp, rqp uint32 // producer indices
}

type attachedMR struct {
	h uint32
	m *ipc.Mapping
}

// Dial attaches to the xdproce daemon serving the interface ifname in the
// calling thread's network namespace (xdproce up) and returns it as a
// Device: the same API as Open's, with the objects in the daemon, shared
// with its other clients' but never reachable by them. Close detaches; the
// daemon then destroys everything the Device created.
func Dial(ctx context.Context, ifname string) (*Device, error) {
	conn, err := ipc.Dial(ctx, ifname)
	if err != nil {
		return nil, err
	}
	r := &attachment{conn: conn, mrs: map[uint32]*MR{}, qps: map[uint32]*QP{}, cqs: map[uint32]*CQ{}, srqs: map[uint32]*SRQ{}}
	var fds []int
	// HELLO is bounded by ctx too: a server that never answers does not
	// hold the caller.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	r.info, fds, err = conn.Hello()
	if !stop() {
		if err == nil {
			ipc.CloseAll(fds)
		}
		err = errors.Join(ctx.Err(), err)
	}
	if err == nil {
		r.bell, r.events = ipc.SignalerOf(fds[1]), ipc.WaiterOf(fds[2])
		if r.page, err = ipc.MapSharedReadOnly(fds[0], uverbs.DoorbellPageSize); err != nil {
			r.bell.Close()
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
	cfg := DeviceConfig{MAC: net.HardwareAddr(r.info.MAC[:]), ActiveMTU: MTU(r.info.ActiveMTU).Bytes(), DataPath: r.info.DataPath}
	for _, g := range r.info.GIDs {
		cfg.GIDs = append(cfg.GIDs, netip.AddrFrom16(g).Unmap()) // IPv4 GIDs as Open gives them
	}
	dev := &Device{cfg: cfg, att: r}
	var wctx context.Context
	wctx, r.stop = context.WithCancel(context.Background())
	go r.watch(wctx, peer.PID)
	return dev, nil
}

// watch waits for the daemon's process to end: the device is then gone, as
// a removed RNIC (IBV_EVENT_DEVICE_FATAL); posts fail. A waiter on the
// events or on a completion channel wakes by itself: the daemon's ends of
// their pipes closed with it.
func (r *attachment) watch(ctx context.Context, pid int) {
	if ipc.WaitExit(ctx, pid) != nil {
		return // detached first
	}
	r.dead.Store(true)
}

// ErrDeviceFatal is what posting to a device whose daemon died returns.
var ErrDeviceFatal = syscall.EIO

// getEvent is GetAsyncEvent for a daemon's device.
func (r *attachment) getEvent(ctx context.Context) (AsyncEvent, error) {
	for {
		if r.dead.Load() {
			return AsyncEvent{Type: EventDeviceFatal}, nil
		}
		d, err := r.callNoFDs(uverbs.OpGetEvent, nil)
		if err == nil {
			var ev uverbs.Event
			ev.Get(d)
			if err := d.End(); err != nil {
				return AsyncEvent{}, err
			}
			out := AsyncEvent{Type: AsyncEventType(ev.Type)}
			r.objMu.Lock()
			switch ev.Kind {
			case uverbs.EventQP:
				out.QP = r.qps[ev.Handle]
			case uverbs.EventCQ:
				out.CQ = r.cqs[ev.Handle]
			case uverbs.EventSRQ:
				out.SRQ = r.srqs[ev.Handle]
			}
			r.objMu.Unlock()
			return out, nil
		}
		if !errors.Is(err, syscall.EAGAIN) {
			if r.dead.Load() {
				return AsyncEvent{Type: EventDeviceFatal}, nil
			}
			return AsyncEvent{}, err
		}
		if err := r.events.Wait(ctx); errors.Is(err, ipc.ErrHangup) {
			r.dead.Store(true) // the daemon dropped the session, or died
		} else if err != nil {
			return AsyncEvent{}, err
		}
	}
}

// Attached reports whether the device is a daemon's, attached with Dial.
func (d *Device) Attached() bool { return d.att != nil }

// Control sends a request of a package layered on verbs (rdmacm's CM_*
// requests) to the daemon of a device attached with Dial, in this device's
// session (so it may name the device's objects): the reply's body and fds,
// which are the caller's. ErrNotSup for an in-process device.
func (d *Device) Control(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int, error) {
	if d.att == nil {
		return nil, nil, fmt.Errorf("verbs: %v on an in-process device: %w", op, ErrNotSup)
	}
	return d.att.call(op, body)
}

// Handle is the daemon's handle of a QP of a device attached with Dial, as
// Control's requests name it; 0 for an in-process QP.
func (qp *QP) Handle() uint32 {
	if qp.att == nil {
		return 0
	}
	return qp.att.h
}

// call sends one request and returns its reply's body and fds.
func (r *attachment) call(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, []int, error) {
	d, got, err := r.conn.Call(op, body, fds...)
	if err != nil {
		r.noteGone(err)
		return nil, nil, fmt.Errorf("verbs: daemon: %w", err)
	}
	return d, got, nil
}

// noteGone marks the device dead when err says the daemon hung up (a
// waiter on the events wakes as the daemon closes its end).
func (r *attachment) noteGone(err error) {
	if ipc.IsClosed(err) {
		r.dead.Store(true)
	}
}

// callNoFDs is call for replies that carry no fds.
func (r *attachment) callNoFDs(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (*uverbs.Decoder, error) {
	d, err := r.conn.CallNoFDs(op, body, fds...)
	if err != nil {
		r.noteGone(err)
		return nil, fmt.Errorf("verbs: daemon: %w", err)
	}
	return d, nil
}

// close hangs up. The doorbell page stays mapped for a post racing it.
func (r *attachment) close() error {
	r.stop()
	err := r.conn.Close()
	r.bell.Close()
	r.events.Close()
	// The CQs' pipes too (a waiter on one returns): the rings stay mapped
	// for a poll racing it.
	r.objMu.Lock()
	for _, cq := range r.cqs {
		cq.att.notify.Close()
	}
	r.objMu.Unlock()
	return err
}

func (r *attachment) allocPD() (uint32, error) {
	d, err := r.callNoFDs(uverbs.OpAllocPD, nil)
	if err != nil {
		return 0, err
	}
	h := d.U32()
	return h, d.End()
}

// allocMR registers n bytes of memory shared with the daemon (a sealed
// memfd both map): the engines reach it without a copy or system call.
func (pd *PD) allocAttachedMR(n int, access Access) (*MR, error) {
	r := pd.dev.att
	m, err := ipc.NewMapping("mr", n)
	if err != nil {
		return nil, err
	}
	buf := m.Mem[:n]
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	d, err := r.callNoFDs(uverbs.OpRegMR, func(e *uverbs.Encoder) {
		e.U32(pd.id)
		e.U64(addr)
		e.U64(uint64(n))
		e.U32(uint32(access))
		e.U64(addr)
	}, m.FD)
	m.CloseFD()
	var mr *MR
	if err == nil {
		mr = &MR{pd: pd, buf: buf, length: uint64(n), addr: addr, access: access, att: &attachedMR{m: m}}
		mr.att.h, mr.lkey, mr.rkey = d.U32(), d.U32(), d.U32()
		err = d.End()
	}
	if err != nil {
		m.Unmap()
		return nil, err
	}
	r.mrMu.Lock()
	r.mrs[mr.lkey] = mr
	r.mrMu.Unlock()
	return mr, nil
}

func (m *MR) deregAttached() error {
	r := m.pd.dev.att
	if _, err := r.callNoFDs(uverbs.OpDeregMR, func(e *uverbs.Encoder) { e.U32(m.att.h) }); err != nil {
		return err
	}
	r.mrMu.Lock()
	delete(r.mrs, m.lkey)
	r.mrMu.Unlock()
	if m.att.m == nil {
		return nil // the application's own memory
	}
	return m.att.m.Unmap()
}

func (d *Device) createAttachedCQ(depth int) (*CQ, error) {
	r := d.att
	dec, fds, err := r.call(uverbs.OpCreateCQ, func(e *uverbs.Encoder) { e.U32(uint32(depth)) })
	if err != nil {
		return nil, err
	}
	if len(fds) != 2 {
		ipc.CloseAll(fds)
		return nil, fmt.Errorf("verbs: CREATE_CQ reply carried %d fds, 2 expected", len(fds))
	}
	h, slots := dec.U32(), dec.U32()
	rc := &attachedCQ{h: h, notify: ipc.WaiterOf(fds[1])}
	var ring *uverbs.Ring
	if err = dec.End(); err == nil {
		rc.m, ring, err = ipc.MapRing(fds[0], slots, uverbs.CQESize)
	} else {
		ipc.CloseAll(fds[:1])
	}
	if err != nil {
		rc.notify.Close()
		return nil, err
	}
	rc.ring = ring
	cq := &CQ{dev: d, depth: depth, att: rc}
	r.objMu.Lock()
	r.cqs[h] = cq
	r.objMu.Unlock()
	return cq, nil
}

// pollAttached reads completions from a daemon's CQ ring.
func (cq *CQ) pollAttached(wcs []WorkCompletion) int {
	q := cq.att
	r := q.ring
	if r.Producer() == uint32(q.head.Load()) {
		return 0 // an empty poll: two loads, no lock, no store to the shared line
	}
	q.pollMu.Lock()
	defer q.pollMu.Unlock()
	h := uint32(q.head.Load())
	k := min(uint32(len(wcs)), r.Producer()-h, r.Slots())
	var c uverbs.CQE
	for i := range k {
		uverbs.CQEOf(r.Slot(h+i), &c)
		wcs[i] = WorkCompletion{WRID: c.WRID, Status: WCStatus(c.Status), Opcode: WCOpcode(c.Opcode), VendorErr: c.VendorErr,
			ByteLen: c.ByteLen, ImmData: c.Imm, InvalidatedKey: c.InvalidatedKey, QPNum: c.QPNum, SrcQP: c.SrcQP, Flags: WCFlags(c.WCFlags)}
	}
	q.head.Store(uint64(h + k))
	r.SetConsumer(h + k)
	return int(k)
}

// checkQPRings checks a CREATE_QP reply's rings against what it granted,
// as the daemon's word is not trusted: slots that hold their header, as
// many as the depths granted, and no more SGEs than a work request carries.
func checkQPRings(rep *uverbs.QPCreated) error {
	c := &rep.Cap
	if rep.SendSlotSize < uverbs.SendSlotHeader || rep.RecvSlotSize < uverbs.RecvSlotHeader || c.MaxSendWR > rep.SendSlots ||
		c.MaxRecvWR > rep.RecvSlots || c.MaxSendSGE > MaxSGE || c.MaxRecvSGE > MaxSGE {
		return fmt.Errorf("verbs: CREATE_QP granted %+v in send slots %d×%d, receive slots %d×%d: %w", *c, rep.SendSlots, rep.SendSlotSize,
			rep.RecvSlots, rep.RecvSlotSize, uverbs.ErrMalformed)
	}
	return nil
}

func (pd *PD) createAttachedQP(attr QPInitAttr) (*QP, error) {
	r := pd.dev.att
	var srq uint32
	if attr.SRQ != nil {
		if attr.SRQ.dev != pd.dev {
			return nil, fmt.Errorf("verbs: the SRQ belongs to another device: %w", ErrInvalid)
		}
		srq = attr.SRQ.att.h
	}
	if attr.SendCQ == nil || attr.RecvCQ == nil || attr.SendCQ.dev != pd.dev || attr.RecvCQ.dev != pd.dev {
		return nil, fmt.Errorf("verbs: a QP needs a send and a receive CQ of its device: %w", ErrInvalid)
	}
	req := uverbs.CreateQP{PD: pd.id, SendCQ: attr.SendCQ.att.h, RecvCQ: attr.RecvCQ.att.h, SRQ: srq, Type: uint8(attr.Type), SigAll: attr.SigAll,
		Cap: uverbs.QPCap{MaxSendWR: uint32(attr.Cap.MaxSendWR), MaxRecvWR: uint32(attr.Cap.MaxRecvWR), MaxSendSGE: uint32(attr.Cap.MaxSendSGE),
			MaxRecvSGE: uint32(attr.Cap.MaxRecvSGE), MaxInlineData: uint32(attr.Cap.MaxInlineData)}}
	if attr.Cap.MaxSendWR < 0 || attr.Cap.MaxRecvWR < 0 || attr.Cap.MaxSendSGE < 0 || attr.Cap.MaxRecvSGE < 0 || attr.Cap.MaxInlineData < 0 {
		return nil, fmt.Errorf("verbs: QP capabilities %+v: %w", attr.Cap, ErrInvalid)
	}
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
	rq := &attachedQP{h: rep.QP}
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
		if rq.maps[i], ring, err = ipc.MapRing(fd, slots, int(size)); err != nil {
			continue
		}
		if i == 0 {
			rq.sq = ring
		} else {
			rq.rq = ring
		}
	}
	qp := &QP{dev: pd.dev, pd: pd, qpn: rep.QPN, typ: attr.Type, scq: attr.SendCQ, rcq: attr.RecvCQ, sigAll: attr.SigAll, srq: attr.SRQ, att: rq,
		cap: QPCap{MaxSendWR: int(rep.Cap.MaxSendWR), MaxRecvWR: int(rep.Cap.MaxRecvWR), MaxSendSGE: int(rep.Cap.MaxSendSGE),
			MaxRecvSGE: int(rep.Cap.MaxRecvSGE), MaxInlineData: int(rep.Cap.MaxInlineData)}}
	if err != nil {
		return nil, errors.Join(err, qp.destroyAttached())
	}
	r.objMu.Lock()
	r.qps[rq.h] = qp
	r.objMu.Unlock()
	return qp, nil
}

func (qp *QP) destroyAttached() error {
	r := qp.dev.att
	_, err := r.callNoFDs(uverbs.OpDestroyQP, func(e *uverbs.Encoder) { e.U32(qp.att.h) })
	if err != nil {
		return err
	}
	r.objMu.Lock()
	delete(r.qps, qp.att.h)
	r.objMu.Unlock()
	for _, m := range qp.att.maps {
		if m != nil {
			m.Unmap()
		}
	}
	return nil
}

func (qp *QP) modifyAttached(attr QPAttr, mask AttrMask) error {
	w := attr.Wire()
	_, err := qp.dev.att.callNoFDs(uverbs.OpModifyQP, func(e *uverbs.Encoder) {
		e.U32(qp.att.h)
		e.U32(uint32(mask))
		w.Put(e)
	})
	return err
}

func (qp *QP) queryAttached() (QPAttr, error) {
	d, err := qp.dev.att.callNoFDs(uverbs.OpQueryQP, func(e *uverbs.Encoder) { e.U32(qp.att.h) })
	if err != nil {
		return QPAttr{}, err
	}
	var w uverbs.QPAttr
	w.Get(d)
	if err := d.End(); err != nil {
		return QPAttr{}, err
	}
	return QPAttrFromWire(&w), nil
}

// postSendAttached writes send work requests to the QP's ring, checked as
// PostSend checks them: the daemon takes each as if posted in-process.
func (qp *QP) postSendAttached(wrs []SendWR) (int, error) {
	if qp.dev.att.dead.Load() {
		return 0, fmt.Errorf("verbs: the daemon is gone: %w", ErrDeviceFatal)
	}
	st := qp.State()
	if st == StateReset || st == StateInit || st == StateRTR {
		return 0, fmt.Errorf("verbs: post send in state %v: %w", st, ErrInvalid)
	}
	q := qp.att
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	var sgl [MaxSGE]uverbs.SGE
	posted := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		tw := qp.wrOf(wr)
		if err = transport.CheckSendWR(&tw, qp.typ, qp.cap, qp.dev.cfg.ActiveMTU); err != nil {
			break
		}
		if q.sqp-q.sq.Consumer() >= uint32(qp.cap.MaxSendWR) {
			err = fmt.Errorf("verbs: send queue full (%d WRs): %w", qp.cap.MaxSendWR, ErrNoMem)
			break
		}
		w := uverbs.SendWQE{WRID: wr.ID, Opcode: uint8(wr.Opcode), SendFlags: uint8(wr.Flags), Imm: wr.ImmData, RemoteAddr: wr.RemoteAddr,
			RKey: wr.RKey, InvRKey: wr.InvRKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap, RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey}
		if wr.AH != nil {
			w.AH = wr.AH.att.h // checkSendWR: an address handle of this (attached) device
		}
		slot := q.sq.Slot(q.sqp)
		if wr.Opcode == WRBindMW {
			b := wr.Bind
			w.InvRKey, w.RKey, w.RemoteAddr = b.MW.RKey(), b.RKey, b.Addr
			var lkey uint32
			if b.MR != nil {
				lkey = b.MR.LKey()
			}
			w.SetBind(b.Length, uint32(b.Access), lkey)
			uverbs.PutSendWQE(slot, &w, nil, nil)
			// The window's key once the bind is done, as the daemon will
			// have it (a failed bind completes with MW_BIND_ERR).
			b.MW.att.rkey.Store(b.MW.RKey()&^0xff | b.RKey&0xff)
		} else if wr.Flags&SendInline != 0 {
			err = qp.dev.att.putInline(slot, &w, wr)
		} else {
			for j, s := range wr.SGList {
				sgl[j] = uverbs.SGE(s)
			}
			if !uverbs.PutSendWQE(slot, &w, sgl[:len(wr.SGList)], nil) {
				err = fmt.Errorf("verbs: send WR %d does not fit its slot: %w", wr.ID, ErrInvalid)
			}
		}
		if err != nil {
			break
		}
		q.sqp++
		posted++
	}
	if posted > 0 {
		q.sq.SetProducer(q.sqp)
		qp.dev.att.ring(q.sq)
	}
	return posted, err
}

// putInline copies an INLINE request's data into its slot, from the
// regions its SGEs name, as PostSend does in-process.
func (r *attachment) putInline(slot []byte, w *uverbs.SendWQE, wr *SendWR) error {
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
			return fmt.Errorf("verbs: inline send WR %d: bad lkey %#x or SGE: %w", wr.ID, s.LKey, ErrInvalid)
		}
		data = append(data, b...)
	}
	if !uverbs.PutSendWQE(slot, w, nil, data) {
		return fmt.Errorf("verbs: inline send WR %d does not fit its slot: %w", wr.ID, ErrInvalid)
	}
	return nil
}

func (qp *QP) postRecvAttached(wrs []RecvWR) (int, error) {
	if qp.dev.att.dead.Load() {
		return 0, fmt.Errorf("verbs: the daemon is gone: %w", ErrDeviceFatal)
	}
	if qp.srq != nil {
		return 0, fmt.Errorf("verbs: the QP receives from an SRQ; post there: %w", ErrInvalid)
	}
	if st := qp.State(); st == StateReset {
		return 0, fmt.Errorf("verbs: post receive in state %v: %w", st, ErrInvalid)
	}
	q := qp.att
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	posted, err := postToRecvRing(q.rq, &q.rqp, qp.cap.MaxRecvWR, qp.cap.MaxRecvSGE, "QP", wrs)
	if posted > 0 {
		q.rq.SetProducer(q.rqp)
		qp.dev.att.ring(q.sq)
	}
	return posted, err
}

// postToRecvRing writes receive work requests to a receive ring (a QP's or
// an SRQ's of what) after *prod, checked as PostRecv checks them, and
// returns how many it wrote; the caller publishes them.
func postToRecvRing(ring *uverbs.Ring, prod *uint32, maxWR, maxSGE int, what string, wrs []RecvWR) (int, error) {
	var sgl [MaxSGE]uverbs.SGE
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGList) > maxSGE {
			return i, fmt.Errorf("verbs: receive WR %d: %d SGEs, the %s allows %d: %w", wr.ID, len(wr.SGList), what, maxSGE, ErrInvalid)
		}
		if *prod-ring.Consumer() >= uint32(maxWR) {
			return i, fmt.Errorf("verbs: the %s's receive queue is full (%d WRs): %w", what, maxWR, ErrNoMem)
		}
		for j, s := range wr.SGList {
			sgl[j] = uverbs.SGE(s)
		}
		uverbs.PutRecvWQE(ring.Slot(*prod), wr.ID, sgl[:len(wr.SGList)])
		*prod++
	}
	return len(wrs), nil
}

// ring wakes the engine serving a QP (named in its send ring) if it sleeps.
func (r *attachment) ring(sq *uverbs.Ring) {
	if uverbs.Sleeping(r.page.Mem, sq.Aux2().Load()) {
		r.bell.Signal()
	}
}

func (r *attachment) counters() (Counters, error) {
	transport, _, err := r.allCounters()
	var c Counters
	for _, n := range transport {
		c.Set(n.Name, n.Value)
	}
	return c, err
}

func (r *attachment) portCounters() ([]NamedCounter, error) {
	_, port, err := r.allCounters()
	var out []NamedCounter
	for _, n := range port {
		out = append(out, NamedCounter(n))
	}
	return out, err
}

// allCounters asks for the transport's counters and the port's.
func (r *attachment) allCounters() (transport, port []uverbs.Counter, err error) {
	d, err := r.callNoFDs(uverbs.OpCounters, nil)
	if err != nil {
		return nil, nil, err
	}
	transport = uverbs.GetCounters(d)
	port = uverbs.GetCounters(d)
	return transport, port, d.End()
}

// QPAttrFromWire is the attribute set a MODIFY_QP or QUERY_QP message carries.
func QPAttrFromWire(w *uverbs.QPAttr) QPAttr {
	a := QPAttr{State: QPState(w.State), CurState: QPState(w.CurState), AccessFlags: Access(w.AccessFlags), PKeyIndex: w.PKeyIndex,
		Port: w.Port, QKey: w.QKey, PathMTU: MTU(w.PathMTU), Timeout: w.Timeout, RetryCnt: w.RetryCnt, RNRRetry: w.RNRRetry,
		RQPSN: w.RQPSN, SQPSN: w.SQPSN, MaxRdAtomic: w.MaxRdAtomic, MaxDestRdAtomic: w.MaxDestRdAtomic, MinRNRTimer: w.MinRNR,
		DestQPN: w.DestQPN, EnSQDAsyncNotify: w.EnSQDAsyncNotify, SQDraining: w.SQDraining,
		AH: AH{DGID: netip.AddrFrom16(w.DGID), SGIDIndex: int(w.SGIDIndex), HopLimit: w.HopLimit, TrafficClass: w.TrafficClass,
			FlowLabel: w.FlowLabel},
		Cap: QPCap{MaxSendWR: int(w.Cap.MaxSendWR), MaxRecvWR: int(w.Cap.MaxRecvWR), MaxSendSGE: int(w.Cap.MaxSendSGE),
			MaxRecvSGE: int(w.Cap.MaxRecvSGE), MaxInlineData: int(w.Cap.MaxInlineData)}}
	if w.DGID == ([16]byte{}) {
		a.AH.DGID = netip.Addr{} // none given
	}
	if len(w.DMAC) == 6 {
		a.AH.DMAC = net.HardwareAddr(append([]byte(nil), w.DMAC...))
	}
	return a
}

// closeAttached detaches from the daemon, which destroys the device's
// objects. The regions' memory stays mapped: slices of it stay valid.
func (d *Device) closeAttached() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.closing.Store(true)
	return d.att.close()
}

// StopDaemon asks the daemon the device is attached to to stop (xdproce
// down), and waits until its process has exited (its XDP program and UDP
// port released) or ctx ends. Only root and the daemon's own user may.
func (d *Device) StopDaemon(ctx context.Context) error {
	if d.att == nil {
		return fmt.Errorf("verbs: the device is not a daemon's: %w", ErrInvalid)
	}
	peer, err := d.att.conn.Peer()
	if err != nil {
		return err
	}
	if _, err := d.att.callNoFDs(uverbs.OpShutdown, nil); err != nil {
		return err
	}
	d.Close()
	return ipc.WaitExit(ctx, peer.PID)
}

type attachedSRQ struct {
	h    uint32
	ring *uverbs.Ring
	m    *ipc.Mapping
	mu   sync.Mutex
	prod uint32
	attr SRQAttr // as last created, modified or queried
}

func (pd *PD) createAttachedSRQ(attr SRQInitAttr) (*SRQ, error) {
	r := pd.dev.att
	a := uverbs.SRQAttr{MaxWR: uint32(attr.MaxWR), MaxSGE: uint32(attr.MaxSGE), Limit: uint32(attr.Limit)}
	d, fds, err := r.call(uverbs.OpCreateSRQ, func(e *uverbs.Encoder) {
		e.U32(pd.id)
		a.Put(e)
	})
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		ipc.CloseAll(fds)
		return nil, fmt.Errorf("verbs: CREATE_SRQ reply carried %d fds, 1 expected", len(fds))
	}
	rs := &attachedSRQ{h: d.U32()}
	a.Get(d)
	slots, size := d.U32(), d.U32()
	if err = d.End(); err == nil && (size < uverbs.RecvSlotHeader || a.MaxWR > slots || a.MaxSGE > MaxSGE) {
		err = fmt.Errorf("verbs: CREATE_SRQ granted %d WRs of %d SGEs in %d slots of %d bytes: %w", a.MaxWR, a.MaxSGE, slots, size, uverbs.ErrMalformed)
	}
	if err != nil {
		ipc.CloseAll(fds)
	} else {
		rs.m, rs.ring, err = ipc.MapRing(fds[0], slots, int(size))
	}
	s := &SRQ{dev: pd.dev, pd: pd, att: rs}
	rs.attr = SRQAttr{MaxWR: int(a.MaxWR), MaxSGE: int(a.MaxSGE), Limit: int(a.Limit)}
	if err != nil {
		return nil, errors.Join(err, s.destroyAttached())
	}
	r.objMu.Lock()
	r.srqs[rs.h] = s
	r.objMu.Unlock()
	return s, nil
}

func (s *SRQ) postRecvAttached(wrs []RecvWR) (int, error) {
	r := s.dev.att
	if r.dead.Load() {
		return 0, fmt.Errorf("verbs: the daemon is gone: %w", ErrDeviceFatal)
	}
	q := s.att
	q.mu.Lock()
	defer q.mu.Unlock()
	posted, err := postToRecvRing(q.ring, &q.prod, q.attr.MaxWR, q.attr.MaxSGE, "SRQ", wrs)
	if posted > 0 {
		q.ring.SetProducer(q.prod)
		r.ring(q.ring) // aux2 0: engine 0 takes SRQ posts
	}
	return posted, err
}

func (s *SRQ) modifyAttached(attr SRQAttr, mask SRQAttrMask) error {
	q := s.att
	a := uverbs.SRQAttr{MaxWR: uint32(attr.MaxWR), MaxSGE: uint32(attr.MaxSGE), Limit: uint32(attr.Limit)}
	if _, err := s.dev.att.callNoFDs(uverbs.OpModifySRQ, func(e *uverbs.Encoder) {
		e.U32(q.h)
		e.U32(uint32(mask))
		a.Put(e)
	}); err != nil {
		return err
	}
	q.mu.Lock()
	if mask&SRQAttrMaxWR != 0 {
		q.attr.MaxWR = attr.MaxWR
	}
	if mask&SRQAttrLimit != 0 {
		q.attr.Limit = attr.Limit
	}
	q.mu.Unlock()
	return nil
}

func (s *SRQ) queryAttached() SRQAttr {
	q := s.att
	d, err := s.dev.att.callNoFDs(uverbs.OpQuerySRQ, func(e *uverbs.Encoder) { e.U32(q.h) })
	q.mu.Lock()
	defer q.mu.Unlock()
	if err == nil {
		var a uverbs.SRQAttr
		a.Get(d)
		if d.End() == nil {
			q.attr = SRQAttr{MaxWR: int(a.MaxWR), MaxSGE: int(a.MaxSGE), Limit: int(a.Limit)}
		}
	}
	return q.attr
}

func (s *SRQ) destroyAttached() error {
	r := s.dev.att
	if _, err := r.callNoFDs(uverbs.OpDestroySRQ, func(e *uverbs.Encoder) { e.U32(s.att.h) }); err != nil {
		return err
	}
	r.objMu.Lock()
	delete(r.srqs, s.att.h)
	r.objMu.Unlock()
	if s.att.m != nil {
		return s.att.m.Unmap()
	}
	return nil
}

type attachedMW struct {
	h    uint32
	rkey atomic.Uint32 // as the daemon will have it once the binds posted are done
}

func (pd *PD) allocAttachedMW(typ MWType) (*MW, error) {
	d, err := pd.dev.att.callNoFDs(uverbs.OpAllocMW, func(e *uverbs.Encoder) {
		e.U32(pd.id)
		e.U8(uint8(typ))
	})
	if err != nil {
		return nil, err
	}
	mw := &MW{pd: pd, typ: typ, att: &attachedMW{h: d.U32()}}
	mw.att.rkey.Store(d.U32())
	return mw, d.End()
}

func (mw *MW) deallocAttached() error {
	_, err := mw.pd.dev.att.callNoFDs(uverbs.OpDeallocMW, func(e *uverbs.Encoder) { e.U32(mw.att.h) })
	return err
}

// regAttachedMR registers memory the application already has: the daemon
// copies to and from it with process_vm_readv/writev, at iova for SGEs and
// peers.
func (pd *PD) regAttachedMR(buf []byte, iova uint64, access Access) (*MR, error) {
	r := pd.dev.att
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	d, err := r.callNoFDs(uverbs.OpRegMR, func(e *uverbs.Encoder) {
		e.U32(pd.id)
		e.U64(addr)
		e.U64(uint64(len(buf)))
		e.U32(uint32(access))
		e.U64(iova)
	})
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, buf: buf, length: uint64(len(buf)), addr: iova, access: access, att: &attachedMR{}}
	mr.att.h, mr.lkey, mr.rkey = d.U32(), d.U32(), d.U32()
	if err := d.End(); err != nil {
		return nil, err
	}
	r.mrMu.Lock()
	r.mrs[mr.lkey] = mr
	r.mrMu.Unlock()
	return mr, nil
}
