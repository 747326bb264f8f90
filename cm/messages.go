package cm

import "fmt"

// Message is one CM message's body.
type Message interface {
	Attr() Attr
	// put writes the body into mad (zeroed, with the header written);
	// false if a field does not fit its width.
	put(mad []byte) bool
}

// Encode returns the MAD of m with header h (h.Attr is m's).
func Encode(h Header, m Message) ([]byte, error) {
	mad := make([]byte, MADLen)
	h.Attr = m.Attr()
	h.put(mad)
	if !m.put(mad) {
		return nil, fmt.Errorf("%w in %v", errBadField, m.Attr())
	}
	return mad, nil
}

// Decode splits a CM MAD into its header and message.
func Decode(mad []byte) (Header, Message, error) {
	h, err := DecodeHeader(mad)
	if err != nil {
		return h, nil, err
	}
	var m Message
	switch h.Attr {
	case AttrREQ:
		m = getREQ(mad)
	case AttrREP:
		m = getREP(mad)
	case AttrRTU:
		m = &RTU{Comm: getComm(mad), PrivateData: [224]byte(mad[32:256])}
	case AttrDREQ:
		m = &DREQ{Comm: getComm(mad), RemoteQPN: u24(mad, 32), PrivateData: [220]byte(mad[36:256])}
	case AttrDREP:
		m = &DREP{Comm: getComm(mad), PrivateData: [224]byte(mad[32:256])}
	case AttrREJ:
		m = &REJ{Comm: getComm(mad), MsgRejected: bits(mad[32], 7, 6), RejectInfoLen: bits(mad[33], 7, 1),
			Reason: RejReason(be.Uint16(mad[34:])), ARI: [72]byte(mad[36:108]), PrivateData: [148]byte(mad[108:256])}
	case AttrMRA:
		m = &MRA{Comm: getComm(mad), MsgMRAed: bits(mad[32], 7, 6), ServiceTimeout: bits(mad[33], 7, 3),
			PrivateData: [222]byte(mad[34:256])}
	case AttrSIDRREQ:
		m = &SIDRREQ{RequestID: be.Uint32(mad[24:]), PKey: be.Uint16(mad[28:]), ServiceID: be.Uint64(mad[32:]),
			PrivateData: [216]byte(mad[40:256])}
	case AttrSIDRREP:
		m = getSIDRREP(mad)
	default:
		return h, nil, fmt.Errorf("%w: %v", ErrUnknown, h.Attr)
	}
	return h, m, nil
}

// Comm is the pair of communication IDs every message but REQ starts with.
type Comm struct{ Local, Remote uint32 }

func getComm(mad []byte) Comm { return Comm{Local: be.Uint32(mad[24:]), Remote: be.Uint32(mad[28:])} }

func (c Comm) put(mad []byte) {
	be.PutUint32(mad[24:], c.Local)
	be.PutUint32(mad[28:], c.Remote)
}

// Transport service types of a REQ.
const (
	TransportRC  = 0
	TransportUC  = 1
	TransportXRC = 3
)

// Path is a REQ's primary path (on RoCE: GIDs, flow label, traffic
// class, hop limit; the LIDs are 0xFFFF unless the path is subnet-local).
type Path struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits
}

// REQ asks for a connection.
type REQ struct {
	LocalCommID        uint32
	ServiceID          uint64
	LocalCAGUID        uint64
	LocalQKey          uint32
	LocalQPN           uint32 // 24 bits
	ResponderResources uint8
	LocalEECN          uint32 // 24 bits
	InitiatorDepth     uint8
	RemoteEECN         uint32 // 24 bits
	// RemoteCMResponseTimeout and LocalCMResponseTimeout are 4.096 µs ×
	// 2^value (5 bits each).
	RemoteCMResponseTimeout, LocalCMResponseTimeout uint8
	TransportType                                   uint8 // 2 bits: TransportRC, UC, XRC
	EndToEndFlowControl                             bool
	StartingPSN                                     uint32 // 24 bits: the PSN the sender expects to receive first
	RetryCount, RNRRetryCount                       uint8  // 3 bits each
	PKey                                            uint16
	PathMTU                                         uint8 // 4 bits, ibv_mtu
	RDCExists, SRQ                                  bool
	MaxCMRetries                                    uint8 // 4 bits
	ExtendedTransportType                           uint8 // 3 bits
	Primary                                         Path
	// Alternate is the alternate path as sent (rdma_cm on RoCE sends none).
	Alternate   [44]byte
	PrivateData [92]byte
}

