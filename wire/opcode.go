package wire

import "strconv"

// Opcode is the BTH opcode: bits 7:5 select the transport, bits 4:0 the
// operation (IBTA vol 1 §9.2, include/rdma/ib_pack.h).
type Opcode uint8

// RC opcodes.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInv        Opcode = 0x16
	RCSendOnlyInv        Opcode = 0x17
)

// UC opcodes are the RC SEND and RDMA WRITE operations under transport 0x20
// (UC has no READ, atomic, acknowledge or invalidate opcodes); UD has only the
// two SEND_ONLY opcodes.
const (
	UCSendFirst    Opcode = 0x20
	UCSendMiddle   Opcode = 0x21
	UCSendLast     Opcode = 0x22
	UCSendLastImm  Opcode = 0x23
	UCSendOnly     Opcode = 0x24
	UCSendOnlyImm  Opcode = 0x25
	UCWriteFirst   Opcode = 0x26
	UCWriteMiddle  Opcode = 0x27
	UCWriteLast    Opcode = 0x28
	UCWriteLastImm Opcode = 0x29
	UCWriteOnly    Opcode = 0x2a
	UCWriteOnlyImm Opcode = 0x2b
	UDSendOnly     Opcode = 0x64
	UDSendOnlyImm  Opcode = 0x65
	CNP            Opcode = 0x81 // RoCEv2 congestion notification packet
)

const opcodeTransport Opcode = 0xe0

// Transport is the transport-service part (bits 7:5) of an opcode.
type Transport uint8

// Transports.
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportRD  Transport = 0x40
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
	TransportXRC Transport = 0xa0
)

// Transport returns the opcode's transport service.
func (o Opcode) Transport() Transport { return Transport(o & opcodeTransport) }

