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
	IP     [16]byte
	Family uint8
	Port   uint16
}

// Put encodes a.
func (a *CMAddr) Put(e *Encoder) {
	e.b = append(e.b, a.IP[:]...)
	e.U8(a.Family)
	e.U16(a.Port)
}

// Get decodes a.
func (a *CMAddr) Get(d *Decoder) {
	copy(a.IP[:], d.take(16))
	a.Family, a.Port = d.U8(), d.U16()
}

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
	PrivateData                        []byte
	ResponderResources, InitiatorDepth uint8
	FlowControl                        bool
	RetryCount, RNRRetryCount          uint8
	SRQ                                bool
	QPNum                              uint32
}

// Put encodes p.
func (p *CMConnParam) Put(e *Encoder) {
	e.Raw(p.PrivateData)
	e.U8(p.ResponderResources)
	e.U8(p.InitiatorDepth)
	e.Bool(p.FlowControl)
	e.U8(p.RetryCount)
	e.U8(p.RNRRetryCount)
	e.Bool(p.SRQ)
	e.U32(p.QPNum)
}

// Get decodes p.
func (p *CMConnParam) Get(d *Decoder) {
	p.PrivateData = append([]byte(nil), d.Raw()...)
	p.ResponderResources, p.InitiatorDepth, p.FlowControl = d.U8(), d.U8(), d.Bool()
	p.RetryCount, p.RNRRetryCount, p.SRQ, p.QPNum = d.U8(), d.U8(), d.Bool(), d.U32()
}

// CMIDInfo is what a client keeps of an ID (rdma_cm_id's route): its
// addresses, the GID index, and the path.
type CMIDInfo struct {
	Src, Dst     CMAddr
	GIDIndex     uint8
	PathMTU      uint8 // ibv_mtu; 0 before the route is resolved
	DMAC         [6]byte
	FlowLabel    uint32
	TrafficClass uint8
	HopLimit     uint8
}

// Put encodes i.
func (i *CMIDInfo) Put(e *Encoder) {
	i.Src.Put(e)
	i.Dst.Put(e)
	e.U8(i.GIDIndex)
	e.U8(i.PathMTU)
	e.b = append(e.b, i.DMAC[:]...)
	e.U32(i.FlowLabel)
	e.U8(i.TrafficClass)
	e.U8(i.HopLimit)
}

// Get decodes i.
func (i *CMIDInfo) Get(d *Decoder) {
	i.Src.Get(d)
	i.Dst.Get(d)
	i.GIDIndex, i.PathMTU = d.U8(), d.U8()
	copy(i.DMAC[:], d.take(6))
	i.FlowLabel, i.TrafficClass, i.HopLimit = d.U32(), d.U8(), d.U8()
}

// CMEvent is one rdma_cm event (struct rdma_cm_event) with what the client
// needs to update the IDs it names.
type CMEvent struct {
	Type uint8 // enum rdma_cm_event_type
	// ID is the ID's handle; for CONNECT_REQUEST a new one, Listen the
	// listening ID's.
	ID, Listen uint32
	Status     int32
	Param      CMConnParam
	// UD is set for UD IDs: the address handle's attributes, the QPN and
	// Q_Key (ESTABLISHED), or the request's private data.
	UDAH          AHAttr
	UDQPN, UDQKey uint32
	Info          CMIDInfo // the ID's, after the event
	PortSpace     uint16   // the ID's (for a new one)
}

// Put encodes ev.
func (ev *CMEvent) Put(e *Encoder) {
	e.U8(ev.Type)
	e.U32(ev.ID)
	e.U32(ev.Listen)
	e.U32(uint32(ev.Status))
	ev.Param.Put(e)
	ev.UDAH.Put(e)
	e.U32(ev.UDQPN)
	e.U32(ev.UDQKey)
	ev.Info.Put(e)
	e.U16(ev.PortSpace)
}

// Get decodes ev.
func (ev *CMEvent) Get(d *Decoder) {
	ev.Type, ev.ID, ev.Listen, ev.Status = d.U8(), d.U32(), d.U32(), int32(d.U32())
	ev.Param.Get(d)
	ev.UDAH.Get(d)
	ev.UDQPN, ev.UDQKey = d.U32(), d.U32()
	ev.Info.Get(d)
	ev.PortSpace = d.U16()
}

// CMIDStatus is one rdma_cm ID as LIST reports it (rdma resource show
// cm_id's columns).
type CMIDStatus struct {
	OwnerPID  uint32
	PortSpace uint16
	State     string // rdma_cm's state name: LISTEN, CONNECT, ...
	Src, Dst  CMAddr
	QPN       uint32 // the attached QP's, 0 for none
}

func putCMIDStatus(e *Encoder, s *CMIDStatus) {
	e.U32(s.OwnerPID)
	e.U16(s.PortSpace)
	e.Raw([]byte(s.State))
	s.Src.Put(e)
	s.Dst.Put(e)
	e.U32(s.QPN)
}
