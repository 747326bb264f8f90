package wire

import (
	"encoding/binary"
	"net/netip"
)

// Decode parses an Ethernet frame holding a RoCEv2 packet into p and verifies
// its ICRC. Every field of p is overwritten; p.Payload aliases frame. Lengths
// come from the IP and UDP headers, never from len(frame), so Ethernet
// padding and trailing bytes are ignored.
//
// Decode accepts exactly the frames Encode can produce: re-encoding a decoded
// Packet reproduces the frame byte for byte (up to the end of the IP packet).
// Besides the ICRC it checks the IPv4 header checksum, rejects IPv4 options
// and fragments, a TTL/hop limit of 0, TVer != 0, unknown opcodes, a UDP
// payload that is not a multiple of 4 bytes, non-zero pad bytes, payload on
// opcodes that carry none and non-zero CNP reserved bytes. The UDP checksum
// is not verified. It does not allocate. On error p's contents are
// unspecified.
func Decode(frame []byte, p *Packet) error {
	*p = Packet{}
	off, v6, err := parseEth(frame, &p.Eth)
	if err != nil {
		return err
	}
	return decodeL3(frame[off:], v6, p)
}

// DecodeIP is Decode for a buffer that starts at the IP header; v6 selects
// the IP version (as the EtherType would). p.Eth is zeroed.
func DecodeIP(l3 []byte, v6 bool, p *Packet) error {
	*p = Packet{}
	return decodeL3(l3, v6, p)
}

// parseEth decodes the Ethernet header (with at most one 802.1Q tag) and
// returns the offset of the IP header.
func parseEth(frame []byte, e *Ethernet) (off int, v6 bool, err error) {
	if len(frame) < EthHeaderLen {
		return 0, false, errEthTruncated
	}
	copy(e.Dst[:], frame[0:6])
	copy(e.Src[:], frame[6:12])
	et := binary.BigEndian.Uint16(frame[12:])
	off = EthHeaderLen
	if et == etherTypeVLAN {
		if len(frame) < EthHeaderLen+VLANTagLen {
			return 0, false, errVLANTruncated
		}
		e.HasVLAN = true
		e.VLANTCI = binary.BigEndian.Uint16(frame[14:])
		et = binary.BigEndian.Uint16(frame[16:])
		off += VLANTagLen
	}
	switch et {
	case etherTypeIPv4:
		return off, false, nil
	case etherTypeIPv6:
		return off, true, nil
	}
	return 0, false, errNotIP
}

func decodeL3(b []byte, v6 bool, p *Packet) error {
	var end int // end of the IP packet
	if v6 {
		if len(b) < IPv6HeaderLen {
			return errIPv6Truncated
		}
		vtf := binary.BigEndian.Uint32(b)
		if vtf>>28 != 6 {
			return errIPv6Version
		}
		if b[6] != ipProtoUDP {
			return errNotUDPv6
		}
		end = IPv6HeaderLen + int(binary.BigEndian.Uint16(b[4:]))
		if end > len(b) {
			return errIPv6BeyondFrame
		}
		if b[7] == 0 {
			return errIPv6HopLimit
		}
		p.IP = IP{
			V6:        true,
			TOS:       uint8(vtf >> 20),
			FlowLabel: vtf & mask20,
			TTL:       b[7],
			Src:       netip.AddrFrom16([16]byte(b[8:24])),
			Dst:       netip.AddrFrom16([16]byte(b[24:40])),
		}
	} else {
		if len(b) < IPv4HeaderLen {
			return errIPv4Truncated
		}
		if b[0]>>4 != 4 {
			return errIPv4Version
		}
		if b[9] != ipProtoUDP {
			return errNotUDPv4
		}
		switch ihl := b[0] & 0x0f; {
		case ihl < 5:
			return errIPv4IHL
		case ihl > 5:
			return errIPv4Options
		}
		end = int(binary.BigEndian.Uint16(b[2:]))
		if end < IPv4HeaderLen {
			return errIPv4TotalLen
		}
		if end > len(b) {
			return errIPv4BeyondFrame
		}
		if ipv4Checksum(b[:IPv4HeaderLen]) != 0 {
			return errIPv4Checksum
		}
		flags := binary.BigEndian.Uint16(b[6:])
		if flags&0x3fff != 0 {
			return errIPv4Fragment
		}
		if flags&0x8000 != 0 {
			return errIPv4EvilBit
		}
		if b[8] == 0 {
			return errIPv4TTL
		}
		p.IP = IP{
			TOS: b[1],
			ID:  binary.BigEndian.Uint16(b[4:]),
			DF:  flags&0x4000 != 0,
			TTL: b[8],
			Src: netip.AddrFrom4([4]byte(b[12:16])),
			Dst: netip.AddrFrom4([4]byte(b[16:20])),
		}
	}

	u := b[l3Len(v6):end] // UDP header .. ICRC
	if len(u) < UDPHeaderLen {
		return errUDPTruncated
	}
	p.UDP = UDP{
		SrcPort:  binary.BigEndian.Uint16(u[0:]),
		DstPort:  binary.BigEndian.Uint16(u[2:]),
		Length:   binary.BigEndian.Uint16(u[4:]),
		Checksum: binary.BigEndian.Uint16(u[6:]),
	}
	if p.UDP.DstPort != UDPPort {
		return errNotRoCEPort
	}
	if int(p.UDP.Length) != len(u) {
		return errUDPLength
	}
	t := u[UDPHeaderLen:] // BTH .. ICRC
	if len(t) < BTHLen+ICRCLen {
		return errBTHTruncated
	}
	if len(t)%4 != 0 {
		return errUnaligned
	}

	// The ICRC is checked before the transport headers are interpreted so a
	// corrupted packet is reported as such, not as whatever the corruption
	// looks like.
	icrc := binary.LittleEndian.Uint32(t[len(t)-ICRCLen:])
	if computeICRC(b[:end-ICRCLen], v6) != icrc {
		return errICRC
	}
	p.ICRC = icrc

	decodeBTH(t, &p.BTH)
	if p.BTH.TVer != 0 {
		return errTVer
	}
	e := &opTable[p.BTH.Opcode]
	if !e.known {
		return errUnknownOpcode
	}
	info := &e.info
	rest := len(t) - ICRCLen - info.HeaderLen // payload + pad
	if rest < 0 {
		return errHeadersTruncated
	}
	pad := int(p.BTH.PadCnt)
	if pad > rest {
		return errPadTooBig
	}
	if rest > 0 && info.Headers&HasPayload == 0 {
		return errNoPayloadAllowed
	}
	payloadEnd := info.HeaderLen + rest - pad
	for _, c := range t[payloadEnd : payloadEnd+pad] {
		if c != 0 {
			return errPadNonZero
		}
	}
	if err := decodeExt(t[:info.HeaderLen], info.Headers, p); err != nil {
		return err
	}
	p.Payload = t[info.HeaderLen:payloadEnd:payloadEnd]
	return nil
}