// String returns the IBTA name, e.g. "RC_SEND_ONLY", or "Opcode(0x15)".
func (o Opcode) String() string {
	if e := &opTable[o]; e.known {
		return e.info.Name
	}
	return "Opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	}
	return "Transport(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// HeaderSet says which headers follow the BTH. On the wire they appear in
// this fixed order (rxe_opcode.c offsets): DETH, RETH, AtomicETH, AETH,
// AtomicAckETH, ImmDt, IETH, CNP reserved bytes, payload. No opcode has both
// request headers (DETH..AtomicETH, ImmDt, IETH) and response headers.
type HeaderSet uint16

// Header bits.
const (
	HasDETH HeaderSet = 1 << iota
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasCNPReserved // 16 reserved bytes after the BTH of a CNP
	HasPayload     // the opcode may carry payload bytes
)

// OpFlags classify an opcode the way rxe's opcode masks do.
type OpFlags uint16

// Flags.
const (
	FlagStart        OpFlags = 1 << iota // first packet of a message (FIRST or ONLY)
	FlagMiddle                           // MIDDLE packet
	FlagEnd                              // last packet of a message (LAST or ONLY)
	FlagRequest                          // travels requester -> responder
	FlagResponse                         // travels responder -> requester (ACK, READ response, atomic ACK)
	FlagConsumesRecv                     // consumes a receive WQE at the responder (rxe RXE_RWR_MASK)
	FlagCompletes                        // generates a receive completion (rxe RXE_COMP_MASK)
	FlagSend                             // part of a SEND message
	FlagWrite                            // part of an RDMA WRITE message
	FlagRead                             // RDMA READ request
	FlagAtomic                           // atomic request
)

// OpInfo describes one opcode.
type OpInfo struct {
	Name      string
	Headers   HeaderSet
	Flags     OpFlags
	HeaderLen int // BTH plus extension headers, in bytes
}

// Has reports whether every header in h is present.
func (i OpInfo) Has(h HeaderSet) bool { return i.Headers&h == h }

// Is reports whether every flag in f is set.
func (i OpInfo) Is(f OpFlags) bool { return i.Flags&f == f }

// Info returns the opcode's description; ok is false for opcodes this package
// does not know (RD, XRC, reserved, FLUSH and ATOMIC_WRITE).
func (o Opcode) Info() (info OpInfo, ok bool) {
	e := &opTable[o]
	return e.info, e.known
}

type opEntry struct {
	info  OpInfo
	known bool
}

// opTable is indexed by opcode. It is built once and only read afterwards.
var opTable = buildOpTable()

// Header sizes in bytes (include/rdma/ib_pack.h, rxe_hdr.h).
const (
	EthHeaderLen    = 14
	VLANTagLen      = 4
	IPv4HeaderLen   = 20
	IPv6HeaderLen   = 40
	UDPHeaderLen    = 8
	BTHLen          = 12
	DETHLen         = 8
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	CNPReservedLen  = 16
	ICRCLen         = 4
)

func headerLen(h HeaderSet) int {
	n := BTHLen
	for _, x := range [...]struct {
		bit HeaderSet
		len int
	}{
		{HasDETH, DETHLen}, {HasRETH, RETHLen}, {HasAtomicETH, AtomicETHLen},
		{HasAETH, AETHLen}, {HasAtomicAckETH, AtomicAckETHLen}, {HasImmDt, ImmDtLen},
		{HasIETH, IETHLen}, {HasCNPReserved, CNPReservedLen},
	} {
		if h&x.bit != 0 {
			n += x.len
		}
	}
	return n
}

func buildOpTable() (t [256]opEntry) {
	const (
		s    = FlagStart
		m    = FlagMiddle
		e    = FlagEnd
		req  = FlagRequest
		resp = FlagResponse
		rwr  = FlagConsumesRecv
		comp = FlagCompletes
		snd  = FlagSend
		wr   = FlagWrite
		rd   = FlagRead
		atom = FlagAtomic
		p    = HasPayload
	)
	// Operations shared by RC and UC: rxe_opcode.c, identical masks for both.
	sendWrite := []struct {
		op    Opcode
		name  string
		h     HeaderSet
		flags OpFlags
	}{
		{0x00, "SEND_FIRST", p, req | snd | s | rwr},
		{0x01, "SEND_MIDDLE", p, req | snd | m},
		{0x02, "SEND_LAST", p, req | snd | e | comp},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", HasImmDt | p, req | snd | e | comp},
		{0x04, "SEND_ONLY", p, req | snd | s | e | rwr | comp},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", HasImmDt | p, req | snd | s | e | rwr | comp},
		{0x06, "RDMA_WRITE_FIRST", HasRETH | p, req | wr | s},
		{0x07, "RDMA_WRITE_MIDDLE", p, req | wr | m},
		{0x08, "RDMA_WRITE_LAST", p, req | wr | e},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt | p, req | wr | e | rwr | comp},
		{0x0a, "RDMA_WRITE_ONLY", HasRETH | p, req | wr | s | e},
		{0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt | p, req | wr | s | e | rwr | comp},
	}
	rcOnly := []struct {
		op    Opcode
		name  string
		h     HeaderSet
		flags OpFlags
	}{
		{0x0c, "RDMA_READ_REQUEST", HasRETH, req | rd | s | e},
		{0x0d, "RDMA_READ_RESPONSE_FIRST", HasAETH | p, resp | s},
		{0x0e, "RDMA_READ_RESPONSE_MIDDLE", p, resp | m},
		{0x0f, "RDMA_READ_RESPONSE_LAST", HasAETH | p, resp | e},
		{0x10, "RDMA_READ_RESPONSE_ONLY", HasAETH | p, resp | s | e},
		{0x11, "ACKNOWLEDGE", HasAETH, resp | s | e},
		{0x12, "ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, resp | s | e},
		{0x13, "COMPARE_SWAP", HasAtomicETH, req | atom | s | e},
		{0x14, "FETCH_ADD", HasAtomicETH, req | atom | s | e},
		{0x16, "SEND_LAST_WITH_INVALIDATE", HasIETH | p, req | snd | e | comp},
		{0x17, "SEND_ONLY_WITH_INVALIDATE", HasIETH | p, req | snd | s | e | rwr | comp},
	}
	set := func(op Opcode, name string, h HeaderSet, f OpFlags) {
		t[op] = opEntry{info: OpInfo{Name: name, Headers: h, Flags: f, HeaderLen: headerLen(h)}, known: true}
	}
	for _, x := range sendWrite {
		set(Opcode(TransportRC)|x.op, "RC_"+x.name, x.h, x.flags)
		set(Opcode(TransportUC)|x.op, "UC_"+x.name, x.h, x.flags)
	}
	for _, x := range rcOnly {
		set(Opcode(TransportRC)|x.op, "RC_"+x.name, x.h, x.flags)
	}
	set(UDSendOnly, "UD_SEND_ONLY", HasDETH|p, req|snd|s|e|rwr|comp)
	set(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", HasDETH|HasImmDt|p, req|snd|s|e|rwr|comp)
	set(CNP, "CNP", HasCNPReserved, 0)
	return t
}
