package uverbs

import (
	"errors"
	"fmt"
)

// Version is the version of the messages' framing (Header); a daemon
// disconnects a client whose messages carry another. What the bodies mean
// is versioned apart, by HELLO (ABIVersion).
const Version = 1

// ABIVersion is the control protocol's version a client states in HELLO:
// it changes only when a body changes incompatibly. Fields added to an
// extensible part (ext.go), such as the HELLO reply's tail, need no new
// version. A daemon serves MinABIVersion through ABIVersion and refuses
// any other with EPROTONOSUPPORT.
const (
	ABIVersion    = 1
	MinABIVersion = 1
)

// Op names a control request. Replies carry the request's op and sequence
// number.
type Op uint16

// The control requests.
const (
	OpHello Op = iota + 1
	OpAllocPD
	OpDeallocPD
	OpRegMR
	OpDeregMR
	OpCreateCQ
	OpDestroyCQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpDestroyQP
	OpCounters
	OpShutdown
	OpList
	OpGetEvent
	OpCreateSRQ
	OpModifySRQ
	OpQuerySRQ
	OpDestroySRQ
	OpAllocMW
	OpDeallocMW
	OpCreateAH
	OpDestroyAH
	OpCMCreateChannel
	OpCMDestroyChannel
	OpCMCreateID
	OpCMDestroyID
	OpCMMigrateID
	OpCMBind
	OpCMResolveAddr
	OpCMResolveRoute
	OpCMListen
	OpCMAttachQP
	OpCMConnect
	OpCMAccept
	OpCMReject
	OpCMDisconnect
	OpCMEstablish
	OpCMQuery
	OpCMInitQPAttr
	OpCMGetEvent
	OpCMSetOption
	OpAttachMcast
	OpDetachMcast
	OpCMJoinMcast
	OpCMLeaveMcast
	OpResizeCQ
	OpAllocDM
	OpFreeDM
	OpRegDMMR
	OpDoorbell
	opEnd
)

var opNames = [...]string{
	OpHello: "HELLO", OpAllocPD: "ALLOC_PD", OpDeallocPD: "DEALLOC_PD", OpRegMR: "REG_MR", OpDeregMR: "DEREG_MR",
	OpCreateCQ: "CREATE_CQ", OpDestroyCQ: "DESTROY_CQ", OpCreateQP: "CREATE_QP", OpModifyQP: "MODIFY_QP",
	OpQueryQP: "QUERY_QP", OpDestroyQP: "DESTROY_QP", OpCounters: "COUNTERS", OpShutdown: "SHUTDOWN", OpList: "LIST", OpGetEvent: "GET_EVENT",
	OpCreateSRQ: "CREATE_SRQ", OpModifySRQ: "MODIFY_SRQ", OpQuerySRQ: "QUERY_SRQ", OpDestroySRQ: "DESTROY_SRQ",
	OpAllocMW: "ALLOC_MW", OpDeallocMW: "DEALLOC_MW", OpCreateAH: "CREATE_AH", OpDestroyAH: "DESTROY_AH",
	OpCMCreateChannel: "CM_CREATE_CHANNEL", OpCMDestroyChannel: "CM_DESTROY_CHANNEL", OpCMCreateID: "CM_CREATE_ID",
	OpCMDestroyID: "CM_DESTROY_ID", OpCMMigrateID: "CM_MIGRATE_ID", OpCMBind: "CM_BIND", OpCMResolveAddr: "CM_RESOLVE_ADDR",
	OpCMResolveRoute: "CM_RESOLVE_ROUTE", OpCMListen: "CM_LISTEN", OpCMAttachQP: "CM_ATTACH_QP", OpCMConnect: "CM_CONNECT",
	OpCMAccept: "CM_ACCEPT", OpCMReject: "CM_REJECT", OpCMDisconnect: "CM_DISCONNECT", OpCMEstablish: "CM_ESTABLISH",
	OpCMQuery: "CM_QUERY", OpCMInitQPAttr: "CM_INIT_QP_ATTR", OpCMGetEvent: "CM_GET_EVENT", OpCMSetOption: "CM_SET_OPTION",
	OpAttachMcast: "ATTACH_MCAST", OpDetachMcast: "DETACH_MCAST", OpCMJoinMcast: "CM_JOIN_MCAST", OpCMLeaveMcast: "CM_LEAVE_MCAST",
	OpResizeCQ: "RESIZE_CQ", OpAllocDM: "ALLOC_DM", OpFreeDM: "FREE_DM", OpRegDMMR: "REG_DM_MR",
	OpDoorbell: "DOORBELL",
}