func (*REQ) Attr() Attr { return AttrREQ }

func getREQ(mad []byte) *REQ {
	return &REQ{
		LocalCommID: be.Uint32(mad[24:]), ServiceID: be.Uint64(mad[32:]), LocalCAGUID: be.Uint64(mad[40:]),
		LocalQKey: be.Uint32(mad[52:]), LocalQPN: u24(mad, 56), ResponderResources: mad[59], LocalEECN: u24(mad, 60),
		InitiatorDepth: mad[63], RemoteEECN: u24(mad, 64),
		RemoteCMResponseTimeout: bits(mad[67], 7, 3), TransportType: bits(mad[67], 2, 1), EndToEndFlowControl: bits(mad[67], 0, 0) == 1,
		StartingPSN: u24(mad, 68), LocalCMResponseTimeout: bits(mad[71], 7, 3), RetryCount: bits(mad[71], 2, 0),
		PKey: be.Uint16(mad[72:]), PathMTU: bits(mad[74], 7, 4), RDCExists: bits(mad[74], 3, 3) == 1, RNRRetryCount: bits(mad[74], 2, 0),
		MaxCMRetries: bits(mad[75], 7, 4), SRQ: bits(mad[75], 3, 3) == 1, ExtendedTransportType: bits(mad[75], 2, 0),
		Primary: Path{
			LocalLID: be.Uint16(mad[76:]), RemoteLID: be.Uint16(mad[78:]), LocalGID: [16]byte(mad[80:96]), RemoteGID: [16]byte(mad[96:112]),
			FlowLabel: be.Uint32(mad[112:]) >> 12, PacketRate: bits(mad[115], 5, 0), TrafficClass: mad[116], HopLimit: mad[117],
			SL: bits(mad[118], 7, 4), SubnetLocal: bits(mad[118], 3, 3) == 1, LocalACKTimeout: bits(mad[119], 7, 3),
		},
		Alternate:   [44]byte(mad[120:164]),
		PrivateData: [92]byte(mad[164:256]),
	}
}

func (r *REQ) put(mad []byte) bool {
	p := &r.Primary
	if !fits(uint64(r.LocalQPN), 24) || !fits(uint64(r.LocalEECN), 24) || !fits(uint64(r.RemoteEECN), 24) ||
		!fits(uint64(r.StartingPSN), 24) || !fits(uint64(r.RemoteCMResponseTimeout), 5) || !fits(uint64(r.LocalCMResponseTimeout), 5) ||
		!fits(uint64(r.TransportType), 2) || !fits(uint64(r.RetryCount), 3) || !fits(uint64(r.RNRRetryCount), 3) ||
		!fits(uint64(r.PathMTU), 4) || !fits(uint64(r.MaxCMRetries), 4) || !fits(uint64(r.ExtendedTransportType), 3) ||
		!fits(uint64(p.FlowLabel), 20) || !fits(uint64(p.PacketRate), 6) || !fits(uint64(p.SL), 4) || !fits(uint64(p.LocalACKTimeout), 5) {
		return false
	}
	be.PutUint32(mad[24:], r.LocalCommID)
	be.PutUint64(mad[32:], r.ServiceID)
	be.PutUint64(mad[40:], r.LocalCAGUID)
	be.PutUint32(mad[52:], r.LocalQKey)
	put24(mad, 56, r.LocalQPN)
	mad[59] = r.ResponderResources
	put24(mad, 60, r.LocalEECN)
	mad[63] = r.InitiatorDepth
	put24(mad, 64, r.RemoteEECN)
	mad[67] = r.RemoteCMResponseTimeout<<3 | r.TransportType<<1 | flag(r.EndToEndFlowControl)
	put24(mad, 68, r.StartingPSN)
	mad[71] = r.LocalCMResponseTimeout<<3 | r.RetryCount
	be.PutUint16(mad[72:], r.PKey)
	mad[74] = r.PathMTU<<4 | flag(r.RDCExists)<<3 | r.RNRRetryCount
	mad[75] = r.MaxCMRetries<<4 | flag(r.SRQ)<<3 | r.ExtendedTransportType
	be.PutUint16(mad[76:], p.LocalLID)
	be.PutUint16(mad[78:], p.RemoteLID)
	copy(mad[80:96], p.LocalGID[:])
	copy(mad[96:112], p.RemoteGID[:])
	be.PutUint32(mad[112:], p.FlowLabel<<12)
	mad[115] = p.PacketRate
	mad[116] = p.TrafficClass
	mad[117] = p.HopLimit
	mad[118] = p.SL<<4 | flag(p.SubnetLocal)<<3
	mad[119] = p.LocalACKTimeout << 3
	copy(mad[120:164], r.Alternate[:])
	copy(mad[164:], r.PrivateData[:])
	return true
}

