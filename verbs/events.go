package verbs

import (
	"context"
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
	ev, err := d.ops.GetAsyncEvent(ctx)
	if err != nil {
		return AsyncEvent{}, err
	}
	// The provider names the objects by the owners they were created with.
	out := AsyncEvent{Type: ev.Type}
	out.QP, _ = ev.QP.(*QP)
	out.CQ, _ = ev.CQ.(*CQ)
	out.SRQ, _ = ev.SRQ.(*SRQ)
	return out, nil
}
