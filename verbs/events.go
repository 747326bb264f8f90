package verbs

import (
	"context"

	"github.com/xdproce/xdproce/internal/transport"
)

// AsyncEvent is one asynchronous event (struct ibv_async_event); the field
// matching the type names the object.
type AsyncEvent struct {
	Type AsyncEventType
	CQ   *CQ
	QP   *QP
	SRQ  *SRQ
}

// GetAsyncEvent returns the oldest asynchronous event, waiting for one until
// ctx ends (ibv_get_async_event).
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	if d.att != nil {
		return d.att.getEvent(ctx)
	}
	ev, err := d.nic.NextEvent(ctx)
	if err != nil {
		return AsyncEvent{}, err
	}
	return eventOf(ev), nil
}

// eventOf names the API's objects an engine's event names.
func eventOf(ev transport.Event) AsyncEvent {
	out := AsyncEvent{Type: ev.Type}
	if ev.QP != nil {
		out.QP, _ = ev.QP.Owner.(*QP)
	}
	if ev.CQ != nil {
		out.CQ, _ = ev.CQ.Owner.(*CQ)
	}
	if ev.SRQ != nil {
		out.SRQ, _ = ev.SRQ.Owner.(*SRQ)
	}
	return out
}
