package uverbs

import (
	"fmt"
	"reflect"
)

// The control messages' bodies, defined once. Each op's request and reply is a sequence of the
// Go structs opBodies lists for it (its parts): the daemon decodes them part by part (an ID op's
// handle first, then what the op adds), and `go generate` writes, for every op a C client
// speaks, a C struct with the parts' fields flattened in order and the function that encodes the
// request or decodes the reply (xp_put_OP_req, xp_get_OP_rep in provider/common/xp_abi.h). The
// encoding is Encoder's: fields one after another, little-endian, no padding. A field's abi tag
// is its C name. Field types:
//
//	uint8..uint64, int32  the integer
//	bool                  one byte, 0 or 1
//	[N]byte               N bytes
//	[]byte, string        a u16 length, then the bytes
//	[][N]byte             a u16 count, then count*N bytes
//	[]T (T a struct)      a u16 count, then each T (Go only: C clients do not read these)
//	a struct              its fields (embedded or named alike)
//
// TestMsgBodiesMatchC fails if C encodes a request or decodes a reply other than Go does, for
// every op.

// Ref names one object of the session by its handle: the body of ops that name one object (the
// object's own, or the PD, QP, channel or ID an op acts on or in).
type Ref struct {
	Handle uint32 `abi:"handle"`
}

// Hello is the HELLO request, an extensible part (ext.go): the ABI version the client speaks and
// how many bytes of the reply's extensible tail (DeviceInfoExt) it understands. A library from
// before the tail sends the version alone, so asks for none of it.
type Hello struct {
	Version  uint16 `abi:"version"`
	ReplyExt uint16 `abi:"reply_ext" doc:"the bytes of the reply's tail understood: XP_DEVICE_INFO_EXT_LEN"`
}

// RegMR is the REG_MR request (after the PD's Ref). With a memfd, Addr is the offset into it;
// without, an address of the client's own.
type RegMR struct {
	Addr   uint64 `abi:"addr"`
	Length uint64 `abi:"length"`
	Access uint32 `abi:"access" doc:"enum ibv_access_flags"`
	IOVA   uint64 `abi:"iova"`
}

// MRCreated is the REG_MR reply.
type MRCreated struct {
	MR   uint32 `abi:"mr"`
	LKey uint32 `abi:"lkey"`
	RKey uint32 `abi:"rkey"`
}

// AllocDM is the ALLOC_DM request: device memory of Length bytes (ibv_alloc_dm_attr's length).
type AllocDM struct {
	Length uint64 `abi:"length"`
}

// Doorbell is the DOORBELL request: the session's doorbell for one engine of a device of
// several (HELLO's is engine 0's); its fd comes with the empty reply.
type Doorbell struct {
	Engine uint32 `abi:"engine"`
}

// DMCreated is the ALLOC_DM reply; the fd of the memory (a BPF array map's, to map MapLength
// bytes of, shared and writable) comes with it.
type DMCreated struct {
	DM        uint32 `abi:"dm"`
	MapLength uint64 `abi:"map_length"`
}

// RegDMMR is the REG_DM_MR request (after the PD's and the DM's Refs): Length bytes of the
// device memory from Offset, zero-based (ibv_reg_dm_mr).
type RegDMMR struct {
	Offset uint64 `abi:"offset"`
	Length uint64 `abi:"length"`
	Access uint32 `abi:"access" doc:"enum ibv_access_flags"`
}

// CreateCQ is the CREATE_CQ request.
type CreateCQ struct {
	CQE uint32 `abi:"cqe"`
}

// CQCreated is the CREATE_CQ reply; the ring's memfd and the notification pipe come with it.
type CQCreated struct {
	CQ    uint32 `abi:"cq"`
	Slots uint32 `abi:"slots"`
}

// ResizeCQ is the RESIZE_CQ request (after the CQ's Ref).
type ResizeCQ struct {
	CQE uint32 `abi:"cqe"`
}

// CQResized is the RESIZE_CQ reply; the new ring's memfd comes with it.
type CQResized struct {
	Slots uint32 `abi:"slots"`
}

// ModifyQP is the MODIFY_QP request (after the QP's Ref).
type ModifyQP struct {
	Mask uint32 `abi:"attr_mask" doc:"enum ibv_qp_attr_mask"`
	Attr QPAttr `abi:"attr"`
}

