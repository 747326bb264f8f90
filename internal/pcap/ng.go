package pcap

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// NGWriter writes a pcapng capture (the format Wireshark writes) of one
// Ethernet interface: a section header, an interface description with
// nanosecond timestamps, then one enhanced packet block per frame, its
// direction in the epb_flags option.
type NGWriter struct {
	w       io.Writer
	snapLen int
	buf     []byte
}

// pcapng block types and options.
const (
	blockSHB        = 0x0a0d0d0a
	blockIDB        = 0x00000001
	blockEPB        = 0x00000006
	byteOrderMagic  = 0x1a2b3c4d
	optEndOfOpt     = 0
	optIfTSResol    = 9
	optEPBFlags     = 2
	epbFlagInbound  = 1
	epbFlagOutbound = 2
)

var ngOrder = binary.LittleEndian

// NewNGWriter writes the capture's header blocks to w; frames longer than
// snapLen are cut to it.
func NewNGWriter(w io.Writer, snapLen int) (*NGWriter, error) {
	n := &NGWriter{w: w, snapLen: snapLen}
	shb := ngOrder.AppendUint32(nil, byteOrderMagic)
	shb = ngOrder.AppendUint16(shb, 1) // version 1.0
	shb = ngOrder.AppendUint16(shb, 0)
	shb = ngOrder.AppendUint64(shb, ^uint64(0)) // section length unknown
	if err := n.block(blockSHB, shb); err != nil {
		return nil, err
	}
	idb := ngOrder.AppendUint16(nil, LinkTypeEthernet)
	idb = ngOrder.AppendUint16(idb, 0)
	idb = ngOrder.AppendUint32(idb, uint32(snapLen))
	idb = appendOption(idb, optIfTSResol, []byte{9}) // nanoseconds
	idb = appendOption(idb, optEndOfOpt, nil)
	if err := n.block(blockIDB, idb); err != nil {
		return nil, err
	}
	return n, nil
}

// WritePacket writes one frame seen at t, sent (outbound) or received.
func (n *NGWriter) WritePacket(t time.Time, frame []byte, outbound bool) error {
	data := frame
	if len(data) > n.snapLen {
		data = data[:n.snapLen]
	}
	ts := uint64(t.UnixNano())
	b := n.buf[:0]
	b = ngOrder.AppendUint32(b, 0) // interface 0
	b = ngOrder.AppendUint32(b, uint32(ts>>32))
	b = ngOrder.AppendUint32(b, uint32(ts))
	b = ngOrder.AppendUint32(b, uint32(len(data)))
	b = ngOrder.AppendUint32(b, uint32(len(frame)))
	b = append(b, data...)
	b = append(b, make([]byte, pad4(len(data)))...)
	flags := uint32(epbFlagInbound)
	if outbound {
		flags = epbFlagOutbound
	}
	b = appendOption(b, optEPBFlags, ngOrder.AppendUint32(nil, flags))
	b = appendOption(b, optEndOfOpt, nil)
	n.buf = b
	return n.block(blockEPB, b)
}

// block writes a block: type, total length, body, total length again.
func (n *NGWriter) block(typ uint32, body []byte) error {
	total := uint32(12 + len(body))
	hdr := ngOrder.AppendUint32(nil, typ)
	hdr = ngOrder.AppendUint32(hdr, total)
	if _, err := n.w.Write(hdr); err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	if _, err := n.w.Write(body); err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	if _, err := n.w.Write(ngOrder.AppendUint32(nil, total)); err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	return nil
}

func appendOption(b []byte, code uint16, val []byte) []byte {
	b = ngOrder.AppendUint16(b, code)
	b = ngOrder.AppendUint16(b, uint16(len(val)))
	b = append(b, val...)
	return append(b, make([]byte, pad4(len(val)))...)
}

func pad4(n int) int { return (4 - n%4) % 4 }

// NGPacket is one enhanced packet block of a pcapng capture.
type NGPacket struct {
	Time     time.Time
	Data     []byte
	Outbound bool
}

// ReadNG reads the packets of a little-endian pcapng capture of one
// interface with nanosecond timestamps, as NGWriter writes it.
func ReadNG(data []byte) ([]NGPacket, error) {
	var out []NGPacket
	for off := 0; off < len(data); {
		if len(data)-off < 12 {
			return out, ErrTruncated
		}
		typ, total := ngOrder.Uint32(data[off:]), int(ngOrder.Uint32(data[off+4:]))
		if total < 12 || total%4 != 0 || off+total > len(data) || int(ngOrder.Uint32(data[off+total-4:])) != total {
			return out, fmt.Errorf("pcap: block of %d bytes at %d", total, off)
		}
		body := data[off+8 : off+total-4]
		switch typ {
		case blockSHB:
			if len(body) < 4 || ngOrder.Uint32(body) != byteOrderMagic {
				return out, ErrNotPcap
			}
		case blockEPB:
			if len(body) < 20 {
				return out, ErrTruncated
			}
			ts := uint64(ngOrder.Uint32(body[4:]))<<32 | uint64(ngOrder.Uint32(body[8:]))
			capLen := int(ngOrder.Uint32(body[12:]))
			if 20+capLen > len(body) {
				return out, ErrTruncated
			}
			p := NGPacket{Time: time.Unix(0, int64(ts)), Data: body[20 : 20+capLen]}
			opts := body[20+capLen+pad4(capLen):]
			for len(opts) >= 4 {
				code, l := ngOrder.Uint16(opts), int(ngOrder.Uint16(opts[2:]))
				if code == optEndOfOpt || 4+l > len(opts) {
					break
				}
				if code == optEPBFlags && l == 4 {
					p.Outbound = ngOrder.Uint32(opts[4:])&3 == epbFlagOutbound
				}
				opts = opts[4+l+pad4(l):]
			}
			out = append(out, p)
		}
		off += total
	}
	return out, nil
}
