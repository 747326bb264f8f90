package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// A Service on a device attached to the daemon (verbs.Dial): the daemon
// owns QP1 and the CM, and the IDs are its, named by handles of the
// device's session (docs/daemon.md, "Connection management"). Each
// EventChannel gets a channel in the daemon and a goroutine that moves its
// events over.

// remote is a Service's side of the daemon's CM.
type remote struct {
	dev *verbs.Device

	mu    sync.Mutex
	ids   map[uint32]*ID
	chans map[*EventChannel]*remoteChannel
	wg    sync.WaitGroup
}

// remoteChannel is the daemon's channel behind an EventChannel.
type remoteChannel struct {
	h    uint32
	fd   *ipc.Waiter // the read end of the daemon channel's pipe
	stop context.CancelFunc
}

// remoteID is an ID's daemon handle and what the daemon last said of it.
type remoteID struct {
	h    uint32
	info uverbs.CMIDInfo
}

func startRemote(dev *verbs.Device) *Service {
	return &Service{dev: dev, rem: &remote{dev: dev, ids: map[uint32]*ID{}, chans: map[*EventChannel]*remoteChannel{}},
		ids: map[*ID]struct{}{}, ports: map[portKey]*ID{}}
}

// call runs one CM request.
func (r *remote) call(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, error) {
	d, fds, err := r.dev.Control(op, body)
	ipc.CloseAll(fds)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	return d, nil
}

// channel returns the daemon's channel for ch, making it (and the goroutine
// that moves its events) on first use.
func (r *remote) channel(ch *EventChannel) (*remoteChannel, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.chans[ch]; c != nil {
		return c, nil
	}
	d, fds, err := r.dev.Control(uverbs.OpCMCreateChannel, nil)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	if len(fds) != 1 {
		ipc.CloseAll(fds)
		return nil, fmt.Errorf("rdmacm: CM_CREATE_CHANNEL brought %d fds", len(fds))
	}
	c := &remoteChannel{h: d.Ref(), fd: ipc.WaiterOf(fds[0])}
	if err := d.End(); err != nil {
		c.fd.Close()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	r.chans[ch] = c
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.pump(ctx, c, ch)
	}()
	return c, nil
}

// pump moves the daemon channel's events to ch until ctx ends or the
// daemon closed its end (the channel, or the daemon, is gone).
func (r *remote) pump(ctx context.Context, c *remoteChannel, ch *EventChannel) {
	for {
		for {
			d, err := r.call(uverbs.OpCMGetEvent, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: c.h}) })
			if err != nil {
				break // EAGAIN: none left; or the daemon is gone
			}
			var ev uverbs.CMEvent
			ev.Get(d)
			if d.End() != nil {
				break
			}
			if e, ok := r.event(ch, &ev); ok {
				ch.post(e)
			}
		}
		if c.fd.Wait(ctx) != nil {
			return
		}
	}
}

// event turns the daemon's event into the Service's; a CONNECT_REQUEST's
// ID is new.
func (r *remote) event(ch *EventChannel, ev *uverbs.CMEvent) (Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := Event{Type: EventType(ev.Type), Status: int(ev.Status), Param: ConnParam(ev.Param)}
	id := r.ids[ev.ID]
	if out.Type == EventConnectRequest {
		l := r.ids[ev.Listen]
		if l == nil {
			return Event{}, false
		}
		id = &ID{s: l.s, ch: ch, ps: PortSpace(ev.PortSpace), Context: l.Context, qkey: UDPQKey, state: stateConnect,
			parent: l, rem: &remoteID{h: ev.ID}}
		// What Accept(nil) answers with: the request's resources, crossed.
		id.req.InitiatorDepth, id.req.ResponderResources = ev.Param.ResponderResources, ev.Param.InitiatorDepth
		r.ids[ev.ID] = id
		l.s.mu.Lock()
		l.s.ids[id] = struct{}{}
		l.s.mu.Unlock()
		out.Listen = l
	}
	if id == nil {
		return Event{}, false
	}
	out.ID = id
	id.mu.Lock()
	id.rem.info = ev.Info
	if out.Type == EventDisconnected {
		id.state = stateDisconnect // Conn.Disconnect then only answers
	}
	id.mu.Unlock()
	if id.ud() {
		out.UD = UDParam{PrivateData: ev.Param.PrivateData, QPNum: ev.UDQPN, QKey: ev.UDQKey}
		if out.Type == EventEstablished || out.Type == EventMulticastJoin {
			out.UD.AH = verbs.AH{DGID: netip.AddrFrom16(ev.UDAH.DGID).Unmap(), SGIDIndex: int(ev.UDAH.SGIDIndex),
				HopLimit: ev.UDAH.HopLimit, TrafficClass: ev.UDAH.TrafficClass, FlowLabel: ev.UDAH.FlowLabel}
		}
		out.Param = ConnParam{}
	}
	return out, true
}

// close stops the pumps and destroys the daemon's channels.
func (r *remote) close() {
	r.mu.Lock()
	chans := r.chans
	r.chans = map[*EventChannel]*remoteChannel{}
	r.mu.Unlock()
	for _, c := range chans {
		c.stop()
	}
	r.wg.Wait()
	for _, c := range chans {
		r.call(uverbs.OpCMDestroyChannel, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: c.h}) })
		c.fd.Close()
	}
}

