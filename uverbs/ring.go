// Package uverbs is the attach protocol between applications and the xdproce
// daemon, as the kernel's uverbs ABI is between libibverbs and an RNIC
// driver: the control messages (msg.go) and the layout of the shared-memory
// rings that carry work requests and completions (this file). It is a pure
// codec: no sockets, no system calls. docs/daemon.md is its specification.
//
// Shared memory is written by two processes that do not trust each other:
// a reader copies a slot out of the ring before it decodes it, and every
// index it reads is checked against what it knows itself.
package uverbs

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// HeaderSize is the bytes before a ring's first slot (abiRingHeader: the
// producer index, the consumer index, and two words for the ring's owner, a
// CQ's notification request, a QP's state, each on its own cache line).
const HeaderSize = 256

// Slot sizes (abi.go's layouts). A send slot is a fixed header and then the
// SG list or the inline data; a receive slot a short header and the SG list;
// a CQE has a fixed size.
const (
	SendSlotHeader = 64
	RecvSlotHeader = 16
	SGESize        = 16
	CQESize        = 64
)

// Ring is a single-producer, single-consumer ring of fixed-size slots in
// memory shared by the daemon and one client. Indices run freely modulo
// 2^32; the slot count is a power of two.
type Ring struct {
	mem   []byte
	slots uint32
	size  int
}

// RingBytes is the memory a ring of slots slots of size bytes needs.
func RingBytes(slots uint32, size int) int { return HeaderSize + int(slots)*size }

// SlotsFor rounds n up to a power of two, the slot count of a ring holding n.
func SlotsFor(n int) uint32 {
	s := uint32(1)
	for int(s) < n {
		s <<= 1
	}
	return s
}

// NewRing lays a ring over mem, which must hold RingBytes(slots, size) and be
// 8-byte aligned (a mapping is).
func NewRing(mem []byte, slots uint32, size int) (*Ring, error) {
	if slots == 0 || slots&(slots-1) != 0 || size <= 0 || size%8 != 0 {
		return nil, fmt.Errorf("uverbs: ring of %d slots of %d bytes", slots, size)
	}
	if len(mem) < RingBytes(slots, size) || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return nil, fmt.Errorf("uverbs: %d bytes cannot hold a ring of %d slots of %d bytes", len(mem), slots, size)
	}
	return &Ring{mem: mem, slots: slots, size: size}, nil
}

// Slots is the ring's slot count.
func (r *Ring) Slots() uint32 { return r.slots }

// SlotSize is the size of one slot in bytes.
func (r *Ring) SlotSize() int { return r.size }

func (r *Ring) word(off uintptr) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off]))
}

// Producer is the count of slots the producer has published.
func (r *Ring) Producer() uint32 { return r.word(offProducer).Load() }

// SetProducer publishes the slots before index p (a release store: the slots'
// contents are visible to a reader that loads p).
func (r *Ring) SetProducer(p uint32) { r.word(offProducer).Store(p) }

// Consumer is the count of slots the consumer has released.
func (r *Ring) Consumer() uint32 { return r.word(offConsumer).Load() }

// SetConsumer releases the slots before index c to the producer.
func (r *Ring) SetConsumer(c uint32) { r.word(offConsumer).Store(c) }

// Aux is the owner's word (see the Aux constants of each ring kind).
func (r *Ring) Aux() *atomic.Uint32 { return r.word(offAux) }

// Aux2 is the owner's second word.
func (r *Ring) Aux2() *atomic.Uint32 { return r.word(offAux2) }

// Slot is slot i (modulo the ring's size), aliasing shared memory: a reader
// that does not trust the writer copies it first.
func (r *Ring) Slot(i uint32) []byte {
	off := HeaderSize + int(i&(r.slots-1))*r.size
	return r.mem[off : off+r.size : off+r.size]
}

// CQ ring words: Aux is the notification request the client arms and the
// daemon consumes, Aux2 is set once the CQ overflowed.
const (
	NotifyOff       = 0
	NotifyAny       = 1
	NotifySolicited = 2
)

// QP ring words: the send ring's Aux is the QP's state as the daemon last
// saw it (ibv_qp_state), its Aux2 the index of the engine serving the QP.

// SendSlotSize is the slot size of a send ring for a QP's capabilities.
func SendSlotSize(maxSGE, maxInline int) int {
	return roundUp(SendSlotHeader+max(maxSGE*SGESize, maxInline), 64)
}