// SRQCreated is the CREATE_SRQ reply; the ring's memfd comes with it.
type SRQCreated struct {
	SRQ      uint32  `abi:"srq"`
	Attr     SRQAttr `abi:"attr"`
	Slots    uint32  `abi:"slots"`
	SlotSize uint32  `abi:"slot_size"`
}

// ModifySRQ is the MODIFY_SRQ request (after the SRQ's Ref).
type ModifySRQ struct {
	Mask uint32  `abi:"attr_mask" doc:"enum ibv_srq_attr_mask"`
	Attr SRQAttr `abi:"attr"`
}

// AllocMW is the ALLOC_MW request (after the PD's Ref).
type AllocMW struct {
	Type uint8 `abi:"type" doc:"enum ibv_mw_type"`
}

// MWCreated is the ALLOC_MW reply.
type MWCreated struct {
	MW   uint32 `abi:"mw"`
	RKey uint32 `abi:"rkey"`
}

// AHCreated is the CREATE_AH reply: the handle and the destination's MAC.
type AHCreated struct {
	AH   uint32 `abi:"ah"`
	DMAC []byte `abi:"dmac"`
}

// CMCreateID is the CM_CREATE_ID request.
type CMCreateID struct {
	Channel   uint32 `abi:"channel"`
	PortSpace uint16 `abi:"port_space" doc:"enum rdma_port_space"`
}

// CMResolveAddr is the CM_RESOLVE_ADDR request (after the ID's Ref).
type CMResolveAddr struct {
	Src       CMAddr `abi:"src"`
	Dst       CMAddr `abi:"dst"`
	TimeoutMS uint32 `abi:"timeout_ms"`
}

// CMTimeout is the CM_RESOLVE_ROUTE request (after the ID's Ref).
type CMTimeout struct {
	TimeoutMS uint32 `abi:"timeout_ms"`
}

// CMListen is the CM_LISTEN request (after the ID's Ref).
type CMListen struct {
	Backlog uint32 `abi:"backlog"`
}

// CMReject is the CM_REJECT request (after the ID's Ref).
type CMReject struct {
	PrivateData []byte `abi:"private_data"`
}

// CMInitQPAttr is the CM_INIT_QP_ATTR request (after the ID's Ref).
type CMInitQPAttr struct {
	State uint8 `abi:"qp_state" doc:"enum ibv_qp_state"`
}

// CMQPAttr is the CM_INIT_QP_ATTR reply: the attributes and their mask.
type CMQPAttr struct {
	Attr QPAttr `abi:"attr"`
	Mask uint32 `abi:"attr_mask" doc:"enum ibv_qp_attr_mask"`
}

// CMSetOption is the CM_SET_OPTION request (after the ID's Ref).
type CMSetOption struct {
	Level uint32 `abi:"level"`
	Name  uint32 `abi:"optname"`
	Value []byte `abi:"optval"`
}

// CMJoinMcast is the CM_JOIN_MCAST request (after the ID's Ref):
// rdma_join_multicast's group and whether the join is send-only.
type CMJoinMcast struct {
	Group    CMAddr `abi:"group"`
	SendOnly bool   `abi:"send_only" doc:"RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER"`
}

// CountersReply is the COUNTERS reply: the transport's counters, then the port's.
type CountersReply struct {
	Transport []Counter `abi:"transport"`
	Port      []Counter `abi:"port"`
}

// part is one part of a body: its Go struct and, for a named part, the C field that holds it
// ("" flattens its fields into the op's struct).
type part struct {
	name string
	typ  any
}

// opBody is an op's request and reply as their parts; goOnly marks the operations only Go
// clients speak (xdproce's own commands), for which no C is generated.
type opBody struct {
	req, rep []part
	goOnly   bool
}

func parts(ts ...any) []part {
	ps := make([]part, len(ts))
	for i, t := range ts {
		ps[i] = part{"", t}
	}
	return ps
}

// ref is a Ref part under a C name of its own (a PD's, a QP's, an ID's handle).
func ref(name string) part { return part{name, Ref{}} }

