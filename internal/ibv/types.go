// Package ibv holds the value types of the verbs API (struct ibv_wc, ibv_qp_attr,
// the enums, the device's limits and the errno values API misuse returns):
// the vocabulary that package verbs (the API), the transport engine and
// the daemon's client share, as <infiniband/verbs.h> is shared by
// libibverbs and its providers. Package verbs re-exports all of it.
package ibv

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"unsafe"
)

// Access flags of memory regions and QPs (ibv_access_flags).
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	// AccessMWBind lets memory windows be bound to a region (IBV_ACCESS_MW_BIND).
	AccessMWBind Access = 1 << 4
	// AccessZeroBased (IBV_ACCESS_ZERO_BASED) makes a region's addresses
	// offsets from its start; a region over device memory must have it.
	AccessZeroBased Access = 1 << 5
)

// QPType is the transport service of a QP.
type QPType uint8

const (
	QPTypeRC QPType = 2 // IBV_QPT_RC
	QPTypeUC QPType = 3 // IBV_QPT_UC
	QPTypeUD QPType = 4 // IBV_QPT_UD
)

// QPState is a QP's state (ibv_qp_state values).
type QPState uint8

const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// AttrMask selects the QPAttr fields Modify applies (ibv_qp_attr_mask values).
type AttrMask uint32

const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
)

// MTU is an IB path MTU in the ibv_mtu encoding (1=256 ... 5=4096).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// NodeGUID is the node GUID rxe derives from a port's MAC address (a
// modified EUI-64); 0 without a MAC.
func NodeGUID(mac net.HardwareAddr) uint64 {
	if len(mac) != 6 {
		return 0
	}
	return binary.BigEndian.Uint64([]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]})
}

// LoadLastByte reads the last byte of b, registered memory the engine may
// be writing, with an atomic load of the aligned word that holds it, so an
// application spinning on it (as ib_write_lat spins on the byte a peer's
// RDMA WRITE lands last) sees the write.
func LoadLastByte(b []byte) byte {
	p := unsafe.Pointer(&b[len(b)-1])
	off := uintptr(p) & 3
	w := atomic.LoadUint32((*uint32)(unsafe.Add(p, -int(off))))
	return byte(w >> (8 * off)) // little-endian
}

// MTUFromBytes returns the MTU enum of a byte count, 0 if it is not one.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// AH is an address vector: where a QP's packets go. On RoCE every address is
// global: the destination GID names the peer's IP address.
type AH struct {
	DGID         netip.Addr // IPv6, or IPv4 (also given as ::ffff:a.b.c.d)
	SGIDIndex    int
	HopLimit     uint8 // rxe sends 64 whatever is asked; so does xdproce
	TrafficClass uint8
	FlowLabel    uint32
	// DMAC is the next hop's MAC address; if nil Modify resolves it with the
	// device's neighbour resolver.
	DMAC net.HardwareAddr
}

// QPAttr carries the attributes of Modify and Query (struct ibv_qp_attr).
type QPAttr struct {
	State            QPState
	CurState         QPState
	AccessFlags      Access
	PKeyIndex        uint16
	Port             uint8
	QKey             uint32
	AH               AH
	PathMTU          MTU
	Timeout          uint8 // local ACK timeout: 4.096 µs × 2^Timeout, 0 = none
	RetryCnt         uint8
	RNRRetry         uint8 // 7 = retry forever
	RQPSN            uint32
	SQPSN            uint32
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	DestQPN          uint32
	EnSQDAsyncNotify bool
	// SQDraining (Query only) is set while an SQD drain is in progress
	// (sq_draining).
	SQDraining bool
	Cap        QPCap
}

// QPCap sizes a QP's queues.
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// SGE is one scatter/gather element: Length bytes at address Addr inside the
// memory region named by LKey (MR.Addr is the region's first byte).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WROpcode is a send work request's operation (ibv_wr_opcode values).
type WROpcode uint8

const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
	WRLocalInv         WROpcode = 7 // invalidate the memory window InvRKey names
	WRBindMW           WROpcode = 8 // bind SendWR.Bind's type-2 memory window
	WRSendWithInv      WROpcode = 9
)

var wrOpcodeNames = [...]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW", WRSendWithInv: "SEND_WITH_INV",
}

// String is the opcode's ibverbs name without the IBV_WR_ prefix.
func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SendFlags modify a send work request (ibv_send_flags values).
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	ID     uint64
	SGList []SGE
}

// WCStatus is a work completion's status (ibv_wc_status values).
type WCStatus uint8

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCFatalErr       WCStatus = 19
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = map[WCStatus]string{
	WCSuccess: "SUCCESS", WCLocLenErr: "LOC_LEN_ERR", WCLocQPOpErr: "LOC_QP_OP_ERR", WCLocProtErr: "LOC_PROT_ERR",
	WCWRFlushErr: "WR_FLUSH_ERR", WCMWBindErr: "MW_BIND_ERR", WCBadRespErr: "BAD_RESP_ERR", WCLocAccessErr: "LOC_ACCESS_ERR",
	WCRemInvReqErr: "REM_INV_REQ_ERR", WCRemAccessErr: "REM_ACCESS_ERR", WCRemOpErr: "REM_OP_ERR",
	WCRetryExcErr: "RETRY_EXC_ERR", WCRNRRetryExcErr: "RNR_RETRY_EXC_ERR", WCFatalErr: "FATAL_ERR",
	WCGeneralErr: "GENERAL_ERR",
}

func (s WCStatus) String() string {
	if n, ok := wcStatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode is a completion's operation (ibv_wc_opcode values).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// WCFlags (ibv_wc_flags values).
type WCFlags uint32

const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	// WCWithInvalidate is what rxe sets for a receive that invalidated an
	// rkey: the kernel's IB_WC_WITH_INVALIDATE (bit 2), not ibverbs' bit 3.
	WCWithInvalidate WCFlags = 1 << 2
)

// WorkCompletion is one completion (struct ibv_wc).
type WorkCompletion struct {
	WRID           uint64
	Status         WCStatus
	Opcode         WCOpcode
	VendorErr      uint32
	ByteLen        uint32
	ImmData        uint32 // as on the wire
	InvalidatedKey uint32
	QPNum          uint32
	SrcQP          uint32
	Flags          WCFlags
	// IPVersion is a UD receive's datagram's IP version, 4 or 6 (the
	// kernel's ib_wc.network_hdr_type), else 0.
	IPVersion uint8
}

// SliceAt returns the bytes [addr, addr+n) of a region whose memory buf
// starts at address base, if they lie inside it.
func SliceAt(buf []byte, base, addr uint64, n uint32) ([]byte, bool) {
	if addr < base || buf == nil {
		return nil, false
	}
	off := addr - base
	if off > uint64(len(buf)) || uint64(n) > uint64(len(buf))-off {
		return nil, false
	}
	return buf[off : off+uint64(n)], true
}