// REP accepts a REQ.
type REP struct {
	Comm
	LocalQKey                          uint32
	LocalQPN, LocalEECN, StartingPSN   uint32 // 24 bits each
	ResponderResources, InitiatorDepth uint8
	TargetACKDelay                     uint8 // 5 bits
	FailoverAccepted                   uint8 // 2 bits
	EndToEndFlowControl                bool
	RNRRetryCount                      uint8 // 3 bits
	SRQ                                bool
	LocalCAGUID                        uint64
	PrivateData                        [196]byte
}

func (*REP) Attr() Attr { return AttrREP }

func getREP(mad []byte) *REP {
	return &REP{Comm: getComm(mad), LocalQKey: be.Uint32(mad[32:]), LocalQPN: u24(mad, 36), LocalEECN: u24(mad, 40),
		StartingPSN: u24(mad, 44), ResponderResources: mad[48], InitiatorDepth: mad[49], TargetACKDelay: bits(mad[50], 7, 3),
		FailoverAccepted: bits(mad[50], 2, 1), EndToEndFlowControl: bits(mad[50], 0, 0) == 1, RNRRetryCount: bits(mad[51], 7, 5),
		SRQ: bits(mad[51], 4, 4) == 1, LocalCAGUID: be.Uint64(mad[52:]), PrivateData: [196]byte(mad[60:256])}
}

func (r *REP) put(mad []byte) bool {
	if !fits(uint64(r.LocalQPN), 24) || !fits(uint64(r.LocalEECN), 24) || !fits(uint64(r.StartingPSN), 24) ||
		!fits(uint64(r.TargetACKDelay), 5) || !fits(uint64(r.FailoverAccepted), 2) || !fits(uint64(r.RNRRetryCount), 3) {
		return false
	}
	r.Comm.put(mad)
	be.PutUint32(mad[32:], r.LocalQKey)
	put24(mad, 36, r.LocalQPN)
	put24(mad, 40, r.LocalEECN)
	put24(mad, 44, r.StartingPSN)
	mad[48], mad[49] = r.ResponderResources, r.InitiatorDepth
	mad[50] = r.TargetACKDelay<<3 | r.FailoverAccepted<<1 | flag(r.EndToEndFlowControl)
	mad[51] = r.RNRRetryCount<<5 | flag(r.SRQ)<<4
	be.PutUint64(mad[52:], r.LocalCAGUID)
	copy(mad[60:], r.PrivateData[:])
	return true
}

// RTU tells the passive side the connection is ready.
type RTU struct {
	Comm
	PrivateData [224]byte
}

func (*RTU) Attr() Attr { return AttrRTU }

func (r *RTU) put(mad []byte) bool {
	r.Comm.put(mad)
	copy(mad[32:], r.PrivateData[:])
	return true
}

// DREQ asks to disconnect; RemoteQPN is the receiver's QPN.
type DREQ struct {
	Comm
	RemoteQPN   uint32 // 24 bits
	PrivateData [220]byte
}

