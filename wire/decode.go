package wire

import (
	"encoding/binary"
	"hash/crc32"
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

// DecodeSplit is Decode for a frame that arrived in two pieces, head then
// tail (an AF_XDP multi-buffer frame in two UMEM chunks), without joining
// them: p.Payload aliases the payload's part in head and p.PayloadTail its
// part in tail. Every header, up to the end of the transport headers, must
// lie in head; otherwise it returns ErrSplitHeaders, and the caller gathers
// the frame and calls Decode. With an empty tail it is Decode.
func DecodeSplit(head, tail []byte, p *Packet) error {
	if len(tail) == 0 {
		return Decode(head, p)
	}
	*p = Packet{}
	if len(head) < minSplitHead {
		return errSplitHeaders
	}
	off, v6, err := parseEth(head, &p.Eth)
	if err != nil {
		return err
	}
	b := head[off:]
	end, err := decodeIPUDP(b, len(b)+len(tail), v6, p)
	if err != nil {
		return err
	}
	tOff := l3Len(v6) + UDPHeaderLen
	n := end - tOff // BTH .. ICRC
	if n < BTHLen+ICRCLen {
		return errBTHTruncated
	}
	if n%4 != 0 {
		return errUnaligned
	}
	if len(b) < tOff+BTHLen {
		return errSplitHeaders
	}
	// The ICRC, and what it covers, may each straddle the pieces.
	var icrcBytes [ICRCLen]byte
	for i := range icrcBytes {
		icrcBytes[i] = byteAt(b, tail, end-ICRCLen+i)
	}
	icrc := binary.LittleEndian.Uint32(icrcBytes[:])
	cut := end - ICRCLen // end of what the ICRC covers
	crc := computeICRC(b[:min(len(b), cut)], v6)
	if cut > len(b) {
		crc = crc32.Update(crc, crc32.IEEETable, tail[:cut-len(b)]) // chained Updates compose
	}
	if crc != icrc {
		return errICRC
	}
	p.ICRC = icrc
	info, payloadLen, err := decodeBTHInfo(b[tOff:], n-ICRCLen, p)
	if err != nil {
		return err
	}
	if len(b) < tOff+info.HeaderLen {
		return errSplitHeaders
	}
	start := tOff + info.HeaderLen
	for i := start + payloadLen; i < cut; i++ {
		if byteAt(b, tail, i) != 0 {
			return errPadNonZero
		}
	}
	if err := decodeExt(b[tOff:start], info.Headers, p); err != nil {
		return err
	}
	stop := start + payloadLen
	p.Payload = b[start:min(stop, len(b)):min(stop, len(b))]
	if stop > len(b) {
		p.PayloadTail = tail[: stop-len(b) : stop-len(b)]
	}
	return nil
}

// minSplitHead is the shortest head DecodeSplit takes: room for the
// longest Ethernet, IP, UDP and BTH headers (the rest is checked once the
// opcode says how long its headers are).
const minSplitHead = EthHeaderLen + VLANTagLen + IPv6HeaderLen + UDPHeaderLen + BTHLen

// byteAt is byte i of head followed by tail.
func byteAt(head, tail []byte, i int) byte {
	if i < len(head) {
		return head[i]
	}
	return tail[i-len(head)]
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
	end, err := decodeIPUDP(b, len(b), v6, p)
	if err != nil {
		return err
	}
	t := b[l3Len(v6)+UDPHeaderLen : end] // BTH .. ICRC
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
	info, payloadLen, err := decodeBTHInfo(t, len(t)-ICRCLen, p)
	if err != nil {
		return err
	}
	payloadEnd := info.HeaderLen + payloadLen
	for _, c := range t[payloadEnd : len(t)-ICRCLen] {
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

// decodeBTHInfo decodes the BTH at the start of hdr, of a transport packet
// of n bytes (BTH to pad, without the ICRC), and checks the opcode and the
// lengths: it returns the opcode's layout and the payload length.
func decodeBTHInfo(hdr []byte, n int, p *Packet) (*OpInfo, int, error) {
	decodeBTH(hdr, &p.BTH)
	if p.BTH.TVer != 0 {
		return nil, 0, errTVer
	}
	e := &opTable[p.BTH.Opcode]
	if !e.known {
		return nil, 0, errUnknownOpcode
	}
	info := &e.info
	rest := n - info.HeaderLen // payload + pad
	if rest < 0 {
		return nil, 0, errHeadersTruncated
	}
	pad := int(p.BTH.PadCnt)
	if pad > rest {
		return nil, 0, errPadTooBig
	}
	if rest > 0 && info.Headers&HasPayload == 0 {
		return nil, 0, errNoPayloadAllowed
	}
	return info, rest - pad, nil
}

// decodeIPUDP decodes and checks the IP and UDP headers at the start of b,
// of a packet whose bytes from b on number total (b may hold only the
// first of them), and returns the end of the IP packet.
func decodeIPUDP(b []byte, total int, v6 bool, p *Packet) (end int, err error) {
	if v6 {
		if len(b) < IPv6HeaderLen {
			return 0, errIPv6Truncated
		}
		vtf := binary.BigEndian.Uint32(b)
		if vtf>>28 != 6 {
			return 0, errIPv6Version
		}
		if b[6] != ipProtoUDP {
			return 0, errNotUDPv6
		}
		end = IPv6HeaderLen + int(binary.BigEndian.Uint16(b[4:]))
		if end > total {
			return 0, errIPv6BeyondFrame
		}
		if b[7] == 0 {
			return 0, errIPv6HopLimit
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
		if end, err = ipv4End(b, total); err != nil {
			return 0, err
		}
		if ipv4Checksum(b[:IPv4HeaderLen]) != 0 {
			return 0, errIPv4Checksum
		}
		flags := binary.BigEndian.Uint16(b[6:])
		if flags&0x3fff != 0 {
			return 0, errIPv4Fragment
		}
		if flags&0x8000 != 0 {
			return 0, errIPv4EvilBit
		}
		if b[8] == 0 {
			return 0, errIPv4TTL
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

	if end-l3Len(v6) < UDPHeaderLen || len(b) < l3Len(v6)+UDPHeaderLen {
		return 0, errUDPTruncated
	}
	u := b[l3Len(v6):] // UDP header ..
	p.UDP = UDP{
		SrcPort:  binary.BigEndian.Uint16(u[0:]),
		DstPort:  binary.BigEndian.Uint16(u[2:]),
		Length:   binary.BigEndian.Uint16(u[4:]),
		Checksum: binary.BigEndian.Uint16(u[6:]),
	}
	if p.UDP.DstPort != UDPPort {
		return 0, errNotRoCEPort
	}
	if int(p.UDP.Length) != end-l3Len(v6) {
		return 0, errUDPLength
	}
	return end, nil
}

// ipv4End checks the structure of the IPv4 header at the start of b, of a
// packet whose bytes from b on number total: version 4, UDP, no options, a
// total length within total. It returns that length, the end of the IP
// packet. Decode and ICRC (locateL3) both need these checks; Decode's others
// (checksum, fragments, TTL) are its own.
func ipv4End(b []byte, total int) (int, error) {
	if len(b) < IPv4HeaderLen {
		return 0, errIPv4Truncated
	}
	if b[0]>>4 != 4 {
		return 0, errIPv4Version
	}
	if b[9] != ipProtoUDP {
		return 0, errNotUDPv4
	}
	switch ihl := b[0] & 0x0f; {
	case ihl < 5:
		return 0, errIPv4IHL
	case ihl > 5:
		return 0, errIPv4Options
	}
	end := int(binary.BigEndian.Uint16(b[2:]))
	if end < IPv4HeaderLen {
		return 0, errIPv4TotalLen
	}
	if end > total {
		return 0, errIPv4BeyondFrame
	}
	return end, nil
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
func ipv4Checksum(h []byte) uint16 { return Checksum(h, 0) }

// Checksum is the Internet checksum (RFC 1071) of b, starting from the
// partial sum sum (a pseudo-header's, or 0): the value to store in a
// checksum field that was zero, or 0 when verifying data that holds it.
func Checksum(b []byte, sum uint32) uint16 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
