package perftest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Dest is what each side tells the other about one QP in perftest's key
// message (struct pingpong_dest): where to send and, for RDMA, which memory.
type Dest struct {
	LID      uint16
	OutReads uint16 // outstanding READs/atomics the sender accepts as responder
	QPN      uint32
	PSN      uint32 // the sender's first send PSN
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
	// GIDIndex is the sender's GID index; only the binary struct carries
	// it, and no reader uses it.
	GIDIndex int32
}

// KeyMsgSize is the length of a key message with a GID, NUL included
// (KEY_MSG_SIZE_GID).
const KeyMsgSize = 108

// Marshal formats d as perftest's key message: 107 characters and a NUL,
// "lid:out_reads:qpn:psn:rkey:vaddr:gid[0]:...:gid[15]:srqn:".
func (d Dest) Marshal() []byte {
	var b strings.Builder
	b.Grow(KeyMsgSize)
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	for _, g := range d.GID {
		fmt.Fprintf(&b, "%02x:", g)
	}
	fmt.Fprintf(&b, "%08x:", d.SRQN)
	out := make([]byte, KeyMsgSize)
	copy(out, b.String())
	return out
}

// ParseDest reads a key message. Fields are hexadecimal, separated by
// colons, in Marshal's order; the message must be KeyMsgSize bytes.
func ParseDest(msg []byte) (Dest, error) {
	if len(msg) != KeyMsgSize {
		return Dest{}, fmt.Errorf("perftest: key message of %d bytes, want %d", len(msg), KeyMsgSize)
	}
	s := string(msg)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(strings.TrimSuffix(s, ":"), ":")
	if len(f) != 23 {
		return Dest{}, fmt.Errorf("perftest: key message %q has %d fields, want 23", s, len(f))
	}
	widths := [...]int{16, 16, 24, 24, 32, 64}
	var v [6]uint64
	for i, w := range widths {
		n, err := strconv.ParseUint(f[i], 16, w)
		if err != nil {
			return Dest{}, fmt.Errorf("perftest: key message field %d %q: %w", i, f[i], err)
		}
		v[i] = n
	}
	d := Dest{LID: uint16(v[0]), OutReads: uint16(v[1]), QPN: uint32(v[2]), PSN: uint32(v[3]), RKey: uint32(v[4]), VAddr: v[5]}
	for i := range d.GID {
		n, err := strconv.ParseUint(f[6+i], 16, 8)
		if err != nil {
			return Dest{}, fmt.Errorf("perftest: key message GID byte %d %q: %w", i, f[6+i], err)
		}
		d.GID[i] = byte(n)
	}
	srqn, err := strconv.ParseUint(f[22], 16, 32)
	if err != nil {
		return Dest{}, fmt.Errorf("perftest: key message SRQN %q: %w", f[22], err)
	}
	d.SRQN = uint32(srqn)
	return d, nil
}

// Addr is the GID as an IP address (IPv4-mapped GIDs unmapped).
func (d Dest) Addr() netip.Addr { return netip.AddrFrom16(d.GID).Unmap() }

// DestStructSize is the size of struct pingpong_dest as perftest sends it
// over an rdma_cm control connection (-R): binary, on x86-64.
const DestStructSize = 56

// MarshalStruct lays d out as perftest's rdma_write_keys sends it: struct
// pingpong_dest with every field big-endian (htobe32/htobe64) — lid,
// out_reads, qpn, psn, rkey, 4 bytes of padding, vaddr, the raw GID, srqn,
// gid_index. perftest leaves the padding uninitialised; it is zero here.
func (d Dest) MarshalStruct() []byte {
	b := make([]byte, DestStructSize)
	binary.BigEndian.PutUint32(b[0:], uint32(d.LID))
	binary.BigEndian.PutUint32(b[4:], uint32(d.OutReads))
	binary.BigEndian.PutUint32(b[8:], d.QPN)
	binary.BigEndian.PutUint32(b[12:], d.PSN)
	binary.BigEndian.PutUint32(b[16:], d.RKey)
	binary.BigEndian.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	binary.BigEndian.PutUint32(b[48:], d.SRQN)
	binary.BigEndian.PutUint32(b[52:], uint32(d.GIDIndex))
	return b
}

// ParseDestStruct reads a binary struct pingpong_dest as perftest's
// rdma_read_keys does: lid, out_reads, qpn, psn, rkey, vaddr and the GID
// (and here srqn and gid_index as well, which perftest ignores).
func ParseDestStruct(b []byte) (Dest, error) {
	if len(b) != DestStructSize {
		return Dest{}, fmt.Errorf("perftest: key struct of %d bytes, want %d", len(b), DestStructSize)
	}
	d := Dest{LID: uint16(binary.BigEndian.Uint32(b[0:])), OutReads: uint16(binary.BigEndian.Uint32(b[4:])),
		QPN: binary.BigEndian.Uint32(b[8:]), PSN: binary.BigEndian.Uint32(b[12:]), RKey: binary.BigEndian.Uint32(b[16:]),
		VAddr: binary.BigEndian.Uint64(b[24:]), SRQN: binary.BigEndian.Uint32(b[48:]), GIDIndex: int32(binary.BigEndian.Uint32(b[52:]))}
	copy(d.GID[:], b[32:48])
	return d, nil
}