func (*DREQ) Attr() Attr { return AttrDREQ }

func (r *DREQ) put(mad []byte) bool {
	if !fits(uint64(r.RemoteQPN), 24) {
		return false
	}
	r.Comm.put(mad)
	put24(mad, 32, r.RemoteQPN)
	copy(mad[36:], r.PrivateData[:])
	return true
}

// DREP answers a DREQ.
type DREP struct {
	Comm
	PrivateData [224]byte
}

func (*DREP) Attr() Attr { return AttrDREP }

func (r *DREP) put(mad []byte) bool {
	r.Comm.put(mad)
	copy(mad[32:], r.PrivateData[:])
	return true
}

// RejReason is why a REJ rejects (IBTA table 112, Linux's ib_cm_rej_reason).
type RejReason uint16

// The reasons. Linux sends RejInvalidServiceID when no listener matches a
// REQ, RejStaleConn for a REQ naming a connection in timewait,
// RejInvalidGID when it cannot resolve the REQ's path, RejConsumerDefined
// when the application rejects (rdma_reject) and RejTimeout when its REQ
// or REP went unanswered.
const (
	RejNoQP                     RejReason = 1
	RejNoEEC                    RejReason = 2
	RejNoResources              RejReason = 3
	RejTimeout                  RejReason = 4
	RejUnsupported              RejReason = 5
	RejInvalidCommID            RejReason = 6
	RejInvalidCommInstance      RejReason = 7
	RejInvalidServiceID         RejReason = 8
	RejInvalidTransportType     RejReason = 9
	RejStaleConn                RejReason = 10
	RejRDCNotExist              RejReason = 11
	RejInvalidGID               RejReason = 12
	RejInvalidLID               RejReason = 13
	RejInvalidSL                RejReason = 14
	RejInvalidTrafficClass      RejReason = 15
	RejInvalidHopLimit          RejReason = 16
	RejInvalidPacketRate        RejReason = 17
	RejInvalidAltGID            RejReason = 18
	RejInvalidAltLID            RejReason = 19
	RejInvalidAltSL             RejReason = 20
	RejInvalidAltTrafficClass   RejReason = 21
	RejInvalidAltHopLimit       RejReason = 22
	RejInvalidAltPacketRate     RejReason = 23
	RejPortCMRedirect           RejReason = 24
	RejPortRedirect             RejReason = 25
	RejInvalidMTU               RejReason = 26
	RejInsufficientRespRes      RejReason = 27
	RejConsumerDefined          RejReason = 28
	RejInvalidRNRRetry          RejReason = 29
	RejDuplicateLocalCommID     RejReason = 30
	RejInvalidClassVersion      RejReason = 31
	RejInvalidFlowLabel         RejReason = 32
	RejInvalidAltFlowLabel      RejReason = 33
	RejVendorOptionNotSupported RejReason = 35
)

// REJ rejects a REQ (MsgRejected 0), a REP (1) or another message (2).
type REJ struct {
	Comm
	MsgRejected   uint8 // 2 bits
	RejectInfoLen uint8 // 7 bits
	Reason        RejReason
	ARI           [72]byte
	PrivateData   [148]byte
}

func (*REJ) Attr() Attr { return AttrREJ }

func (r *REJ) put(mad []byte) bool {
	if !fits(uint64(r.MsgRejected), 2) || !fits(uint64(r.RejectInfoLen), 7) {
		return false
	}
	r.Comm.put(mad)
	mad[32] = r.MsgRejected << 6
	mad[33] = r.RejectInfoLen << 1
	be.PutUint16(mad[34:], uint16(r.Reason))
	copy(mad[36:108], r.ARI[:])
	copy(mad[108:], r.PrivateData[:])
	return true
}

// MRA asks the peer to wait longer for a REP or RTU (message REQ 0, REP 1,
// other 2); ServiceTimeout is 4.096 µs × 2^value.
type MRA struct {
	Comm
	MsgMRAed       uint8 // 2 bits
	ServiceTimeout uint8 // 5 bits
	PrivateData    [222]byte
}

func (*MRA) Attr() Attr { return AttrMRA }

