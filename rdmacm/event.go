package rdmacm

import (
	"context"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/verbs"
)

// EventType is enum rdma_cm_event_type.
type EventType uint8

// The events, numbered as rdma_cm's.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

// eventNames are rdma_event_str's strings.
var eventNames = [...]string{"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
	"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL", "RDMA_CM_EVENT_MULTICAST_JOIN",
	"RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT"}

func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "UNKNOWN EVENT"
}

// ConnParam is struct rdma_conn_param: what connect and accept offer, and
// what CONNECT_REQUEST, CONNECT_RESPONSE and ESTABLISHED report of the
// peer's (resources from this end's point of view). Its fields are
// uverbs.CMConnParam's, so that each converts to the other.
type ConnParam struct {
	PrivateData []byte
	// ResponderResources is the READs and atomics this end serves at once,
	// InitiatorDepth the ones it may have outstanding at the peer.
	ResponderResources, InitiatorDepth uint8
	FlowControl                        bool
	RetryCount, RNRRetryCount          uint8
	SRQ                                bool
	// QPNum is the QPN to announce when the ID has no QP of its own; in an
	// event, the peer's QPN.
	QPNum uint32
}

// UDParam is struct rdma_ud_param: how to reach a UD service.
type UDParam struct {
	PrivateData []byte
	AH          verbs.AH
	QPNum, QKey uint32
}

// Event is one rdma_cm event.
type Event struct {
	Type EventType
	// ID is the ID the event concerns; for CONNECT_REQUEST a new ID for the
	// connection, born on Listen's channel.
	ID *ID
	// Listen is the listening ID of a CONNECT_REQUEST.
	Listen *ID
	// Status is 0, a negative errno, or (REJECTED) the peer's reject reason
	// and (UNREACHABLE of a SIDR lookup) its status, as rdma_cm's.
	Status int
	Param  ConnParam
	UD     UDParam
}

func (e Event) String() string { return fmt.Sprintf("%v (status %d)", e.Type, e.Status) }

// EventChannel queues events for its IDs in order (struct
// rdma_event_channel).
type EventChannel struct {
	mu     sync.Mutex
	q      []Event
	ready  chan struct{} // holds a token while q is not empty
	notify func()
}

// NewEventChannel returns an empty channel.
func NewEventChannel() *EventChannel { return &EventChannel{ready: make(chan struct{}, 1)} }

// SetNotify makes the channel call f after each event it queues (the
// daemon signals a client's file descriptor so).
func (c *EventChannel) SetNotify(f func()) {
	c.mu.Lock()
	c.notify = f
	c.mu.Unlock()
}

func (c *EventChannel) post(e Event) {
	c.mu.Lock()
	c.q = append(c.q, e)
	f := c.notify
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
	if f != nil {
		f()
	}
}

// TryGet returns the next event, if there is one.
func (c *EventChannel) TryGet() (Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) == 0 {
		return Event{}, false
	}
	e := c.q[0]
	c.q = c.q[1:]
	if len(c.q) > 0 {
		select {
		case c.ready <- struct{}{}:
		default:
		}
	}
	return e, true
}

// takeFor removes and returns the events queued for id, in order.
func (c *EventChannel) takeFor(id *ID) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Event
	kept := c.q[:0]
	for _, e := range c.q {
		if e.ID == id {
			out = append(out, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(c.q[len(kept):])
	c.q = kept
	return out
}

// takeRequestsFor removes and returns the CONNECT_REQUESTs queued for
// listener l.
func (c *EventChannel) takeRequestsFor(l *ID) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Event
	kept := c.q[:0]
	for _, e := range c.q {
		if e.Type == EventConnectRequest && e.Listen == l {
			out = append(out, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(c.q[len(kept):])
	c.q = kept
	return out
}

// Len is the number of events waiting.
func (c *EventChannel) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q)
}

// Get waits for the next event or the end of ctx.
func (c *EventChannel) Get(ctx context.Context) (Event, error) {
	for {
		if e, ok := c.TryGet(); ok {
			return e, nil
		}
		select {
		case <-c.ready:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}
