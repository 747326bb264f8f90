package cmagent

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/cm"
)

// EventType is what happened, numbered as rdma_cm's enum rdma_cm_event_type
// for the events the CM itself causes.
type EventType uint8

// The events.
const (
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventTimewaitExit    EventType = 15
)

var eventNames = map[EventType]string{EventConnectRequest: "CONNECT_REQUEST", EventConnectResponse: "CONNECT_RESPONSE",
	EventUnreachable: "UNREACHABLE", EventRejected: "REJECTED", EventEstablished: "ESTABLISHED",
	EventDisconnected: "DISCONNECTED", EventTimewaitExit: "TIMEWAIT_EXIT"}

func (t EventType) String() string {
	if n, ok := eventNames[t]; ok {
		return n
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one thing that happened to a connection.
type Event struct {
	Type EventType
	Conn *Conn
	// Listener is set for CONNECT_REQUEST: the listener the request came to.
	Listener *Listener
	Peer     netip.Addr
	// REQ is the request (CONNECT_REQUEST); REP the reply (CONNECT_RESPONSE).
	REQ cm.REQ
	REP cm.REP
	// Reason is the REJ's (REJECTED).
	Reason cm.RejReason
	// PrivateData is the message's private data area, whole (the CM does not
	// carry its length; rdma_cm hands the whole area up).
	PrivateData []byte
	// SIDR is the reply of a SIDR lookup (EventSIDRResolved) or the request
	// (EventSIDRRequest).
	SIDR SIDRInfo
}
