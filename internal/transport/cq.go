package transport

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
)

// CreateCQ creates a completion queue holding up to depth completions.
func (d *NIC) CreateCQ(depth int) *queue.CQ {
	cq := d.newCQ()
	cq.Ring = make([]ibv.WorkCompletion, depth)
	cq.Capacity.Store(int64(depth))
	return cq
}

// newCQ is a CQ of the device, without its ring or sink.
func (d *NIC) newCQ() *queue.CQ {
	cq := &queue.CQ{Events: &d.dev.Objs.Events, Event: make(chan struct{}, 1)}
	if d.dev.Cfg.BusyPoll {
		cq.Progress = func() { d.Progress() }
	}
	return cq
}