// opBodies is every op's request and reply; TestEveryOpHasBodies fails for an op without.
var opBodies = map[Op]opBody{
	OpHello:            {req: parts(Hello{}), rep: parts(DeviceInfo{}, DeviceInfoExt{})},
	OpAllocPD:          {rep: []part{ref("pd")}},
	OpDeallocPD:        {req: []part{ref("pd")}},
	OpRegMR:            {req: []part{ref("pd"), {"", RegMR{}}}, rep: parts(MRCreated{})},
	OpDeregMR:          {req: []part{ref("mr")}},
	OpCreateCQ:         {req: parts(CreateCQ{}), rep: parts(CQCreated{})},
	OpDestroyCQ:        {req: []part{ref("cq")}},
	OpCreateQP:         {req: parts(CreateQP{}), rep: parts(QPCreated{})},
	OpModifyQP:         {req: []part{ref("qp"), {"", ModifyQP{}}}},
	OpQueryQP:          {req: []part{ref("qp")}, rep: []part{{"attr", QPAttr{}}}},
	OpDestroyQP:        {req: []part{ref("qp")}},
	OpCounters:         {rep: parts(CountersReply{}), goOnly: true},
	OpShutdown:         {goOnly: true},
	OpList:             {req: parts(ListCursor{}), rep: parts(ListPage{}), goOnly: true}, // PutListPage fits the reply to a message
	OpGetEvent:         {rep: []part{{"event", Event{}}}},
	OpCreateSRQ:        {req: []part{ref("pd"), {"attr", SRQAttr{}}}, rep: parts(SRQCreated{})},
	OpModifySRQ:        {req: []part{ref("srq"), {"", ModifySRQ{}}}},
	OpQuerySRQ:         {req: []part{ref("srq")}, rep: []part{{"attr", SRQAttr{}}}},
	OpDestroySRQ:       {req: []part{ref("srq")}},
	OpAllocMW:          {req: []part{ref("pd"), {"", AllocMW{}}}, rep: parts(MWCreated{})},
	OpDeallocMW:        {req: []part{ref("mw")}},
	OpCreateAH:         {req: []part{ref("pd"), {"attr", AHAttr{}}}, rep: parts(AHCreated{})},
	OpDestroyAH:        {req: []part{ref("ah")}},
	OpCMCreateChannel:  {rep: []part{ref("channel")}},
	OpCMDestroyChannel: {req: []part{ref("channel")}},
	OpCMCreateID:       {req: parts(CMCreateID{}), rep: []part{ref("id")}},
	OpCMDestroyID:      {req: []part{ref("id")}},
	OpCMMigrateID:      {req: []part{ref("id"), ref("channel")}},
	OpCMBind:           {req: []part{ref("id"), {"addr", CMAddr{}}}},
	OpCMResolveAddr:    {req: []part{ref("id"), {"", CMResolveAddr{}}}},
	OpCMResolveRoute:   {req: []part{ref("id"), {"", CMTimeout{}}}},
	OpCMListen:         {req: []part{ref("id"), {"", CMListen{}}}},
	OpCMAttachQP:       {req: []part{ref("id"), ref("qp")}},
	OpCMConnect:        {req: []part{ref("id"), {"param", CMConnParam{}}}},
	OpCMAccept:         {req: []part{ref("id"), {"param", CMConnParam{}}}},
	OpCMReject:         {req: []part{ref("id"), {"", CMReject{}}}},
	OpCMDisconnect:     {req: []part{ref("id")}},
	OpCMEstablish:      {req: []part{ref("id")}},
	OpCMQuery:          {req: []part{ref("id")}, rep: []part{{"info", CMIDInfo{}}}},
	OpCMInitQPAttr:     {req: []part{ref("id"), {"", CMInitQPAttr{}}}, rep: parts(CMQPAttr{})},
	OpCMGetEvent:       {req: []part{ref("channel")}, rep: []part{{"event", CMEvent{}}}},
	OpCMSetOption:      {req: []part{ref("id"), {"", CMSetOption{}}}},
	OpAttachMcast:      {req: parts(McastReq{})},
	OpDetachMcast:      {req: parts(McastReq{})},
	OpCMJoinMcast:      {req: []part{ref("id"), {"", CMJoinMcast{}}}},
	OpCMLeaveMcast:     {req: []part{ref("id"), {"group", CMAddr{}}}},
	OpResizeCQ:         {req: []part{ref("cq"), {"", ResizeCQ{}}}, rep: parts(CQResized{})},
	OpAllocDM:          {req: parts(AllocDM{}), rep: parts(DMCreated{})},
	OpFreeDM:           {req: []part{ref("dm")}},
	OpRegDMMR:          {req: []part{ref("pd"), ref("dm"), {"", RegDMMR{}}}, rep: parts(MRCreated{})},
	OpDoorbell:         {req: parts(Doorbell{})},
}

