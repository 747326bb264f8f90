// Package pcap reads classic libpcap capture files from memory (both byte
// orders, microsecond and nanosecond timestamps), which the wire tests
// replay golden captures with, and writes pcapng captures (ng.go), which
// xdproce up --pcap records a device's frames in.
package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// LinkTypeEthernet is LINKTYPE_ETHERNET.
const LinkTypeEthernet = 1

const (
	magicMicro    = 0xa1b2c3d4
	magicNano     = 0xa1b23c4d
	globalHdrLen  = 24
	recordHdrLen  = 16
	linkTypeMask  = 0x0000ffff
	fcsLenShift   = 28
	fcsPresentBit = 1 << 26
)

// Errors.
var (
	ErrNotPcap   = errors.New("pcap: not a classic pcap file")
	ErrTruncated = errors.New("pcap: truncated file")
)

// Header is the pcap global header.
type Header struct {
	ByteOrder    binary.ByteOrder
	Nanosecond   bool // timestamps have nanosecond resolution
	VersionMajor uint16
	VersionMinor uint16
	SnapLen      uint32
	LinkType     uint16
	FCSLen       int // bytes of FCS at the end of each packet, when declared
}

// Record is one captured packet.
type Record struct {
	Time    time.Time
	Data    []byte // aliases the file contents
	OrigLen int    // length on the wire; > len(Data) if the capture was cut
}

// Reader iterates over the records of a capture held in memory.
type Reader struct {
	Header Header
	data   []byte
	off    int
}

// NewReader parses the global header of a pcap file.
func NewReader(data []byte) (*Reader, error) {
	if len(data) < globalHdrLen {
		return nil, fmt.Errorf("global header: %w", ErrTruncated)
	}
	var h Header
	switch {
	case binary.LittleEndian.Uint32(data) == magicMicro:
		h.ByteOrder = binary.LittleEndian
	case binary.BigEndian.Uint32(data) == magicMicro:
		h.ByteOrder = binary.BigEndian
	case binary.LittleEndian.Uint32(data) == magicNano:
		h.ByteOrder, h.Nanosecond = binary.LittleEndian, true
	case binary.BigEndian.Uint32(data) == magicNano:
		h.ByteOrder, h.Nanosecond = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("magic %#08x: %w", binary.BigEndian.Uint32(data), ErrNotPcap)
	}
	o := h.ByteOrder
	h.VersionMajor = o.Uint16(data[4:])
	h.VersionMinor = o.Uint16(data[6:])
	if h.VersionMajor != 2 {
		return nil, fmt.Errorf("version %d.%d: %w", h.VersionMajor, h.VersionMinor, ErrNotPcap)
	}
	h.SnapLen = o.Uint32(data[16:])
	lt := o.Uint32(data[20:])
	h.LinkType = uint16(lt & linkTypeMask)
	if lt&fcsPresentBit != 0 {
		h.FCSLen = 2 * int(lt>>fcsLenShift) // the field counts 16-bit words
	}
	return &Reader{Header: h, data: data, off: globalHdrLen}, nil
}

// Next returns the next record, or io.EOF after the last one.
func (r *Reader) Next() (Record, error) {
	if r.off == len(r.data) {
		return Record{}, io.EOF
	}
	if len(r.data)-r.off < recordHdrLen {
		return Record{}, fmt.Errorf("record header at offset %d: %w", r.off, ErrTruncated)
	}
	o := r.Header.ByteOrder
	h := r.data[r.off : r.off+recordHdrLen]
	sec, frac := int64(o.Uint32(h[0:])), int64(o.Uint32(h[4:]))
	incl, orig := o.Uint32(h[8:]), o.Uint32(h[12:])
	start := r.off + recordHdrLen
	if uint64(incl) > uint64(len(r.data)-start) {
		return Record{}, fmt.Errorf("record at offset %d claims %d bytes: %w", r.off, incl, ErrTruncated)
	}
	if !r.Header.Nanosecond {
		frac *= 1000
	}
	r.off = start + int(incl)
	return Record{
		Time:    time.Unix(sec, frac).UTC(),
		Data:    r.data[start:r.off:r.off],
		OrigLen: int(orig),
	}, nil
}

// ReadAll returns every record of a capture.
func ReadAll(data []byte) (Header, []Record, error) {
	r, err := NewReader(data)
	if err != nil {
		return Header{}, nil, err
	}
	var recs []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return r.Header, recs, nil
		}
		if err != nil {
			return r.Header, recs, err
		}
		recs = append(recs, rec)
	}
}