func (o Op) String() string {
	if o > 0 && o < opEnd {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint16(o))
}

// MaxMessage is the largest control message either side sends or accepts.
const MaxMessage = 16 << 10

// MaxFDs is the most file descriptors one control message carries.
const MaxFDs = 4

// HeaderLen is the size of a message's header (abiMsgHeader): version u16,
// op u16, sequence u32, errno i32 (0 in requests and successful replies).
const HeaderLen = 12

// Header starts every control message.
type Header struct {
	Version uint16
	Op      Op
	Seq     uint32
	Errno   int32
}

// ErrMalformed is what decoding a message that does not parse returns.
var ErrMalformed = errors.New("uverbs: malformed message")

// Encoder appends a message's fields, little-endian.
type Encoder struct{ b []byte }

// NewMessage starts a message with header h.
func NewMessage(h Header) *Encoder {
	e := &Encoder{b: make([]byte, 0, 256)}
	// In abiMsgHeader's order.
	e.U16(h.Version)
	e.U16(uint16(h.Op))
	e.U32(h.Seq)
	e.U32(uint32(h.Errno))
	return e
}

// Bytes is the message so far.
func (e *Encoder) Bytes() []byte { return e.b }

func (e *Encoder) U8(v uint8)   { e.b = append(e.b, v) }
func (e *Encoder) U16(v uint16) { e.b = le.AppendUint16(e.b, v) }
func (e *Encoder) U32(v uint32) { e.b = le.AppendUint32(e.b, v) }
func (e *Encoder) U64(v uint64) { e.b = le.AppendUint64(e.b, v) }

// Bool appends a bool as one byte.
func (e *Encoder) Bool(v bool) {
	if v {
		e.U8(1)
	} else {
		e.U8(0)
	}
}

// Raw appends b with a u16 length.
func (e *Encoder) Raw(b []byte) {
	e.U16(uint16(len(b)))
	e.b = append(e.b, b...)
}

// Decoder reads a message's fields; the first field that overruns the
// message makes every later read return zero and Err report it.
type Decoder struct {
	b   []byte
	err error
}

// Decode splits a message into its header and a decoder of its body.
func Decode(msg []byte) (Header, *Decoder, error) {
	if len(msg) < HeaderLen || len(msg) > MaxMessage {
		return Header{}, nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(msg))
	}
	h := Header{Version: le.Uint16(msg[offMsgVersion:]), Op: Op(le.Uint16(msg[offMsgOp:])), Seq: le.Uint32(msg[offMsgSeq:]),
		Errno: int32(le.Uint32(msg[offMsgErrno:]))}
	return h, &Decoder{b: msg[HeaderLen:]}, nil
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil || n > len(d.b) {
		if d.err == nil {
			d.err = fmt.Errorf("%w: %d bytes short", ErrMalformed, n-len(d.b))
		}
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *Decoder) U8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *Decoder) U16() uint16 {
	if b := d.take(2); b != nil {
		return le.Uint16(b)
	}
	return 0
}

func (d *Decoder) U32() uint32 {
	if b := d.take(4); b != nil {
		return le.Uint32(b)
	}
	return 0
}

func (d *Decoder) U64() uint64 {
	if b := d.take(8); b != nil {
		return le.Uint64(b)
	}
	return 0
}

// Bool reads a byte that must be 0 or 1.
func (d *Decoder) Bool() bool {
	v := d.U8()
	if v > 1 && d.err == nil {
		d.err = fmt.Errorf("%w: bool %d", ErrMalformed, v)
	}
	return v == 1
}

