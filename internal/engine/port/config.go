package port

import (
	"net"
	"net/netip"
	"time"
)

// Config describes the port a NIC runs on: verbs.DeviceConfig with its
// defaults applied.
type Config struct {
	MAC       net.HardwareAddr
	GIDs      []netip.Addr
	ActiveMTU int
	Clock     Clock
	BusyPoll  bool
	SpinMax   time.Duration // 0: never spin
	AckHold   time.Duration // negative: ACKs leave at the end of their batch
	// Groups, if set, joins (join true) or leaves the multicast group
	// addr on the port: called in a control operation when the first QP
	// attaches to a group and after the last one detaches.
	Groups   func(addr netip.Addr, join bool) error
	Recovery Recovery // pieces of selective recovery turned off (recovery.go)
	// FastPath, if set, shares idle RC responders with the XDP program
	// (fastpath.go).
	FastPath FastPath
	// AckCoalesce: the requester asks for an ACK only where progress
	// needs one (queue/ackpolicy.go), not on every message's last packet.
	AckCoalesce bool
}
