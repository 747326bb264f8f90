package uverbs

import "unsafe"

// The shared-memory layouts, defined once. Each abi* struct below is a layout as it lies in
// memory shared with a client, little-endian, every field naturally aligned so that Go and C
// lay it out alike, without padding, on every architecture. The Go codecs (ring.go) take their
// offsets from these structs; `go generate` writes provider/common/xp_abi.h from them
// (ABIHeader), the one header the C provider uses; TestABIHeaderGenerated and TestABIMatchesC
// fail if the two disagree. A field's abi tag is its C name; "atomic" marks a word both sides
// load and store atomically, "union" a field whose C type is a union of the variants listed in
// abiUnions.
//
// Changing a layout changes the protocol: regenerate the header (make generate-abi) and raise
// ABIVersion.

//go:generate go run ./abigen -o ../provider/common/xp_abi.h

// abiRingHeader is a ring's header: each index on its own cache line, so that the producer and
// the consumer do not share one. Slots follow it.
type abiRingHeader struct {
	Producer uint32 `abi:"producer,atomic" doc:"slots the producer has published (free-running)"`
	_        [60]byte
	Consumer uint32 `abi:"consumer,atomic" doc:"slots the consumer has released (free-running)"`
	_        [60]byte
	Aux      uint32 `abi:"aux,atomic" doc:"CQ: the notification request (XP_NOTIFY_*); send ring: the QP's ibv_qp_state"`
	_        [60]byte
	Aux2     uint32 `abi:"aux2,atomic" doc:"CQ: non-zero once it overflowed; send ring: the index of the QP's engine"`
	_        [60]byte
}

// abiSendWQE is a send slot's header; the SG list (abiSGE each) or the inline data follows it.
type abiSendWQE struct {
	WRID       uint64      `abi:"wr_id"`
	Opcode     uint8       `abi:"opcode" doc:"enum ibv_wr_opcode"`
	SendFlags  uint8       `abi:"send_flags" doc:"enum ibv_send_flags: FENCE, SIGNALED, SOLICITED, INLINE"`
	NumSGE     uint16      `abi:"num_sge" doc:"SG entries after the header (0 with inline data)"`
	Imm        uint32      `abi:"imm_data" doc:"the immediate's value as on the wire (be32toh of ibv's)"`
	RemoteAddr uint64      `abi:"remote_addr" doc:"RDMA, atomics; BIND_MW: the window's address"`
	RKey       uint32      `abi:"rkey" doc:"RDMA, atomics; BIND_MW: the window's new key"`
	InvRKey    uint32      `abi:"invalidate_rkey" doc:"SEND_WITH_INV, LOCAL_INV; BIND_MW: the window's current key"`
	Args       abiSendArgs `abi:"args,union" doc:"the operation's operands"`
	InlineLen  uint32      `abi:"inline_len" doc:"bytes of inline data after the header"`
	AH         uint32      `abi:"ah" doc:"UD: the address handle (the client's handle from CREATE_AH)"`
	RemoteQPN  uint32      `abi:"remote_qpn" doc:"UD: the destination QP"`
	RemoteQKey uint32      `abi:"remote_qkey" doc:"UD: its Q_Key (top bit set: the QP's own)"`
}

// abiSendArgs is the 16 bytes of a send slot's operands, which the operation chooses between:
// the union of the structs abiUnions lists for it.
type abiSendArgs struct{ _ [2]uint64 }

// abiAtomicArgs is an atomic's operands (args.atomic).
type abiAtomicArgs struct {
	CompareAdd uint64 `abi:"compare_add"`
	Swap       uint64 `abi:"swap"`
}

// abiBindArgs is BIND_MW's operands (args.bind): the window's length, its access flags and the
// key of the MR it binds to.
type abiBindArgs struct {
	Length uint64 `abi:"length"`
	Access uint32 `abi:"access" doc:"enum ibv_access_flags"`
	LKey   uint32 `abi:"lkey" doc:"the MR's lkey"`
}

// abiUnions lists the variants of each union type, in the order C declares them.
var abiUnions = map[any][]abiVariant{
	abiSendArgs{}: {{"atomic", abiAtomicArgs{}}, {"bind", abiBindArgs{}}},
}