// Raw reads a u16-length-prefixed byte string (aliasing the message).
func (d *Decoder) Raw() []byte { return d.take(int(d.U16())) }

// End reports the first error, or trailing bytes.
func (d *Decoder) End() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.b))
	}
	return d.err
}

// DeviceInfo is the Hello reply: what ibv_query_device and ibv_query_port
// report, and how the rings are sized.
type DeviceInfo struct {
	Name            string     `abi:"name"`
	NodeGUID        uint64     `abi:"node_guid"`
	MAC             [6]byte    `abi:"mac"`
	MaxQP           uint32     `abi:"max_qp"`
	MaxQPWR         uint32     `abi:"max_qp_wr"`
	MaxSGE          uint32     `abi:"max_sge"`
	MaxCQE          uint32     `abi:"max_cqe"`
	MaxInlineData   uint32     `abi:"max_inline_data"`
	MaxMRSize       uint64     `abi:"max_mr_size"`
	MaxMsgSize      uint64     `abi:"max_msg_sz"`
	MaxQPRdAtom     uint32     `abi:"max_qp_rd_atom"`
	MaxQPInitRdAtom uint32     `abi:"max_qp_init_rd_atom"`
	MaxMTU          uint8      `abi:"max_mtu" doc:"enum ibv_mtu"`
	ActiveMTU       uint8      `abi:"active_mtu" doc:"enum ibv_mtu"`
	DataPath        string     `abi:"data_path"`
	GIDs            [][16]byte `abi:"gids"`
	Engines         uint32     `abi:"engines"`
}

// DeviceInfoExt is the Hello reply's extensible tail (ext.go), after its
// DeviceInfo: as many of its bytes as the client's Hello.ReplyExt asks
// for. New device attributes are appended here.
type DeviceInfoExt struct {
	// MaxDMSize is the most device memory one ALLOC_DM gives, 0 where the
	// kernel gives none (ibv_device_attr_ex's max_dm_size).
	MaxDMSize uint64 `abi:"max_dm_size"`
	// Doorbells is how many engines have a doorbell of their own for each
	// client: engine 0's comes with HELLO, each other's with DOORBELL. 0
	// (a daemon from before it) says HELLO's doorbell wakes them all.
	Doorbells uint32 `abi:"doorbells"`
}

// Put encodes i.
func (i *DeviceInfo) Put(e *Encoder) { e.Put(i) }

// Get decodes i.
func (i *DeviceInfo) Get(d *Decoder) { d.Get(i) }

// QPCap sizes a QP's queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32 `abi:"max_send_wr"`
	MaxRecvWR     uint32 `abi:"max_recv_wr"`
	MaxSendSGE    uint32 `abi:"max_send_sge"`
	MaxRecvSGE    uint32 `abi:"max_recv_sge"`
	MaxInlineData uint32 `abi:"max_inline_data"`
}

// CreateQP is the CREATE_QP request.
type CreateQP struct {
	PD     uint32 `abi:"pd"`
	SendCQ uint32 `abi:"send_cq"`
	RecvCQ uint32 `abi:"recv_cq"`
	SRQ    uint32 `abi:"srq" doc:"0 for none"`
	Type   uint8  `abi:"qp_type" doc:"enum ibv_qp_type"`
	SigAll bool   `abi:"sq_sig_all"`
	Cap    QPCap  `abi:"cap"`
}

// Put encodes q.
func (q *CreateQP) Put(e *Encoder) { e.Put(q) }

// Get decodes q.
func (q *CreateQP) Get(d *Decoder) { d.Get(q) }

// QPCreated is the CREATE_QP reply; the send and receive rings' memfds
// come with it, in that order.
type QPCreated struct {
	QP           uint32 `abi:"qp"`
	QPN          uint32 `abi:"qp_num"`
	Cap          QPCap  `abi:"cap"`
	SendSlots    uint32 `abi:"send_slots"`
	SendSlotSize uint32 `abi:"send_slot_size"`
	RecvSlots    uint32 `abi:"recv_slots"`
	RecvSlotSize uint32 `abi:"recv_slot_size"`
}

// Put encodes q.
func (q *QPCreated) Put(e *Encoder) { e.Put(q) }