// createID makes the ID in the daemon.
func (r *remote) createID(id *ID) error {
	c, err := r.channel(id.ch)
	if err != nil {
		return err
	}
	d, err := r.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) {
		e.Put(&uverbs.CMCreateID{Channel: c.h, PortSpace: uint16(id.ps)})
	})
	if err != nil {
		return err
	}
	h := d.Ref()
	if err := d.End(); err != nil {
		return err
	}
	id.rem = &remoteID{h: h}
	r.mu.Lock()
	r.ids[h] = id
	r.mu.Unlock()
	return nil
}

// op runs a request naming id (its Ref, then body unless nil: the op's
// part of uverbs' definition), then refreshes what the client knows of it.
func (id *ID) remoteOp(op uverbs.Op, body any) error {
	r := id.s.rem
	d, err := r.call(op, func(e *uverbs.Encoder) {
		e.Put(&uverbs.Ref{Handle: id.rem.h})
		if body != nil {
			e.Put(body)
		}
	})
	if err != nil {
		return err
	}
	if err := d.End(); err != nil {
		return err
	}
	return id.refresh()
}

// refresh reads the ID's addresses and route from the daemon.
func (id *ID) refresh() error {
	d, err := id.s.rem.call(uverbs.OpCMQuery, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: id.rem.h}) })
	if err != nil {
		return err
	}
	var info uverbs.CMIDInfo
	info.Get(d)
	if err := d.End(); err != nil {
		return err
	}
	id.mu.Lock()
	id.rem.info = info
	id.mu.Unlock()
	return nil
}

// addrOf is what the daemon said of an address (nothing for a family it
// would not send).
func addrOf(a uverbs.CMAddr) netip.AddrPort {
	ap, _ := a.AddrPort()
	return ap
}

// The ID's operations through the daemon.

func (id *ID) remoteBind(addr netip.AddrPort) error {
	a := uverbs.CMAddrFrom(addr)
	return id.remoteOp(uverbs.OpCMBind, &a)
}

func (id *ID) remoteResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	return id.remoteOp(uverbs.OpCMResolveAddr, &uverbs.CMResolveAddr{Src: uverbs.CMAddrFrom(src), Dst: uverbs.CMAddrFrom(dst),
		TimeoutMS: uint32(timeout.Milliseconds())})
}

func (id *ID) remoteResolveRoute(timeout time.Duration) error {
	return id.remoteOp(uverbs.OpCMResolveRoute, &uverbs.CMTimeout{TimeoutMS: uint32(timeout.Milliseconds())})
}

func (id *ID) remoteListen(backlog int) error {
	return id.remoteOp(uverbs.OpCMListen, &uverbs.CMListen{Backlog: uint32(max(backlog, 0))})
}

func (id *ID) remoteAttachQP(qp *verbs.QP) error {
	if qp.Handle() == 0 {
		return fmt.Errorf("rdmacm: the QP is not the daemon's: %w", ErrInvalid)
	}
	if err := id.remoteOp(uverbs.OpCMAttachQP, &uverbs.Ref{Handle: qp.Handle()}); err != nil {
		return err
	}
	id.mu.Lock()
	id.qp = qp
	id.mu.Unlock()
	return nil
}

func (id *ID) remoteConnParamOp(op uverbs.Op, p *ConnParam) error {
	w := uverbs.CMConnParam(*p)
	return id.remoteOp(op, &w)
}

func (id *ID) remoteInitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error) {
	d, err := id.s.rem.call(uverbs.OpCMInitQPAttr, func(e *uverbs.Encoder) {
		e.Put(&uverbs.Ref{Handle: id.rem.h})
		e.Put(&uverbs.CMInitQPAttr{State: uint8(state)})
	})
	if err != nil {
		return verbs.QPAttr{}, 0, err
	}
	var w uverbs.CMQPAttr
	d.Get(&w)
	if err := d.End(); err != nil {
		return verbs.QPAttr{}, 0, err
	}
	return verbs.QPAttrFromWire(&w.Attr), verbs.AttrMask(w.Mask), nil
}

func (id *ID) remoteMigrate(ch *EventChannel) error {
	c, err := id.s.rem.channel(ch)
	if err != nil {
		return err
	}
	return id.remoteOp(uverbs.OpCMMigrateID, &uverbs.Ref{Handle: c.h})
}

func (id *ID) remoteDestroy() error {
	r := id.s.rem
	_, err := r.call(uverbs.OpCMDestroyID, func(e *uverbs.Encoder) { e.Put(&uverbs.Ref{Handle: id.rem.h}) })
	r.mu.Lock()
	delete(r.ids, id.rem.h)
	r.mu.Unlock()
	return err
}

// remoteRoute is what the daemon last said of the ID's path.
func (id *ID) remoteRoute() Route {
	i := id.rem.info
	return Route{GIDIndex: int(i.GIDIndex), PathMTU: verbs.MTU(i.PathMTU), DMAC: append([]byte(nil), i.DMAC[:]...),
		FlowLabel: i.FlowLabel, TrafficClass: i.TrafficClass, HopLimit: i.HopLimit}
}
