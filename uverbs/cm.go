package uverbs

import (
	"fmt"
	"net/netip"
	"syscall"
)

// The connection manager's messages (docs/daemon.md, "Connection
// management"): rdma_cm's IDs and event channels live in the daemon, which
// owns QP1; a client names them by handles of its session.

// CMAddr is an IP address and port: the address as 16 bytes (IPv4 as
// ::ffff:a.b.c.d), its family (4 or 6; 0 for none) and the port.
type CMAddr struct {
	IP     [16]byte `abi:"ip"`
	Family uint8    `abi:"family" doc:"4, 6, or 0 for none"`
	Port   uint16   `abi:"port"`
}

// Put encodes a.
func (a *CMAddr) Put(e *Encoder) { e.Put(a) }

// Get decodes a.
func (a *CMAddr) Get(d *Decoder) { d.Get(a) }

// CMAddrFrom is ap as the protocol carries it (an invalid address: family 0).
func CMAddrFrom(ap netip.AddrPort) CMAddr {
	a := CMAddr{Port: ap.Port()}
	if ip := ap.Addr(); ip.IsValid() {
		a.IP, a.Family = ip.As16(), 6
		if ip.Unmap().Is4() {
			a.Family = 4
		}
	}
	return a
}

// AddrPort is a as an address and port; family 0 is no address, another
// than 0, 4 or 6 EAFNOSUPPORT.
func (a CMAddr) AddrPort() (netip.AddrPort, error) {
	switch a.Family {
	case 0:
		return netip.AddrPortFrom(netip.Addr{}, a.Port), nil
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom16(a.IP).Unmap(), a.Port), nil
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.IP), a.Port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("uverbs: address family %d: %w", a.Family, syscall.EAFNOSUPPORT)
}

// CMConnParam is struct rdma_conn_param (rdmacm.ConnParam converts to it).
type CMConnParam struct {
	PrivateData        []byte `abi:"private_data"`
	ResponderResources uint8  `abi:"responder_resources"`
	InitiatorDepth     uint8  `abi:"initiator_depth"`
	FlowControl        bool   `abi:"flow_control"`
	RetryCount         uint8  `abi:"retry_count"`
	RNRRetryCount      uint8  `abi:"rnr_retry_count"`
	SRQ                bool   `abi:"srq"`
	QPNum              uint32 `abi:"qp_num"`
}

// Put encodes p.
func (p *CMConnParam) Put(e *Encoder) { e.Put(p) }

// Get decodes p.
func (p *CMConnParam) Get(d *Decoder) { d.Get(p) }

// CMIDInfo is what a client keeps of an ID (rdma_cm_id's route): its
// addresses, the GID index, and the path.
type CMIDInfo struct {
	Src          CMAddr  `abi:"src"`
	Dst          CMAddr  `abi:"dst"`
	GIDIndex     uint8   `abi:"gid_index"`
	PathMTU      uint8   `abi:"path_mtu" doc:"enum ibv_mtu; 0 before the route is resolved"`
	DMAC         [6]byte `abi:"dmac"`
	FlowLabel    uint32  `abi:"flow_label"`
	TrafficClass uint8   `abi:"traffic_class"`
	HopLimit     uint8   `abi:"hop_limit"`
}

// Put encodes i.
func (i *CMIDInfo) Put(e *Encoder) { e.Put(i) }

// Get decodes i.
func (i *CMIDInfo) Get(d *Decoder) { d.Get(i) }

// CMEvent is one rdma_cm event (struct rdma_cm_event) with what the client
// needs to update the IDs it names.
type CMEvent struct {
	Type uint8 `abi:"event" doc:"enum rdma_cm_event_type"`
	// ID is the ID's handle; for CONNECT_REQUEST a new one, Listen the
	// listening ID's.
	ID     uint32      `abi:"id"`
	Listen uint32      `abi:"listen_id"`
	Status int32       `abi:"status"`
	Param  CMConnParam `abi:"param"`
	// UD is set for UD IDs: the address handle's attributes, the QPN and
	// Q_Key (ESTABLISHED), or the request's private data.
	UDAH      AHAttr   `abi:"ud_ah"`
	UDQPN     uint32   `abi:"ud_qp_num"`
	UDQKey    uint32   `abi:"ud_qkey"`
	Info      CMIDInfo `abi:"info" doc:"the ID's, after the event"`
	PortSpace uint16   `abi:"port_space" doc:"the ID's (for a new one)"`
}

// Put encodes ev.
func (ev *CMEvent) Put(e *Encoder) { e.Put(ev) }

// Get decodes ev.
func (ev *CMEvent) Get(d *Decoder) { d.Get(ev) }

// CMIDStatus is one rdma_cm ID as LIST reports it (rdma resource show
// cm_id's columns).
type CMIDStatus struct {
	OwnerPID  uint32 `abi:"owner_pid"`
	PortSpace uint16 `abi:"port_space"`
	State     string `abi:"state" doc:"rdma_cm's state name: LISTEN, CONNECT, ..."`
	Src       CMAddr `abi:"src"`
	Dst       CMAddr `abi:"dst"`
	QPN       uint32 `abi:"qp_num" doc:"the attached QP's, 0 for none"`
}
