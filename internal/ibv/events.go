package ibv

// AsyncEventType is the kind of an asynchronous event (ibv_event_type values).
type AsyncEventType uint8

// The events xdproce raises, with their ibv_event_type numbers.
const (
	EventCQErr           AsyncEventType = 0  // IBV_EVENT_CQ_ERR: a CQ overflowed
	EventQPFatal         AsyncEventType = 1  // IBV_EVENT_QP_FATAL
	EventSQDrained       AsyncEventType = 5  // IBV_EVENT_SQ_DRAINED: an SQD drain ended (en_sqd_async_notify)
	EventDeviceFatal     AsyncEventType = 8  // IBV_EVENT_DEVICE_FATAL: the daemon serving the device is gone
	EventSRQErr          AsyncEventType = 14 // IBV_EVENT_SRQ_ERR: a daemon's client wrote a malformed WQE to the SRQ
	EventSRQLimitReached AsyncEventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
)

func (t AsyncEventType) String() string {
	switch t {
	case EventCQErr:
		return "CQ_ERR"
	case EventQPFatal:
		return "QP_FATAL"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	case EventDeviceFatal:
		return "DEVICE_FATAL"
	case EventSRQErr:
		return "SRQ_ERR"
	}
	return "UNKNOWN"
}