// Get decodes q.
func (q *QPCreated) Get(d *Decoder) { d.Get(q) }

// QPAttr is struct ibv_qp_attr as MODIFY_QP and QUERY_QP carry it.
type QPAttr struct {
	State            uint8    `abi:"qp_state"`
	CurState         uint8    `abi:"cur_qp_state"`
	AccessFlags      uint32   `abi:"qp_access_flags"`
	PKeyIndex        uint16   `abi:"pkey_index"`
	Port             uint8    `abi:"port_num"`
	QKey             uint32   `abi:"qkey"`
	DGID             [16]byte `abi:"dgid"`
	SGIDIndex        uint8    `abi:"sgid_index"`
	HopLimit         uint8    `abi:"hop_limit"`
	TrafficClass     uint8    `abi:"traffic_class"`
	FlowLabel        uint32   `abi:"flow_label"`
	DMAC             []byte   `abi:"dmac" doc:"empty: resolve"`
	PathMTU          uint8    `abi:"path_mtu"`
	Timeout          uint8    `abi:"timeout"`
	RetryCnt         uint8    `abi:"retry_cnt"`
	RNRRetry         uint8    `abi:"rnr_retry"`
	RQPSN            uint32   `abi:"rq_psn"`
	SQPSN            uint32   `abi:"sq_psn"`
	MaxRdAtomic      uint8    `abi:"max_rd_atomic"`
	MaxDestRdAtomic  uint8    `abi:"max_dest_rd_atomic"`
	MinRNR           uint8    `abi:"min_rnr_timer"`
	DestQPN          uint32   `abi:"dest_qp_num"`
	EnSQDAsyncNotify bool     `abi:"en_sqd_async_notify"`
	SQDraining       bool     `abi:"sq_draining"`
	Cap              QPCap    `abi:"cap"`
}

// Put encodes a.
func (a *QPAttr) Put(e *Encoder) { e.Put(a) }

// Get decodes a.
func (a *QPAttr) Get(d *Decoder) { d.Get(a) }

// AHAttr is an address handle's attributes (struct ibv_ah_attr with its
// GRH): RoCE needs IsGlobal and port 1.
type AHAttr struct {
	DGID         [16]byte `abi:"dgid"`
	SGIDIndex    uint8    `abi:"sgid_index"`
	HopLimit     uint8    `abi:"hop_limit"`
	TrafficClass uint8    `abi:"traffic_class"`
	FlowLabel    uint32   `abi:"flow_label"`
	SL           uint8    `abi:"sl"`
	Port         uint8    `abi:"port_num"`
	IsGlobal     bool     `abi:"is_global"`
}

// Put encodes a.
func (a *AHAttr) Put(e *Encoder) { e.Put(a) }

// Get decodes a.
func (a *AHAttr) Get(d *Decoder) { d.Get(a) }

// Counter is one named counter of a COUNTERS reply.
type Counter struct {
	Name  string `abi:"name"`
	Value uint64 `abi:"value"`
}

// PutCounters encodes a list of counters: one of COUNTERS' (CountersReply).
func PutCounters(e *Encoder, cs []Counter) { e.Put(cs) }

// GetCounters decodes a list of counters; nil if it does not parse.
func GetCounters(d *Decoder) []Counter {
	var cs []Counter
	d.Get(&cs)
	if d.err != nil {
		return nil
	}
	return cs
}

// Client is one attached process, as LIST reports it.
type Client struct {
	PID, UID           uint32
	Comm               string
	PDs, MRs, CQs, QPs uint32
}

// QPInfo is one QP, as LIST reports it (rdma resource show qp's columns).
type QPInfo struct {
	OwnerPID, QPN, DestQPN           uint32
	Type, State                      uint8
	Queue                            uint32
	SQPSN, CompPSN, EPSN             uint32
	SendQueued, RecvQueued, Timeouts uint32
	Peer                             [16]byte
}