func decodeBTH(b []byte, h *BTH) {
	*h = BTH{
		Opcode: Opcode(b[0]),
		SE:     b[1]&0x80 != 0,
		MigReq: b[1]&0x40 != 0,
		PadCnt: (b[1] >> 4) & 3,
		TVer:   b[1] & 0x0f,
		PKey:   binary.BigEndian.Uint16(b[2:]),
		FECN:   b[4]&0x80 != 0,
		BECN:   b[4]&0x40 != 0,
		Resv6a: b[4] & 0x3f,
		DestQP: binary.BigEndian.Uint32(b[4:]) & mask24,
		AckReq: b[8]&0x80 != 0,
		Resv7:  b[8] & 0x7f,
		PSN:    binary.BigEndian.Uint32(b[8:]) & mask24,
	}
}

// decodeExt decodes the extension headers; hdr is BTH + extension headers,
// whose length the opcode table guarantees.
func decodeExt(hdr []byte, h HeaderSet, p *Packet) error {
	o := BTHLen
	if h&HasDETH != 0 {
		p.DETH = DETH{
			QKey:  binary.BigEndian.Uint32(hdr[o:]),
			Resv:  hdr[o+4],
			SrcQP: binary.BigEndian.Uint32(hdr[o+4:]) & mask24,
		}
		o += DETHLen
	}
	if h&HasRETH != 0 {
		p.RETH = RETH{
			VA:   binary.BigEndian.Uint64(hdr[o:]),
			RKey: binary.BigEndian.Uint32(hdr[o+8:]),
			Len:  binary.BigEndian.Uint32(hdr[o+12:]),
		}
		o += RETHLen
	}
	if h&HasAtomicETH != 0 {
		p.AtomicETH = AtomicETH{
			VA:      binary.BigEndian.Uint64(hdr[o:]),
			RKey:    binary.BigEndian.Uint32(hdr[o+8:]),
			SwapAdd: binary.BigEndian.Uint64(hdr[o+12:]),
			Compare: binary.BigEndian.Uint64(hdr[o+20:]),
		}
		o += AtomicETHLen
	}
	if h&HasAETH != 0 {
		v := binary.BigEndian.Uint32(hdr[o:])
		p.AETH = AETH{Syndrome: uint8(v >> 24), MSN: v & mask24}
		o += AETHLen
	}
	if h&HasAtomicAckETH != 0 {
		p.AtomicAck = binary.BigEndian.Uint64(hdr[o:])
		o += AtomicAckETHLen
	}
	if h&HasImmDt != 0 {
		p.ImmDt = binary.BigEndian.Uint32(hdr[o:])
		o += ImmDtLen
	}
	if h&HasIETH != 0 {
		p.IETH = binary.BigEndian.Uint32(hdr[o:])
		o += IETHLen
	}
	if h&HasCNPReserved != 0 {
		for _, c := range hdr[o : o+CNPReservedLen] {
			if c != 0 {
				return errCNPReserved
			}
		}
	}
	return nil
}

// ipv4Checksum returns the Internet checksum of h: the value to store in a
// header whose checksum field is zero, or 0 when verifying a complete header.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