// RecvSlotSize is the slot size of a receive ring.
func RecvSlotSize(maxSGE int) int { return roundUp(RecvSlotHeader+maxSGE*SGESize, 16) }

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// SGE is one scatter/gather element as slots carry it.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWQE is a send work request as a send slot carries it. Inline data
// (SendFlags has SendInline) follows the header in place of the SG
// list; NumSGE is then 0 and InlineLen its length.
type SendWQE struct {
	WRID       uint64
	Opcode     uint8
	SendFlags  uint8
	NumSGE     uint16
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	InvRKey    uint32
	CompareAdd uint64
	Swap       uint64
	InlineLen  uint32
	// UD: the address handle (the client's handle), the destination QPN
	// and its Q_Key.
	AH, RemoteQPN, RemoteQKey uint32
}

var le = binary.LittleEndian

// PutSendWQE writes w and its SG list or inline data into slot; it reports
// false if they do not fit.
func PutSendWQE(slot []byte, w *SendWQE, sgl []SGE, inline []byte) bool {
	if SendSlotHeader+len(sgl)*SGESize > len(slot) || SendSlotHeader+len(inline) > len(slot) {
		return false
	}
	le.PutUint64(slot[offSendWRID:], w.WRID)
	slot[offSendOpcode], slot[offSendFlags] = w.Opcode, w.SendFlags
	le.PutUint16(slot[offSendNumSGE:], uint16(len(sgl)))
	le.PutUint32(slot[offSendImm:], w.Imm)
	le.PutUint64(slot[offSendRemoteAddr:], w.RemoteAddr)
	le.PutUint32(slot[offSendRKey:], w.RKey)
	le.PutUint32(slot[offSendInvRKey:], w.InvRKey)
	le.PutUint64(slot[offSendCompareAdd:], w.CompareAdd)
	le.PutUint64(slot[offSendSwap:], w.Swap)
	le.PutUint32(slot[offSendInlineLen:], uint32(len(inline)))
	le.PutUint32(slot[offSendAH:], w.AH)
	le.PutUint32(slot[offSendRemoteQPN:], w.RemoteQPN)
	le.PutUint32(slot[offSendRemoteQKey:], w.RemoteQKey)
	putSGEs(slot[SendSlotHeader:], sgl)
	copy(slot[SendSlotHeader:], inline)
	return true
}

// SendWQEOf decodes a send slot (a private copy) into w, appending its SG
// list to sgl; inline aliases the slot. A slot whose counts overrun it is an
// error; w.WRID is set even then.
func SendWQEOf(slot []byte, w *SendWQE, sgl []SGE) (sges []SGE, inline []byte, err error) {
	if len(slot) < SendSlotHeader {
		return sgl, nil, fmt.Errorf("uverbs: send slot of %d bytes", len(slot))
	}
	w.WRID = le.Uint64(slot[offSendWRID:])
	w.Opcode, w.SendFlags = slot[offSendOpcode], slot[offSendFlags]
	w.NumSGE = le.Uint16(slot[offSendNumSGE:])
	w.Imm = le.Uint32(slot[offSendImm:])
	w.RemoteAddr = le.Uint64(slot[offSendRemoteAddr:])
	w.RKey = le.Uint32(slot[offSendRKey:])
	w.InvRKey = le.Uint32(slot[offSendInvRKey:])
	w.CompareAdd = le.Uint64(slot[offSendCompareAdd:])
	w.Swap = le.Uint64(slot[offSendSwap:])
	w.InlineLen = le.Uint32(slot[offSendInlineLen:])
	w.AH, w.RemoteQPN, w.RemoteQKey = le.Uint32(slot[offSendAH:]), le.Uint32(slot[offSendRemoteQPN:]), le.Uint32(slot[offSendRemoteQKey:])
	body := slot[SendSlotHeader:]
	if int(w.NumSGE)*SGESize > len(body) || uint64(w.InlineLen) > uint64(len(body)) {
		return sgl, nil, fmt.Errorf("uverbs: send slot names %d SGEs and %d inline bytes in %d bytes", w.NumSGE, w.InlineLen, len(body))
	}
	if w.InlineLen > 0 {
		return sgl, body[:w.InlineLen], nil
	}
	return getSGEs(body, int(w.NumSGE), sgl), nil, nil
}

// PutRecvWQE writes a receive work request into slot; false if it does not fit.
func PutRecvWQE(slot []byte, wrID uint64, sgl []SGE) bool {
	if RecvSlotHeader+len(sgl)*SGESize > len(slot) {
		return false
	}
	le.PutUint64(slot[offRecvWRID:], wrID)
	le.PutUint32(slot[offRecvNumSGE:], uint32(len(sgl)))
	le.PutUint32(slot[offRecvReserved:], 0)
	putSGEs(slot[RecvSlotHeader:], sgl)
	return true
}

