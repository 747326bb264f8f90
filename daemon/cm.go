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
	svc := ss.srv.cm
	if svc == nil {
		return nil, syscall.ENOSYS
	}
	switch op {
	case uverbs.OpCMCreateChannel:
		return ss.cmCreateChannel(d, e)
	case uverbs.OpCMDestroyChannel:
		h := d.U32()
		if err := d.End(); err != nil {
			return nil, err
		}
		c := ss.cm.channels[h]
		if c == nil {
			return nil, syscall.EINVAL
		}
		for _, id := range ss.cm.ids {
			if id.Channel() == c.ch {
				return nil, syscall.EBUSY
			}
		}
		c.fd.Close()
		delete(ss.cm.channels, h)
		ss.acct.gave(objCMChannel)
		return nil, nil
	case uverbs.OpCMCreateID:
		ch, ps := d.U32(), d.U16()
		if err := d.End(); err != nil {
			return nil, err
		}
		c := ss.cm.channels[ch]
		if c == nil {
			return nil, syscall.EINVAL
		}
		if err := ss.room(objCMID); err != nil {
			return nil, err
		}
		id, err := svc.CreateID(c.ch, rdmacm.PortSpace(ps), nil)
		if err != nil {
			return nil, err
		}
		e.U32(ss.cmAdopt(id))
		return nil, nil
	case uverbs.OpCMGetEvent:
		return nil, ss.cmGetEvent(d, e)
	}
	// The rest name an ID first.
	h := d.U32()
	id := ss.cm.ids[h]
	if id == nil {
		return nil, syscall.EINVAL
	}
	switch op {
	case uverbs.OpCMDestroyID:
		if err := d.End(); err != nil {
			return nil, err
		}
		delete(ss.cm.ids, h)
		delete(ss.cm.handles, id)
		ss.acct.gave(objCMID)
		return nil, id.Destroy()
	case uverbs.OpCMMigrateID:
		ch := d.U32()
		if err := d.End(); err != nil {
			return nil, err
		}
		c := ss.cm.channels[ch]
		if c == nil {
			return nil, syscall.EINVAL
		}
		return nil, id.Migrate(c.ch)
	case uverbs.OpCMBind:
		var a uverbs.CMAddr
		a.Get(d)
		if err := d.End(); err != nil {
			return nil, err
		}
		ap, err := a.AddrPort()
		if err != nil {
			return nil, err
		}
		if err := ss.bindPort(ap.Port()); err != nil {
			return nil, err
		}
		if err := id.Bind(ap); err != nil {
			return nil, err
		}
	case uverbs.OpCMResolveAddr:
		var src, dst uverbs.CMAddr
		src.Get(d)
		dst.Get(d)
		ms := d.U32()
		if err := d.End(); err != nil {
			return nil, err
		}
		s, err := src.AddrPort()
		if err != nil {
			return nil, err
		}
		t, err := dst.AddrPort()
		if err != nil {
			return nil, err
		}
		if err := ss.bindPort(s.Port()); err != nil {
			return nil, err
		}
		if err := ss.acct.mayResolve(); err != nil {
			return nil, err
		}
		if err := id.ResolveAddr(s, t, ss.resolveTimeout(ms)); err != nil {
			return nil, err
		}
		ss.acct.resolves(id)
	case uverbs.OpCMResolveRoute:
		ms := d.U32()
		if err := d.End(); err != nil {
			return nil, err
		}
		if err := id.ResolveRoute(ss.resolveTimeout(ms)); err != nil {
			return nil, err
		}
	case uverbs.OpCMListen:
		backlog := d.U32()
		if err := d.End(); err != nil {
			return nil, err
		}
		if err := id.Listen(int(min(backlog, 1<<16))); err != nil {
			return nil, err
		}
	case uverbs.OpCMAttachQP:
		qh := d.U32()
		if err := d.End(); err != nil {
			return nil, err
		}
		q := ss.qps[qh]
		if q == nil {
			return nil, syscall.EINVAL
		}
		if err := id.AttachQP(q.qp); err != nil {
			return nil, err
		}
	case uverbs.OpCMConnect, uverbs.OpCMAccept:
		var p uverbs.CMConnParam
		p.Get(d)
		if err := d.End(); err != nil {
			return nil, err
		}
		cp := rdmacm.ConnParam(p)
		var err error
		if op == uverbs.OpCMConnect {
			err = id.Connect(cp)
		} else {
			err = id.Accept(&cp)
		}
		if err != nil {
			return nil, err
		}
	case uverbs.OpCMReject:
		private := d.Raw()
		if err := d.End(); err != nil {
			return nil, err
		}
		if err := id.Reject(private); err != nil {
			return nil, err
		}
	case uverbs.OpCMDisconnect, uverbs.OpCMEstablish:
		if err := d.End(); err != nil {
			return nil, err
		}
		var err error
		if op == uverbs.OpCMDisconnect {
			err = id.Disconnect()
		} else {
			err = id.Establish()
		}
		if err != nil {
			return nil, err
		}
	case uverbs.OpCMQuery:
		if err := d.End(); err != nil {
			return nil, err
		}
		info := idInfo(id)
		info.Put(e)
	case uverbs.OpCMInitQPAttr:
		state := d.U8()
		if err := d.End(); err != nil {
			return nil, err
		}
		a, mask, err := id.InitQPAttr(verbs.QPState(state))
		if err != nil {
			return nil, err
		}
		w := a.Wire()
		w.Put(e)
		e.U32(uint32(mask))
	case uverbs.OpCMSetOption:
		level, name, val := d.U32(), d.U32(), d.Raw()
		if err := d.End(); err != nil {
			return nil, err
		}
		return nil, id.SetOption(level, name, val)
	default:
		return nil, fmt.Errorf("%w: unknown op %v", errProtocol, op)
	}
	return nil, nil
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
	e.U32(h)
	return []int{peer}, nil
}

// cmGetEvent hands the client its channel's next event (EAGAIN if none).
// An ID the event brings (CONNECT_REQUEST's) becomes the client's; events
// of IDs the client destroyed meanwhile are skipped.
func (ss *session) cmGetEvent(d *uverbs.Decoder, e *uverbs.Encoder) error {
	h := d.U32()
	if err := d.End(); err != nil {
		return err
	}
	c := ss.cm.channels[h]
	if c == nil {
		return syscall.EINVAL
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
