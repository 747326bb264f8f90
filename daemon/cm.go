package daemon

import (
	"fmt"
	"syscall"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// The connection manager's requests: rdma_cm IDs and event channels of
// the device's rdmacm.Service, named by the session's handles, as
// librdmacm names the kernel's through ucma.

// cmChannel is a client's event channel: the service's queue and the write
// end of the pipe the daemon signals for each event it queues (never
// blocking: the CM posts events from its own goroutines).
type cmChannel struct {
	ch *rdmacm.EventChannel
	fd *ipc.Signaler
}

// cmState is a session's CM objects.
type cmState struct {
	channels map[uint32]*cmChannel
	ids      map[uint32]*rdmacm.ID
	handles  map[*rdmacm.ID]uint32
}

func (c *cmState) init() {
	c.channels, c.ids, c.handles = map[uint32]*cmChannel{}, map[uint32]*rdmacm.ID{}, map[*rdmacm.ID]uint32{}
}

// cmOp runs one CM request.
func (ss *session) cmOp(op uverbs.Op, d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	if ss.srv.cm == nil {
		return nil, syscall.ENOSYS
	}
	switch op {
	case uverbs.OpCMCreateChannel:
		return ss.cmCreateChannel(d, e)
	case uverbs.OpCMDestroyChannel:
		return nil, ss.cmDestroyChannel(d)
	case uverbs.OpCMCreateID:
		return nil, ss.cmCreateID(d, e)
	case uverbs.OpCMGetEvent:
		return nil, ss.cmGetEvent(d, e)
	}
	// The rest name an ID first.
	h := d.Ref()
	id := ss.cm.ids[h]
	if id == nil {
		return nil, syscall.EINVAL
	}
	switch op {
	case uverbs.OpCMDestroyID:
		return nil, ss.cmDestroyID(h, id, d)
	case uverbs.OpCMMigrateID:
		return nil, ss.cmMigrateID(id, d)
	case uverbs.OpCMBind:
		return nil, ss.cmBind(id, d)
	case uverbs.OpCMResolveAddr:
		return nil, ss.cmResolveAddr(id, d)
	case uverbs.OpCMResolveRoute:
		return nil, ss.cmResolveRoute(id, d)
	case uverbs.OpCMListen:
		return nil, ss.cmListen(id, d)
	case uverbs.OpCMAttachQP:
		return nil, ss.cmAttachQP(id, d)
	case uverbs.OpCMConnect:
		return nil, ss.cmConnect(id, d)
	case uverbs.OpCMAccept:
		return nil, ss.cmAccept(id, d)
	case uverbs.OpCMReject:
		return nil, ss.cmReject(id, d)
	case uverbs.OpCMDisconnect:
		return nil, ss.cmDisconnect(id, d)
	case uverbs.OpCMEstablish:
		return nil, ss.cmEstablish(id, d)
	case uverbs.OpCMQuery:
		return nil, ss.cmQuery(id, d, e)
	case uverbs.OpCMInitQPAttr:
		return nil, ss.cmInitQPAttr(id, d, e)
	case uverbs.OpCMSetOption:
		return nil, ss.cmSetOption(id, d)
	case uverbs.OpCMJoinMcast:
		return nil, ss.cmJoinMcast(id, d)
	case uverbs.OpCMLeaveMcast:
		return nil, ss.cmLeaveMcast(id, d)
	}
	return nil, fmt.Errorf("%w: unknown op %v", errProtocol, op)
}

// cmDestroyChannel closes a channel no ID of the client's uses (EBUSY
// while one does, as ucma).
func (ss *session) cmDestroyChannel(d *uverbs.Decoder) error {
	h, c, err := ss.cmChannelRef(d)
	if err != nil {
		return err
	}
	for _, id := range ss.cm.ids {
		if id.Channel() == c.ch {
			return syscall.EBUSY
		}
	}
	c.fd.Close()
	delete(ss.cm.channels, h)
	ss.acct.gave(objCMChannel)
	return nil
}

// cmCreateID creates an ID reporting to one of the client's channels.
func (ss *session) cmCreateID(d *uverbs.Decoder, e *uverbs.Encoder) error {
	var r uverbs.CMCreateID
	d.Get(&r)
	ch, ps := r.Channel, r.PortSpace
	if err := d.End(); err != nil {
		return err
	}
	c := ss.cm.channels[ch]
	if c == nil {
		return syscall.EINVAL
	}
	if err := ss.room(objCMID); err != nil {
		return err
	}
	id, err := ss.srv.cm.CreateID(c.ch, rdmacm.PortSpace(ps), nil)
	if err != nil {
		return err
	}
	e.Put(&uverbs.Ref{Handle: ss.cmAdopt(id)})
	return nil
}

// cmDestroyID destroys id, handle h: it is no longer the client's whatever
// Destroy says.
func (ss *session) cmDestroyID(h uint32, id *rdmacm.ID, d *uverbs.Decoder) error {
	if err := d.End(); err != nil {
		return err
	}
	delete(ss.cm.ids, h)
	delete(ss.cm.handles, id)
	ss.acct.gave(objCMID)
	return id.Destroy()
}

// cmMigrateID moves id's events to another of the client's channels.
func (ss *session) cmMigrateID(id *rdmacm.ID, d *uverbs.Decoder) error {
	_, c, err := ss.cmChannelRef(d)
	if err != nil {
		return err
	}
	return id.Migrate(c.ch)
}

// cmChannelRef reads a request body that names one of the client's
// channels and nothing else: EINVAL if it names none.
func (ss *session) cmChannelRef(d *uverbs.Decoder) (uint32, *cmChannel, error) {
	h := d.Ref()
	if err := d.End(); err != nil {
		return 0, nil, err
	}
	c := ss.cm.channels[h]
	if c == nil {
		return 0, nil, syscall.EINVAL
	}
	return h, c, nil
}

// cmBind binds id to an address, its port one the client may take.
func (ss *session) cmBind(id *rdmacm.ID, d *uverbs.Decoder) error {
	var a uverbs.CMAddr
	a.Get(d)
	if err := d.End(); err != nil {
		return err
	}
	ap, err := a.AddrPort()
	if err != nil {
		return err
	}
	if err := ss.bindPort(ap.Port()); err != nil {
		return err
	}
	return id.Bind(ap)
}

// cmResolveAddr starts resolving id's destination, within the client's
// share of resolutions in flight.
func (ss *session) cmResolveAddr(id *rdmacm.ID, d *uverbs.Decoder) error {
	var r uverbs.CMResolveAddr
	d.Get(&r)
	src, dst, ms := r.Src, r.Dst, r.TimeoutMS
	if err := d.End(); err != nil {
		return err
	}
	s, err := src.AddrPort()
	if err != nil {
		return err
	}
	t, err := dst.AddrPort()
	if err != nil {
		return err
	}
	if err := ss.bindPort(s.Port()); err != nil {
		return err
	}
	if err := ss.acct.mayResolve(); err != nil {
		return err
	}
	if err := id.ResolveAddr(s, t, ss.resolveTimeout(ms)); err != nil {
		return err
	}
	ss.acct.resolves(id)
	return nil
}

func (ss *session) cmResolveRoute(id *rdmacm.ID, d *uverbs.Decoder) error {
	var r uverbs.CMTimeout
	d.Get(&r)
	ms := r.TimeoutMS
	if err := d.End(); err != nil {
		return err
	}
	return id.ResolveRoute(ss.resolveTimeout(ms))
}

func (ss *session) cmListen(id *rdmacm.ID, d *uverbs.Decoder) error {
	var r uverbs.CMListen
	d.Get(&r)
	backlog := r.Backlog
	if err := d.End(); err != nil {
		return err
	}
	return id.Listen(int(min(backlog, 1<<16)))
}

// cmAttachQP gives id one of the client's QPs to connect.
func (ss *session) cmAttachQP(id *rdmacm.ID, d *uverbs.Decoder) error {
	qh := d.Ref()
	if err := d.End(); err != nil {
		return err
	}
	q := ss.qps[qh]
	if q == nil {
		return syscall.EINVAL
	}
	return id.AttachQP(q.qp)
}

func (ss *session) cmConnect(id *rdmacm.ID, d *uverbs.Decoder) error {
	cp, err := cmConnParam(d)
	if err != nil {
		return err
	}
	return id.Connect(cp)
}

func (ss *session) cmAccept(id *rdmacm.ID, d *uverbs.Decoder) error {
	cp, err := cmConnParam(d)
	if err != nil {
		return err
	}
	return id.Accept(&cp)
}

// cmConnParam decodes the connection parameters that end a CONNECT or an
// ACCEPT.
func cmConnParam(d *uverbs.Decoder) (rdmacm.ConnParam, error) {
	var p uverbs.CMConnParam
	p.Get(d)
	if err := d.End(); err != nil {
		return rdmacm.ConnParam{}, err
	}
	return rdmacm.ConnParam(p), nil
}

func (ss *session) cmReject(id *rdmacm.ID, d *uverbs.Decoder) error {
	var r uverbs.CMReject
	d.Get(&r)
	private := r.PrivateData
	if err := d.End(); err != nil {
		return err
	}
	return id.Reject(private)
}

func (ss *session) cmDisconnect(id *rdmacm.ID, d *uverbs.Decoder) error {
	if err := d.End(); err != nil {
		return err
	}
	return id.Disconnect()
}

func (ss *session) cmEstablish(id *rdmacm.ID, d *uverbs.Decoder) error {
	if err := d.End(); err != nil {
		return err
	}
	return id.Establish()
}

func (ss *session) cmQuery(id *rdmacm.ID, d *uverbs.Decoder, e *uverbs.Encoder) error {
	if err := d.End(); err != nil {
		return err
	}
	info := idInfo(id)
	info.Put(e)
	return nil
}

// cmInitQPAttr answers the QP attributes and mask that move id's QP to a
// state, as rdma_init_qp_attr.
func (ss *session) cmInitQPAttr(id *rdmacm.ID, d *uverbs.Decoder, e *uverbs.Encoder) error {
	var r uverbs.CMInitQPAttr
	d.Get(&r)
	state := r.State
	if err := d.End(); err != nil {
		return err
	}
	a, mask, err := id.InitQPAttr(verbs.QPState(state))
	if err != nil {
		return err
	}
	e.Put(&uverbs.CMQPAttr{Attr: a.Wire(), Mask: uint32(mask)})
	return nil
}

func (ss *session) cmSetOption(id *rdmacm.ID, d *uverbs.Decoder) error {
	var r uverbs.CMSetOption
	d.Get(&r)
	level, name, val := r.Level, r.Name, r.Value
	if err := d.End(); err != nil {
		return err
	}
	return id.SetOption(level, name, val)
}

// cmAdopt gives id a handle of the session's.
func (ss *session) cmAdopt(id *rdmacm.ID) uint32 {
	h := ss.handle32()
	ss.cm.ids[h] = id
	ss.cm.handles[id] = h
	ss.acct.took(objCMID)
	return h
}

func (ss *session) cmCreateChannel(d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	if err := d.End(); err != nil {
		return nil, err
	}
	if err := ss.room(objCMChannel); err != nil {
		return nil, err
	}
	fd, peer, err := ipc.NewSignalPipe()
	if err != nil {
		return nil, err
	}
	c := &cmChannel{ch: rdmacm.NewEventChannel(), fd: fd}
	c.ch.SetNotify(fd.Signal)
	h := ss.handle32()
	ss.cm.channels[h] = c
	ss.acct.took(objCMChannel)
	e.Put(&uverbs.Ref{Handle: h})
	return []int{peer}, nil
}

// cmGetEvent hands the client its channel's next event (EAGAIN if none).
// An ID the event brings (CONNECT_REQUEST's) becomes the client's; events
// of IDs the client destroyed meanwhile are skipped.
func (ss *session) cmGetEvent(d *uverbs.Decoder, e *uverbs.Encoder) error {
	_, c, err := ss.cmChannelRef(d)
	if err != nil {
		return err
	}
	for {
		ev, ok := c.ch.TryGet()
		if !ok {
			return syscall.EAGAIN
		}
		out := uverbs.CMEvent{Type: uint8(ev.Type), Status: int32(ev.Status), PortSpace: uint16(ev.ID.PortSpace()),
			Param: uverbs.CMConnParam(ev.Param)}
		if ev.Type == rdmacm.EventConnectRequest {
			lh, ok := ss.cm.handles[ev.Listen]
			if !ok || ss.room(objCMID) != nil {
				// The listener is gone, or the client holds its share of
				// IDs: refused, as ucma when it cannot take the request.
				ev.ID.Reject(nil)
				ev.ID.Destroy()
				continue
			}
			out.Listen, out.ID = lh, ss.cmAdopt(ev.ID)
		} else if id, ok := ss.cm.handles[ev.ID]; ok {
			out.ID = id
		} else {
			continue
		}
		if ev.ID.PortSpace() == rdmacm.PortSpaceUDP {
			if ev.Type == rdmacm.EventConnectRequest {
				out.Param.PrivateData = ev.UD.PrivateData
			} else {
				out.Param.PrivateData = ev.UD.PrivateData
				out.UDQPN, out.UDQKey = ev.UD.QPNum, ev.UD.QKey
				out.UDAH = uverbs.AHAttr{DGID: ev.UD.AH.DGID.As16(), SGIDIndex: uint8(ev.UD.AH.SGIDIndex),
					HopLimit: ev.UD.AH.HopLimit, TrafficClass: ev.UD.AH.TrafficClass, FlowLabel: ev.UD.AH.FlowLabel,
					Port: 1, IsGlobal: ev.UD.AH.DGID.IsValid()}
			}
		}
		out.Info = idInfo(ev.ID)
		out.Put(e)
		return nil
	}
}

// releaseCM destroys what the client left of the CM: its IDs (the CM sends
// what they owe their peers) and channels.
func (ss *session) releaseCM() {
	for h, id := range ss.cm.ids {
		id.Destroy()
		delete(ss.cm.ids, h)
	}
	clear(ss.cm.handles)
	for h, c := range ss.cm.channels {
		c.fd.Close()
		delete(ss.cm.channels, h)
	}
}

// detachQP forgets qp in the IDs that have it, before it is destroyed.
func (ss *session) detachQP(qp *verbs.QP) {
	for _, id := range ss.cm.ids {
		if id.QP() == qp {
			id.DetachQP()
		}
	}
}

func idInfo(id *rdmacm.ID) uverbs.CMIDInfo {
	r := id.Route()
	info := uverbs.CMIDInfo{Src: uverbs.CMAddrFrom(id.LocalAddr()), Dst: uverbs.CMAddrFrom(id.RemoteAddr()), GIDIndex: uint8(r.GIDIndex),
		PathMTU: uint8(r.PathMTU), FlowLabel: r.FlowLabel, TrafficClass: r.TrafficClass, HopLimit: r.HopLimit}
	copy(info.DMAC[:], r.DMAC)
	return info
}
