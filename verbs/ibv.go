// The API's value types, defined in internal/ibv (shared with the transport
// engine and the daemon's client) and re-exported here under their names.

package verbs

import (
	"net"

	"github.com/xdproce/xdproce/internal/ibv"
)

type (
	Counters       = ibv.Counters
	NamedCounter   = ibv.NamedCounter
	AsyncEventType = ibv.AsyncEventType
	SRQInitAttr    = ibv.SRQInitAttr
	SRQAttr        = ibv.SRQAttr
	SRQAttrMask    = ibv.SRQAttrMask
	QPStatus       = ibv.QPStatus
	Access         = ibv.Access
	QPType         = ibv.QPType
	QPState        = ibv.QPState
	AttrMask       = ibv.AttrMask
	MTU            = ibv.MTU
	AH             = ibv.AH
	QPAttr         = ibv.QPAttr
	QPCap          = ibv.QPCap
	SGE            = ibv.SGE
	WROpcode       = ibv.WROpcode
	SendFlags      = ibv.SendFlags
	RecvWR         = ibv.RecvWR
	WCStatus       = ibv.WCStatus
	WCOpcode       = ibv.WCOpcode
	WCFlags        = ibv.WCFlags
	WorkCompletion = ibv.WorkCompletion
)

const (
	EventCQErr           = ibv.EventCQErr
	EventQPFatal         = ibv.EventQPFatal
	EventSQDrained       = ibv.EventSQDrained
	EventDeviceFatal     = ibv.EventDeviceFatal
	EventSRQErr          = ibv.EventSRQErr
	EventSRQLimitReached = ibv.EventSRQLimitReached
	MaxQP                = ibv.MaxQP
	MaxQPWR              = ibv.MaxQPWR
	MaxSGE               = ibv.MaxSGE
	MaxInlineData        = ibv.MaxInlineData
	MaxCQE               = ibv.MaxCQE
	MaxMRSize            = ibv.MaxMRSize
	MaxMsgSize           = ibv.MaxMsgSize
	MaxRdAtomic          = ibv.MaxRdAtomic
	MaxUnackedPSNs       = ibv.MaxUnackedPSNs
	MaxPktsPerAck        = ibv.MaxPktsPerAck
	SRQAttrMaxWR         = ibv.SRQAttrMaxWR
	SRQAttrLimit         = ibv.SRQAttrLimit
	AccessLocalWrite     = ibv.AccessLocalWrite
	AccessRemoteWrite    = ibv.AccessRemoteWrite
	AccessRemoteRead     = ibv.AccessRemoteRead
	AccessRemoteAtomic   = ibv.AccessRemoteAtomic
	AccessMWBind         = ibv.AccessMWBind
	QPTypeRC             = ibv.QPTypeRC
	QPTypeUC             = ibv.QPTypeUC
	QPTypeUD             = ibv.QPTypeUD
	StateReset           = ibv.StateReset
	StateInit            = ibv.StateInit
	StateRTR             = ibv.StateRTR
	StateRTS             = ibv.StateRTS
	StateSQD             = ibv.StateSQD
	StateSQE             = ibv.StateSQE
	StateErr             = ibv.StateErr
	AttrState            = ibv.AttrState
	AttrCurState         = ibv.AttrCurState
	AttrEnSQDAsyncNotify = ibv.AttrEnSQDAsyncNotify
	AttrAccessFlags      = ibv.AttrAccessFlags
	AttrPKeyIndex        = ibv.AttrPKeyIndex
	AttrPort             = ibv.AttrPort
	AttrQKey             = ibv.AttrQKey
	AttrAV               = ibv.AttrAV
	AttrPathMTU          = ibv.AttrPathMTU
	AttrTimeout          = ibv.AttrTimeout
	AttrRetryCnt         = ibv.AttrRetryCnt
	AttrRNRRetry         = ibv.AttrRNRRetry
	AttrRQPSN            = ibv.AttrRQPSN
	AttrMaxQPRdAtomic    = ibv.AttrMaxQPRdAtomic
	AttrAltPath          = ibv.AttrAltPath
	AttrMinRNRTimer      = ibv.AttrMinRNRTimer
	AttrSQPSN            = ibv.AttrSQPSN
	AttrMaxDestRdAtomic  = ibv.AttrMaxDestRdAtomic
	AttrPathMigState     = ibv.AttrPathMigState
	AttrCap              = ibv.AttrCap
	AttrDestQPN          = ibv.AttrDestQPN
	MTU256               = ibv.MTU256
	MTU512               = ibv.MTU512
	MTU1024              = ibv.MTU1024
	MTU2048              = ibv.MTU2048
	MTU4096              = ibv.MTU4096
	WRRDMAWrite          = ibv.WRRDMAWrite
	WRRDMAWriteWithImm   = ibv.WRRDMAWriteWithImm
	WRSend               = ibv.WRSend
	WRSendWithImm        = ibv.WRSendWithImm
	WRRDMARead           = ibv.WRRDMARead
	WRAtomicCmpAndSwp    = ibv.WRAtomicCmpAndSwp
	WRAtomicFetchAdd     = ibv.WRAtomicFetchAdd
	WRLocalInv           = ibv.WRLocalInv
	WRBindMW             = ibv.WRBindMW
	WRSendWithInv        = ibv.WRSendWithInv
	SendFence            = ibv.SendFence
	SendSignaled         = ibv.SendSignaled
	SendSolicited        = ibv.SendSolicited
	SendInline           = ibv.SendInline
	WCSuccess            = ibv.WCSuccess
	WCLocLenErr          = ibv.WCLocLenErr
	WCLocQPOpErr         = ibv.WCLocQPOpErr
	WCLocProtErr         = ibv.WCLocProtErr
	WCWRFlushErr         = ibv.WCWRFlushErr
	WCMWBindErr          = ibv.WCMWBindErr
	WCBadRespErr         = ibv.WCBadRespErr
	WCLocAccessErr       = ibv.WCLocAccessErr
	WCRemInvReqErr       = ibv.WCRemInvReqErr
	WCRemAccessErr       = ibv.WCRemAccessErr
	WCRemOpErr           = ibv.WCRemOpErr
	WCRetryExcErr        = ibv.WCRetryExcErr
	WCRNRRetryExcErr     = ibv.WCRNRRetryExcErr
	WCFatalErr           = ibv.WCFatalErr
	WCGeneralErr         = ibv.WCGeneralErr
	WCSend               = ibv.WCSend
	WCRDMAWrite          = ibv.WCRDMAWrite
	WCRDMARead           = ibv.WCRDMARead
	WCCompSwap           = ibv.WCCompSwap
	WCFetchAdd           = ibv.WCFetchAdd
	WCBindMW             = ibv.WCBindMW
	WCLocalInv           = ibv.WCLocalInv
	WCRecv               = ibv.WCRecv
	WCRecvRDMAWithImm    = ibv.WCRecvRDMAWithImm
	WCWithGRH            = ibv.WCWithGRH
	WCWithImm            = ibv.WCWithImm
	WCWithInvalidate     = ibv.WCWithInvalidate
	GSIQPN               = ibv.GSIQPN
	GSIQKey              = ibv.GSIQKey
	QKeyControlled       = ibv.QKeyControlled
	MaxAH                = ibv.MaxAH
)

var (
	ErrInvalid = ibv.ErrInvalid
	ErrNoMem   = ibv.ErrNoMem
	ErrBusy    = ibv.ErrBusy
	ErrNotSup  = ibv.ErrNotSup
	ErrClosed  = ibv.ErrClosed
)

// NodeGUID is the node GUID rxe derives from a port's MAC address (a
// modified EUI-64); 0 without a MAC.
func NodeGUID(mac net.HardwareAddr) uint64 { return ibv.NodeGUID(mac) }

// LoadLastByte reads the last byte of b, registered memory the engine may
// be writing, with an atomic load (see ibv.LoadLastByte).
func LoadLastByte(b []byte) byte { return ibv.LoadLastByte(b) }

// MTUFromBytes returns the MTU enum of a byte count, 0 if it is not one.
func MTUFromBytes(n int) MTU { return ibv.MTUFromBytes(n) }
