package wire

import "net/netip"

// Protocol constants and the values Linux rxe transmits.
const (
	// UDPPort is the RoCEv2 UDP destination port (ROCE_V2_UDP_DPORT).
	UDPPort = 4791
	// MinFrameLen is the Ethernet minimum frame length without FCS. Encode
	// never pads to it (the smallest RoCEv2 frame, a BTH-only IPv4 packet, is
	// 58 bytes): the transmit path must zero-extend short frames. Decode
	// takes lengths from the IP header, so receive-side padding is ignored.
	MinFrameLen = 60
	// DefaultTTL is the IPv4 TTL / IPv6 hop limit rxe always sends.
	DefaultTTL = 64
	// DefaultPKey is the only P_Key rxe sends (IB_DEFAULT_PKEY_FULL).
	DefaultPKey = 0xffff
)

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	ipProtoUDP    = 17
	mask24        = 0x00ffffff
	mask20        = 0x000fffff
)

// Ethernet is the link header. The EtherType is implied by IP.V6.
type Ethernet struct {
	Dst, Src [6]byte
	HasVLAN  bool
	VLANTCI  uint16 // 802.1Q tag control (PCP, DEI, VID); TPID is 0x8100
}

// IP holds the IPv4 or IPv6 header fields that are not derived from lengths.
// Fields that do not exist in the selected version are ignored by Encode and
// zero after Decode (ID and DF for IPv6, FlowLabel for IPv4).
type IP struct {
	V6        bool
	Src, Dst  netip.Addr
	TOS       uint8  // IPv4 TOS / IPv6 traffic class: DSCP<<2 | ECN
	TTL       uint8  // IPv4 TTL / IPv6 hop limit; rxe sends DefaultTTL
	ID        uint16 // IPv4 identification; covered by the ICRC, so the caller chooses it
	DF        bool   // IPv4 don't-fragment; rxe always sets it
	FlowLabel uint32 // IPv6 flow label (20 bits); rxe sends 0
}

// UDP is the UDP header. Length is filled by Decode and computed by Encode.
// Checksum is written verbatim: leave it 0 (what rxe and hardware send, valid
// for RoCEv2 over IPv4 and IPv6); Decode reports the received value without
// verifying it, since the ICRC covers everything a checksum would.
type UDP struct {
	SrcPort, DstPort, Length, Checksum uint16
}

// BTH is the 12-byte base transport header.
type BTH struct {
	Opcode Opcode
	SE     bool  // solicited event
	MigReq bool  // rxe sends 0; ignore on receive
	PadCnt uint8 // computed by Encode from the payload length
	TVer   uint8 // must be 0
	PKey   uint16
	FECN   bool
	BECN   bool
	Resv6a uint8 // 6 reserved bits after BECN: sent as 0, preserved on decode
	DestQP uint32
	AckReq bool
	Resv7  uint8 // 7 reserved bits after AckReq: sent as 0, preserved on decode
	PSN    uint32
}

// RETH is the RDMA extended transport header.
type RETH struct {
	VA   uint64
	RKey uint32
	Len  uint32 // DMA length of the whole message
}

// AETH is the ACK extended transport header: an 8-bit syndrome (see aeth.go)
// and a 24-bit message sequence number.
type AETH struct {
	Syndrome uint8
	MSN      uint32
}

// AtomicETH is the atomic extended transport header (28 bytes, packed).
type AtomicETH struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // swap value (COMPARE_SWAP) or addend (FETCH_ADD)
	Compare uint64
}

// DETH is the datagram extended transport header (UD).
type DETH struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
	Resv  uint8  // reserved byte before SrcQP: sent as 0, preserved on decode
}

// Packet is a decoded RoCEv2 frame, or the description of one to encode.
// Only the extension headers present for BTH.Opcode are meaningful.
type Packet struct {
	Eth       Ethernet
	IP        IP
	UDP       UDP
	BTH       BTH
	RETH      RETH
	AETH      AETH
	AtomicETH AtomicETH
	AtomicAck uint64 // AtomicAckETH: the original remote value
	ImmDt     uint32 // immediate data as a big-endian number (opaque to the transport)
	IETH      uint32 // R_Key to invalidate
	DETH      DETH
	// Payload: after Decode it aliases the frame (no copy, pad excluded);
	// for Encode it holds the bytes to copy in.
	Payload []byte
	// PayloadTail is the rest of the payload when DecodeSplit found it in
	// the frame's second piece (aliasing it); empty after Decode. Encode
	// ignores it.
	PayloadTail []byte
	// ICRC: after Decode the value found in the frame (already verified),
	// as the little-endian number rxe stores. Ignored by Encode.
	ICRC uint32
}

// Reset makes p a fresh packet carrying the header values rxe transmits:
// TTL/hop limit 64, DF set, P_Key 0xFFFF, UDP destination port 4791, UDP
// checksum 0, flow label 0. Every other field is zero. Decode overwrites all
// fields itself, so Reset is only needed when building packets to encode.
func (p *Packet) Reset() {
	*p = Packet{}
	p.IP.TTL = DefaultTTL
	p.IP.DF = true
	p.UDP.DstPort = UDPPort
	p.BTH.PKey = DefaultPKey
}

// FrameLen returns the number of bytes Encode will write for p (Ethernet
// header through ICRC, without Ethernet minimum-length padding), or 0 if the
// opcode is unknown.
func (p *Packet) FrameLen() int {
	info, ok := p.BTH.Opcode.Info()
	if !ok {
		return 0
	}
	return frameLen(p, &info, len(p.Payload))
}

func l2Len(e *Ethernet) int {
	if e.HasVLAN {
		return EthHeaderLen + VLANTagLen
	}
	return EthHeaderLen
}

func l3Len(v6 bool) int {
	if v6 {
		return IPv6HeaderLen
	}
	return IPv4HeaderLen
}

// padLen is BTH.PadCnt for a payload: the bytes that align it to 4.
func padLen(payloadLen int) int { return -payloadLen & 3 }

func frameLen(p *Packet, info *OpInfo, payloadLen int) int {
	return l2Len(&p.Eth) + l3Len(p.IP.V6) + UDPHeaderLen + info.HeaderLen + payloadLen + padLen(payloadLen) + ICRCLen
}