type abiVariant struct {
	name   string
	layout any
}

// abiSGE is one scatter/gather element of a send or a receive slot.
type abiSGE struct {
	Addr   uint64 `abi:"addr"`
	Length uint32 `abi:"length"`
	LKey   uint32 `abi:"lkey"`
}

// abiRecvWQE is a receive slot's header; the SG list follows it.
type abiRecvWQE struct {
	WRID     uint64 `abi:"wr_id"`
	NumSGE   uint32 `abi:"num_sge"`
	Reserved uint32 `abi:"reserved" doc:"0"`
}

// abiCQE is a CQ slot: struct ibv_wc's fields.
type abiCQE struct {
	WRID           uint64 `abi:"wr_id"`
	Status         uint8  `abi:"status" doc:"enum ibv_wc_status"`
	Opcode         uint8  `abi:"opcode" doc:"enum ibv_wc_opcode"`
	NetHdr         uint8  `abi:"net_hdr" doc:"a UD receive's: the datagram's IP version (4 or 6), else 0"`
	Reserved       uint8  `abi:"reserved" doc:"0"`
	VendorErr      uint32 `abi:"vendor_err"`
	ByteLen        uint32 `abi:"byte_len"`
	Imm            uint32 `abi:"imm_data" doc:"with IBV_WC_WITH_IMM: the value as on the wire (htobe32 for ibv's)"`
	InvalidatedKey uint32 `abi:"invalidated_rkey" doc:"with IBV_WC_WITH_INV"`
	QPNum          uint32 `abi:"qp_num"`
	SrcQP          uint32 `abi:"src_qp"`
	WCFlags        uint32 `abi:"wc_flags" doc:"enum ibv_wc_flags"`
	_              [24]byte
}

// abiDoorbell is one engine's line of the doorbell page.
type abiDoorbell struct {
	Sleeping uint32 `abi:"sleeping,atomic" doc:"non-zero while the engine sleeps (the number of its sleep): a post must then write the doorbell eventfd"`
	_        [60]byte
}

// abiDoorbellPage is the doorbell page, read-only to clients; engine i's line is
// engine[i % XP_DOORBELL_LINES].
type abiDoorbellPage struct {
	Engine [doorbellLines]abiDoorbell `abi:"engine"`
}

const doorbellLines = DoorbellPageSize / 64

// abiMsgHeader starts every control message; the body follows, its fields encoded one after
// another as body.go defines them.
type abiMsgHeader struct {
	Version uint16 `abi:"version" doc:"Version"`
	Op      uint16 `abi:"op" doc:"enum xp_op"`
	Seq     uint32 `abi:"seq" doc:"a reply carries its request's"`
	Errno   int32  `abi:"err" doc:"0, or the errno a reply fails with"`
}

// abiLayouts is every layout, in the order the header declares them.
var abiLayouts = []struct {
	name   string
	layout any
	doc    string
}{
	{"xp_ring_hdr", abiRingHeader{}, "A ring's header: each index on its own cache line. Slots follow it."},
	{"xp_sge", abiSGE{}, "A scatter/gather element of a send or a receive slot."},
	{"xp_send_wqe", abiSendWQE{}, "A send slot's header; its SG list (num_sge xp_sge) or inline data (inline_len bytes) follows."},
	{"xp_recv_wqe", abiRecvWQE{}, "A receive slot's header; its SG list follows."},
	{"xp_cqe", abiCQE{}, "A CQ slot: struct ibv_wc's fields."},
	{"xp_doorbell", abiDoorbell{}, "One engine's line of the doorbell page."},
	{"xp_doorbell_page", abiDoorbellPage{}, "The doorbell page, read-only to clients: engine i's line is engine[i % XP_DOORBELL_LINES]."},
	{"xp_msg_hdr", abiMsgHeader{}, "A control message's header; the body's fields follow one after another."},
}

// SendInline is the send-flags bit (IBV_SEND_INLINE) of a send slot whose data is inline.
const SendInline = 1 << 3