// RecvWQEOf decodes a receive slot (a private copy), appending its SG list
// to sgl. The work request's ID is returned even when the rest is malformed.
func RecvWQEOf(slot []byte, sgl []SGE) (wrID uint64, sges []SGE, err error) {
	if len(slot) < RecvSlotHeader {
		return 0, sgl, fmt.Errorf("uverbs: receive slot of %d bytes", len(slot))
	}
	n := le.Uint32(slot[offRecvNumSGE:])
	wrID = le.Uint64(slot[offRecvWRID:])
	if uint64(n)*SGESize > uint64(len(slot)-RecvSlotHeader) {
		return wrID, sgl, fmt.Errorf("uverbs: receive slot names %d SGEs in %d bytes", n, len(slot))
	}
	return wrID, getSGEs(slot[RecvSlotHeader:], int(n), sgl), nil
}

func putSGEs(b []byte, sgl []SGE) {
	for i, s := range sgl {
		e := b[i*SGESize:]
		le.PutUint64(e[offSGEAddr:], s.Addr)
		le.PutUint32(e[offSGELength:], s.Length)
		le.PutUint32(e[offSGELKey:], s.LKey)
	}
}

func getSGEs(b []byte, n int, sgl []SGE) []SGE {
	for i := range n {
		e := b[i*SGESize:]
		sgl = append(sgl, SGE{Addr: le.Uint64(e[offSGEAddr:]), Length: le.Uint32(e[offSGELength:]), LKey: le.Uint32(e[offSGELKey:])})
	}
	return sgl
}

// CQE is a work completion as a CQ slot carries it (struct ibv_wc's fields).
type CQE struct {
	WRID           uint64
	Status         uint8
	Opcode         uint8
	NetHdr         uint8 // a UD receive's IP version (4, 6), else 0
	VendorErr      uint32
	ByteLen        uint32
	Imm            uint32
	InvalidatedKey uint32
	QPNum          uint32
	SrcQP          uint32
	WCFlags        uint32
}

// PutCQE writes c into a CQ slot.
func PutCQE(slot []byte, c *CQE) {
	le.PutUint64(slot[offCQEWRID:], c.WRID)
	slot[offCQEStatus], slot[offCQEOpcode] = c.Status, c.Opcode
	slot[offCQENetHdr], slot[offCQEReserved] = c.NetHdr, 0
	le.PutUint32(slot[offCQEVendorErr:], c.VendorErr)
	le.PutUint32(slot[offCQEByteLen:], c.ByteLen)
	le.PutUint32(slot[offCQEImm:], c.Imm)
	le.PutUint32(slot[offCQEInvalidatedKey:], c.InvalidatedKey)
	le.PutUint32(slot[offCQEQPNum:], c.QPNum)
	le.PutUint32(slot[offCQESrcQP:], c.SrcQP)
	le.PutUint32(slot[offCQEWCFlags:], c.WCFlags)
}

// CQEOf decodes a CQ slot.
func CQEOf(slot []byte, c *CQE) {
	c.WRID = le.Uint64(slot[offCQEWRID:])
	c.Status, c.Opcode, c.NetHdr = slot[offCQEStatus], slot[offCQEOpcode], slot[offCQENetHdr]
	c.VendorErr = le.Uint32(slot[offCQEVendorErr:])
	c.ByteLen = le.Uint32(slot[offCQEByteLen:])
	c.Imm = le.Uint32(slot[offCQEImm:])
	c.InvalidatedKey = le.Uint32(slot[offCQEInvalidatedKey:])
	c.QPNum = le.Uint32(slot[offCQEQPNum:])
	c.SrcQP = le.Uint32(slot[offCQESrcQP:])
	c.WCFlags = le.Uint32(slot[offCQEWCFlags:])
}

// Doorbell page: one word per engine, non-zero while that engine sleeps. A
// client that published work for a QP whose engine sleeps writes to the
// doorbell eventfd; one that finds it awake makes no system call. The
// non-zero word is the number of the sleep (SleepNumber), so that an
// observer can tell the engine's next sleep from the one it saw.
const DoorbellPageSize = 4096

// Sleeping reports whether engine i sleeps, from the doorbell page.
func Sleeping(page []byte, i uint32) bool { return SleepNumber(page, i) != 0 }

// SleepNumber is the number of engine i's current sleep, 0 while it is
// awake.
func SleepNumber(page []byte, i uint32) uint32 {
	off := uintptr(i%doorbellLines)*doorbellStride + offSleeping
	return (*atomic.Uint32)(unsafe.Pointer(&page[off])).Load()
}

// SetSleeping records in the doorbell page that engine i sleeps its sleep
// number n, or with 0 that it is awake.
func SetSleeping(page []byte, i uint32, n uint32) {
	off := uintptr(i%doorbellLines)*doorbellStride + offSleeping
	(*atomic.Uint32)(unsafe.Pointer(&page[off])).Store(n)
}