func (r *MRA) put(mad []byte) bool {
	if !fits(uint64(r.MsgMRAed), 2) || !fits(uint64(r.ServiceTimeout), 5) {
		return false
	}
	r.Comm.put(mad)
	mad[32] = r.MsgMRAed << 6
	mad[33] = r.ServiceTimeout << 3
	copy(mad[34:], r.PrivateData[:])
	return true
}

// SIDRREQ asks which UD QP serves a service ID (Service ID Resolution,
// IBTA §12.11). rdma_cm sends one for RDMA_PS_UDP and RDMA_PS_IPOIB ids,
// with the IP header at the head of its private data as in a REQ.
type SIDRREQ struct {
	RequestID   uint32 // the sender's ID for the request; the SIDR_REP echoes it
	PKey        uint16
	ServiceID   uint64
	PrivateData [216]byte
}

func (*SIDRREQ) Attr() Attr { return AttrSIDRREQ }

func (r *SIDRREQ) put(mad []byte) bool {
	be.PutUint32(mad[24:], r.RequestID)
	be.PutUint16(mad[28:], r.PKey)
	be.PutUint64(mad[32:], r.ServiceID)
	copy(mad[40:], r.PrivateData[:])
	return true
}

// SIDRStatus is a SIDR_REP's status (IBTA table 120).
type SIDRStatus uint8

// The statuses; Linux's ib_cm_sidr_status has the same values.
const (
	SIDRValid              SIDRStatus = 0 // QPN and Q_Key are the service's
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported (no listener)
	SIDRRejected           SIDRStatus = 2 // the service rejected the request
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // redirect: AdditionalInfo holds a ClassPortInfo
	SIDRUnsupportedVersion SIDRStatus = 5 // unsupported class version
)

var sidrStatusNames = [...]string{"valid", "service ID not supported", "rejected", "no QP", "redirect", "unsupported class version"}

func (s SIDRStatus) String() string {
	if int(s) < len(sidrStatusNames) {
		return sidrStatusNames[s]
	}
	return fmt.Sprintf("SIDRStatus(%d)", uint8(s))
}

// SIDRREP answers a SIDR_REQ with the QPN and Q_Key of the service's UD QP.
type SIDRREP struct {
	RequestID         uint32 // the SIDR_REQ's
	Status            SIDRStatus
	AdditionalInfoLen uint8  // bytes of AdditionalInfo in use
	VendorID          uint32 // 24 bits (IBTA 1.4; Linux's ECE): its high 16 bits precede the QPN, its low 8 follow it
	QPN               uint32 // 24 bits
	ServiceID         uint64
	QKey              uint32
	AdditionalInfo    [72]byte
	PrivateData       [136]byte
}

func (*SIDRREP) Attr() Attr { return AttrSIDRREP }

func getSIDRREP(mad []byte) *SIDRREP {
	return &SIDRREP{RequestID: be.Uint32(mad[24:]), Status: SIDRStatus(mad[28]), AdditionalInfoLen: mad[29],
		VendorID: uint32(be.Uint16(mad[30:]))<<8 | uint32(mad[35]), QPN: u24(mad, 32), ServiceID: be.Uint64(mad[36:]),
		QKey: be.Uint32(mad[44:]), AdditionalInfo: [72]byte(mad[48:120]), PrivateData: [136]byte(mad[120:256])}
}

func (r *SIDRREP) put(mad []byte) bool {
	if !fits(uint64(r.QPN), 24) || !fits(uint64(r.VendorID), 24) {
		return false
	}
	be.PutUint32(mad[24:], r.RequestID)
	mad[28], mad[29] = uint8(r.Status), r.AdditionalInfoLen
	be.PutUint16(mad[30:], uint16(r.VendorID>>8))
	put24(mad, 32, r.QPN)
	mad[35] = byte(r.VendorID)
	be.PutUint64(mad[36:], r.ServiceID)
	be.PutUint32(mad[44:], r.QKey)
	copy(mad[48:120], r.AdditionalInfo[:])
	copy(mad[120:], r.PrivateData[:])
	return true
}