// abiConsts are the header's constants.
var abiConsts = []struct {
	name  string
	value int
	doc   string
}{
	{"XP_VERSION", Version, "the messages' framing version (struct xp_msg_hdr)"},
	{"XP_ABI_VERSION", ABIVersion, "the control protocol's version (HELLO)"},
	{"XP_DEVICE_INFO_EXT_LEN", ExtLen(DeviceInfoExt{}), "the bytes of HELLO's reply tail (DeviceInfoExt) this header knows"},
	{"XP_HEADER", HeaderLen, "sizeof(struct xp_msg_hdr)"},
	{"XP_MAX_MSG", MaxMessage, "the largest control message"},
	{"XP_MAX_FDS", MaxFDs, "the most file descriptors one control message carries"},
	{"XP_RING_HEADER", HeaderSize, "sizeof(struct xp_ring_hdr): the slots start here"},
	{"XP_SEND_SLOT_HEADER", SendSlotHeader, "sizeof(struct xp_send_wqe)"},
	{"XP_RECV_SLOT_HEADER", RecvSlotHeader, "sizeof(struct xp_recv_wqe)"},
	{"XP_SGE", SGESize, "sizeof(struct xp_sge)"},
	{"XP_CQE", CQESize, "sizeof(struct xp_cqe): a CQ's slot size"},
	{"XP_DOORBELL_PAGE", DoorbellPageSize, "sizeof(struct xp_doorbell_page)"},
	{"XP_DOORBELL_LINES", doorbellLines, "engines' lines in the doorbell page"},
	{"XP_NOTIFY_OFF", NotifyOff, "a CQ's aux: no notification requested"},
	{"XP_NOTIFY_ANY", NotifyAny, "a CQ's aux: notify on the next completion"},
	{"XP_NOTIFY_SOLICITED", NotifySolicited, "a CQ's aux: notify on the next solicited one"},
	{"XP_SEND_INLINE", SendInline, "send_flags: the data is inline (IBV_SEND_INLINE)"},
}

// The exported sizes are the layouts': each pair fails to compile (a negative array length)
// unless they are equal.
var (
	_ [HeaderSize - unsafe.Sizeof(abiRingHeader{})]struct{}
	_ [unsafe.Sizeof(abiRingHeader{}) - HeaderSize]struct{}
	_ [SendSlotHeader - unsafe.Sizeof(abiSendWQE{})]struct{}
	_ [unsafe.Sizeof(abiSendWQE{}) - SendSlotHeader]struct{}
	_ [RecvSlotHeader - unsafe.Sizeof(abiRecvWQE{})]struct{}
	_ [unsafe.Sizeof(abiRecvWQE{}) - RecvSlotHeader]struct{}
	_ [SGESize - unsafe.Sizeof(abiSGE{})]struct{}
	_ [unsafe.Sizeof(abiSGE{}) - SGESize]struct{}
	_ [CQESize - unsafe.Sizeof(abiCQE{})]struct{}
	_ [unsafe.Sizeof(abiCQE{}) - CQESize]struct{}
	_ [DoorbellPageSize - unsafe.Sizeof(abiDoorbellPage{})]struct{}
	_ [unsafe.Sizeof(abiDoorbellPage{}) - DoorbellPageSize]struct{}
	_ [HeaderLen - unsafe.Sizeof(abiMsgHeader{})]struct{}
	_ [unsafe.Sizeof(abiMsgHeader{}) - HeaderLen]struct{}
	_ [unsafe.Sizeof(abiSendArgs{}) - unsafe.Sizeof(abiAtomicArgs{})]struct{}
	_ [unsafe.Sizeof(abiSendArgs{}) - unsafe.Sizeof(abiBindArgs{})]struct{}
)