// Put appends body v, a pointer to one of the body structs (or a struct value), field by
// field as its definition orders them.
func (e *Encoder) Put(v any) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	e.put(rv)
}

func (e *Encoder) put(v reflect.Value) {
	switch v.Kind() {
	case reflect.Uint8:
		e.U8(uint8(v.Uint()))
	case reflect.Uint16:
		e.U16(uint16(v.Uint()))
	case reflect.Uint32:
		e.U32(uint32(v.Uint()))
	case reflect.Uint64:
		e.U64(v.Uint())
	case reflect.Int32:
		e.U32(uint32(v.Int()))
	case reflect.Bool:
		e.Bool(v.Bool())
	case reflect.String:
		e.Raw([]byte(v.String()))
	case reflect.Array:
		for i := range v.Len() {
			e.put(v.Index(i))
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			e.Raw(v.Bytes())
			return
		}
		e.U16(uint16(v.Len()))
		for i := range v.Len() {
			e.put(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			e.put(v.Field(i))
		}
	default:
		panic(fmt.Sprintf("uverbs: no encoding for %s", v.Type()))
	}
}

// Get decodes body v, a pointer to one of the body structs, as Put encodes it. A body that does
// not parse leaves the decoder's error set (End reports it).
func (d *Decoder) Get(v any) { d.get(reflect.ValueOf(v).Elem()) }

func (d *Decoder) get(v reflect.Value) {
	switch v.Kind() {
	case reflect.Uint8:
		v.SetUint(uint64(d.U8()))
	case reflect.Uint16:
		v.SetUint(uint64(d.U16()))
	case reflect.Uint32:
		v.SetUint(uint64(d.U32()))
	case reflect.Uint64:
		v.SetUint(d.U64())
	case reflect.Int32:
		v.SetInt(int64(int32(d.U32())))
	case reflect.Bool:
		v.SetBool(d.Bool())
	case reflect.String:
		v.SetString(string(d.Raw()))
	case reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			reflect.Copy(v, reflect.ValueOf(d.take(v.Len())))
			return
		}
		for i := range v.Len() {
			d.get(v.Index(i))
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			// A copy: the body outlives the message it came in.
			if b := d.Raw(); len(b) > 0 {
				v.SetBytes(append([]byte(nil), b...))
			} else {
				v.SetBytes(nil)
			}
			return
		}
		n := int(d.U16())
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		for range n {
			el := reflect.New(v.Type().Elem()).Elem()
			d.get(el)
			if d.err != nil {
				v.Set(reflect.Zero(v.Type()))
				return
			}
			v.Set(reflect.Append(v, el))
		}
		if n == 0 {
			v.Set(reflect.Zero(v.Type()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			d.get(v.Field(i))
		}
	default:
		panic(fmt.Sprintf("uverbs: no decoding for %s", v.Type()))
	}
}

// msgRecords are the structs that C declares as structs of their own (struct xp_NAME, with
// xp_put_NAME and xp_get_NAME), where a body names them.
var msgRecords = []part{
	{"ref", Ref{}},
	{"qp_cap", QPCap{}},
	{"qp_attr", QPAttr{}},
	{"ah_attr", AHAttr{}},
	{"srq_attr", SRQAttr{}},
	{"async_event", Event{}},
	{"cm_addr", CMAddr{}},
	{"cm_conn_param", CMConnParam{}},
	{"cm_id_info", CMIDInfo{}},
	{"cm_event", CMEvent{}},
	{"mcast", McastReq{}},
}

// Ref reads a Ref part: the handle an op names.
func (d *Decoder) Ref() uint32 {
	var r Ref
	d.Get(&r)
	return r.Handle
}
