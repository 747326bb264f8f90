// Package cm is the InfiniBand Communication Management protocol as
// rdma_cm speaks it on RoCE (IBTA vol. 1 ch. 12, Linux's cm.c and cma.c): the
// 256-byte MADs that travel as UD datagrams to QP1 — REQ, REP, RTU, REJ,
// MRA, DREQ, DREP, and SIDR_REQ and SIDR_REP for UD services — and the IP
// addressing header rdma_cm puts at the head of a REQ's and a SIDR_REQ's
// private data. It is a pure codec: no sockets, no timers, no state.
//
// Every multi-byte field is big-endian; a field narrower than a byte, or a
// 24-bit one, takes the most significant bits of its bytes first (Linux's
// IBA_FIELD convention). ../shared/reference/roce-wire-protocol.md §5.2 has
// the layouts with their sources.
package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MAD sizes: a CM MAD is the 24-byte common header and 232 bytes of
// message.
const (
	MADLen    = 256
	HeaderLen = 24
)

// The common header's values for CM (IB_MGMT_BASE_VERSION, IB_MGMT_CLASS_CM,
// IB_CM_CLASS_VERSION, IB_MGMT_METHOD_SEND).
const (
	BaseVersion  = 1
	MgmtClassCM  = 0x07
	ClassVersion = 2
	MethodSend   = 0x03
)

// QP1 is the GSI QP CM MADs travel to; GSIQKey the Q_Key they carry.
const (
	QP1     = 1
	GSIQKey = 0x80010000
)

// Attr is a MAD's AttributeID: which CM message it carries.
type Attr uint16

// The CM messages.
const (
	AttrREQ     Attr = 0x0010
	AttrMRA     Attr = 0x0011
	AttrREJ     Attr = 0x0012
	AttrREP     Attr = 0x0013
	AttrRTU     Attr = 0x0014
	AttrDREQ    Attr = 0x0015
	AttrDREP    Attr = 0x0016
	AttrSIDRREQ Attr = 0x0017
	AttrSIDRREP Attr = 0x0018
)

var attrNames = map[Attr]string{AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU",
	AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP"}

func (a Attr) String() string {
	if n, ok := attrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("Attr(%#04x)", uint16(a))
}

// Header is the MAD common header.
type Header struct {
	BaseVersion, MgmtClass, ClassVersion, Method uint8
	Status, ClassSpecific                        uint16
	TID                                          uint64 // transaction ID
	Attr                                         Attr
	AttrMod                                      uint32
}

// CMHeader is the header of a CM message with transaction ID tid.
func CMHeader(attr Attr, tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: MgmtClassCM, ClassVersion: ClassVersion, Method: MethodSend, TID: tid, Attr: attr}
}

// Errors of Decode.
var (
	ErrShort    = errors.New("cm: not a 256-byte MAD")
	ErrNotCM    = errors.New("cm: not a CM MAD (management class, versions or method)")
	ErrUnknown  = errors.New("cm: a CM message this codec does not know")
	errBadField = errors.New("cm: field out of range")
)

var be = binary.BigEndian

// DecodeHeader reads the common header of mad and checks it is a CM MAD
// xdproce understands.
func DecodeHeader(mad []byte) (Header, error) {
	if len(mad) != MADLen {
		return Header{}, ErrShort
	}
	h := Header{BaseVersion: mad[0], MgmtClass: mad[1], ClassVersion: mad[2], Method: mad[3], Status: be.Uint16(mad[4:]),
		ClassSpecific: be.Uint16(mad[6:]), TID: be.Uint64(mad[8:]), Attr: Attr(be.Uint16(mad[16:])), AttrMod: be.Uint32(mad[20:])}
	if h.BaseVersion != BaseVersion || h.MgmtClass != MgmtClassCM || h.ClassVersion != ClassVersion || h.Method != MethodSend {
		return h, ErrNotCM
	}
	return h, nil
}

func (h *Header) put(mad []byte) {
	mad[0], mad[1], mad[2], mad[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	be.PutUint16(mad[4:], h.Status)
	be.PutUint16(mad[6:], h.ClassSpecific)
	be.PutUint64(mad[8:], h.TID)
	be.PutUint16(mad[16:], uint16(h.Attr))
	be.PutUint16(mad[18:], 0)
	be.PutUint32(mad[20:], h.AttrMod)
}

// Field helpers: b is the MAD, off an absolute offset.

func u24(b []byte, off int) uint32 {
	return uint32(b[off])<<16 | uint32(b[off+1])<<8 | uint32(b[off+2])
}

func put24(b []byte, off int, v uint32) {
	b[off], b[off+1], b[off+2] = byte(v>>16), byte(v>>8), byte(v)
}

// bits is bits hi..lo (7 the most significant) of byte b.
func bits(b byte, hi, lo uint) uint8 { return b >> lo & (1<<(hi-lo+1) - 1) }

func flag(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// fits reports whether v fits in w bits.
func fits(v uint64, w uint) bool { return v>>w == 0 }