// ListCursor is where a LIST reply starts: how many clients, QPs and
// rdma_cm IDs the asker already has. A reply holds what fits in one
// message (a device has thousands of QPs); the asker asks again from
// where it ended, as netlink dumps of `rdma resource show` go.
type ListCursor struct {
	Clients uint32 `abi:"clients"`
	QPs     uint32 `abi:"qps"`
	CMIDs   uint32 `abi:"cm_ids"`
}

// Put encodes c: LIST's request body.
func (c *ListCursor) Put(e *Encoder) { e.Put(c) }

// Get decodes c.
func (c *ListCursor) Get(d *Decoder) { d.Get(c) }

// ListPage is one LIST reply: the entries from the cursor on that fit,
// the CM's connections (timewait included), and whether any were left out.
type ListPage struct {
	Clients       []Client
	QPs           []QPInfo
	CMIDs         []CMIDStatus
	CMConnections uint32
	More          bool
}

// listTrailer is what follows the entries of a LIST reply at most: the
// later sections' counts, the connections and More.
const listTrailer = 2 + 2 + 4 + 1

// PutListPage encodes the entries of cs, qs and ids from cur on, in that
// order, as many as fit in one message.
func PutListPage(e *Encoder, cur ListCursor, cs []Client, qs []QPInfo, ids []CMIDStatus, conns uint32) {
	full := putSection(e, cs, cur.Clients, false)
	full = putSection(e, qs, cur.QPs, full)
	full = putSection(e, ids, cur.CMIDs, full)
	e.U32(conns)
	e.Bool(full)
}

// putSection appends items[from:] with their count, while the message has
// room (and none if an earlier section ran out of it): whether it ran out.
func putSection[T any](e *Encoder, items []T, from uint32, full bool) bool {
	at := len(e.b)
	e.U16(0)
	n := 0
	for i := int(min(uint64(from), uint64(len(items)))); !full && i < len(items); i++ {
		mark := len(e.b)
		e.Put(&items[i])
		if len(e.b) > MaxMessage-listTrailer || n == 0xffff {
			e.b, full = e.b[:mark], true
			break
		}
		n++
	}
	le.PutUint16(e.b[at:], uint16(n))
	return full
}

// GetListPage decodes a LIST reply (a ListPage, as PutListPage fills
// it); an empty page if it does not parse.
func GetListPage(d *Decoder) ListPage {
	var p ListPage
	d.Get(&p)
	if d.err != nil {
		return ListPage{}
	}
	return p
}

// Event is an asynchronous event as GET_EVENT carries it: its type
// (ibv_event_type), the kind of object it names and the client's handle.
type Event struct {
	Type   uint8  `abi:"event_type" doc:"enum ibv_event_type"`
	Kind   uint8  `abi:"kind" doc:"EventQP, EventCQ, EventSRQ"`
	Handle uint32 `abi:"handle"`
}

// The kinds of object an Event names.
const (
	EventQP  = 1
	EventCQ  = 2
	EventSRQ = 3
)

// Put encodes ev.
func (ev *Event) Put(e *Encoder) { e.Put(ev) }

// Get decodes ev.
func (ev *Event) Get(d *Decoder) { d.Get(ev) }

// SRQAttr is struct ibv_srq_attr as CREATE_SRQ, MODIFY_SRQ and QUERY_SRQ
// carry it.
type SRQAttr struct {
	MaxWR  uint32 `abi:"max_wr"`
	MaxSGE uint32 `abi:"max_sge"`
	Limit  uint32 `abi:"srq_limit"`
}

// Put encodes a.
func (a *SRQAttr) Put(e *Encoder) { e.Put(a) }

// Get decodes a.
func (a *SRQAttr) Get(d *Decoder) { d.Get(a) }

// McastReq is an ATTACH_MCAST or DETACH_MCAST request (ibv_attach_mcast):
// the QP's handle, the group's GID and its LID (ignored on RoCE, as the
// kernel ignores it on an Ethernet port).
type McastReq struct {
	QP  uint32   `abi:"qp"`
	GID [16]byte `abi:"gid"`
	LID uint16   `abi:"lid"`
}

// Put encodes m.
func (m *McastReq) Put(e *Encoder) { e.Put(m) }

// Get decodes m.
func (m *McastReq) Get(d *Decoder) { d.Get(m) }