// Byte offsets of the fields the Go codecs read and write, from the layouts.
const (
	offProducer = unsafe.Offsetof(abiRingHeader{}.Producer)
	offConsumer = unsafe.Offsetof(abiRingHeader{}.Consumer)
	offAux      = unsafe.Offsetof(abiRingHeader{}.Aux)
	offAux2     = unsafe.Offsetof(abiRingHeader{}.Aux2)

	offSendWRID       = unsafe.Offsetof(abiSendWQE{}.WRID)
	offSendOpcode     = unsafe.Offsetof(abiSendWQE{}.Opcode)
	offSendFlags      = unsafe.Offsetof(abiSendWQE{}.SendFlags)
	offSendNumSGE     = unsafe.Offsetof(abiSendWQE{}.NumSGE)
	offSendImm        = unsafe.Offsetof(abiSendWQE{}.Imm)
	offSendRemoteAddr = unsafe.Offsetof(abiSendWQE{}.RemoteAddr)
	offSendRKey       = unsafe.Offsetof(abiSendWQE{}.RKey)
	offSendInvRKey    = unsafe.Offsetof(abiSendWQE{}.InvRKey)
	offSendCompareAdd = unsafe.Offsetof(abiSendWQE{}.Args) + unsafe.Offsetof(abiAtomicArgs{}.CompareAdd)
	offSendSwap       = unsafe.Offsetof(abiSendWQE{}.Args) + unsafe.Offsetof(abiAtomicArgs{}.Swap)
	offSendInlineLen  = unsafe.Offsetof(abiSendWQE{}.InlineLen)
	offSendAH         = unsafe.Offsetof(abiSendWQE{}.AH)
	offSendRemoteQPN  = unsafe.Offsetof(abiSendWQE{}.RemoteQPN)
	offSendRemoteQKey = unsafe.Offsetof(abiSendWQE{}.RemoteQKey)

	offSGEAddr   = unsafe.Offsetof(abiSGE{}.Addr)
	offSGELength = unsafe.Offsetof(abiSGE{}.Length)
	offSGELKey   = unsafe.Offsetof(abiSGE{}.LKey)

	offRecvWRID     = unsafe.Offsetof(abiRecvWQE{}.WRID)
	offRecvNumSGE   = unsafe.Offsetof(abiRecvWQE{}.NumSGE)
	offRecvReserved = unsafe.Offsetof(abiRecvWQE{}.Reserved)

	offCQEWRID           = unsafe.Offsetof(abiCQE{}.WRID)
	offCQEStatus         = unsafe.Offsetof(abiCQE{}.Status)
	offCQEOpcode         = unsafe.Offsetof(abiCQE{}.Opcode)
	offCQENetHdr         = unsafe.Offsetof(abiCQE{}.NetHdr)
	offCQEReserved       = unsafe.Offsetof(abiCQE{}.Reserved)
	offCQEVendorErr      = unsafe.Offsetof(abiCQE{}.VendorErr)
	offCQEByteLen        = unsafe.Offsetof(abiCQE{}.ByteLen)
	offCQEImm            = unsafe.Offsetof(abiCQE{}.Imm)
	offCQEInvalidatedKey = unsafe.Offsetof(abiCQE{}.InvalidatedKey)
	offCQEQPNum          = unsafe.Offsetof(abiCQE{}.QPNum)
	offCQESrcQP          = unsafe.Offsetof(abiCQE{}.SrcQP)
	offCQEWCFlags        = unsafe.Offsetof(abiCQE{}.WCFlags)

	doorbellStride = unsafe.Sizeof(abiDoorbell{})
	offSleeping    = unsafe.Offsetof(abiDoorbell{}.Sleeping)

	offMsgVersion = unsafe.Offsetof(abiMsgHeader{}.Version)
	offMsgOp      = unsafe.Offsetof(abiMsgHeader{}.Op)
	offMsgSeq     = unsafe.Offsetof(abiMsgHeader{}.Seq)
	offMsgErrno   = unsafe.Offsetof(abiMsgHeader{}.Errno)

	// BIND_MW's access flags and lkey share the 8 bytes of an atomic's swap operand, which
	// SendWQE carries them in: the lkey in its high half.
	bindLKeyShift = 8 * (unsafe.Offsetof(abiBindArgs{}.LKey) - unsafe.Offsetof(abiAtomicArgs{}.Swap))
)

// Bind is a BIND_MW's operands as SendWQE carries them: the window's length (CompareAdd), its
// access flags and the MR's lkey (Swap, as args.bind lays them over the atomic's swap operand).
func (w *SendWQE) Bind() (length uint64, access, lkey uint32) {
	return w.CompareAdd, uint32(w.Swap), uint32(w.Swap >> bindLKeyShift)
}

// SetBind sets a BIND_MW's operands (see Bind).
func (w *SendWQE) SetBind(length uint64, access, lkey uint32) {
	w.CompareAdd, w.Swap = length, uint64(lkey)<<bindLKeyShift|uint64(access)
}
