package wire

import "encoding/binary"

// maxIPPayload bounds the UDP datagram: the IPv4 total length and the IPv6
// payload length are 16-bit fields.
const maxIPPayload = 0xffff

// Encode writes p as an Ethernet frame into dst and returns its length, which
// is p.FrameLen(). It computes the IP and UDP lengths, BTH PadCnt (from
// len(p.Payload)), the IPv4 header checksum, zero pad bytes and the ICRC; the
// corresponding fields of p are ignored and p is not modified. Every other
// field is written as given (use Reset for rxe's defaults); in particular
// the UDP checksum is written verbatim and should be 0.
//
// Encode does not pad short frames to MinFrameLen: the transmit path must.
// It does not allocate.
func Encode(dst []byte, p *Packet) (int, error) {
	hdrLen, err := EncodeHeaders(dst, p, len(p.Payload))
	if err != nil {
		return 0, err
	}
	copy(dst[hdrLen:], p.Payload)
	return seal(dst, l2Len(&p.Eth), p.IP.V6, hdrLen+len(p.Payload), padLen(len(p.Payload))), nil
}

// EncodeHeaders is the first half of a scatter encode: it writes every header
// of the frame (Ethernet through the last extension header) for a payload of
// payloadLen bytes, and returns hdrLen. The caller then copies the payload to
// dst[hdrLen:hdrLen+payloadLen] and calls Seal. p.Payload is ignored. dst must
// have room for the whole frame (FrameLen with that payload).
func EncodeHeaders(dst []byte, p *Packet, payloadLen int) (hdrLen int, err error) {
	e := &opTable[p.BTH.Opcode]
	if !e.known {
		return 0, errEncUnknownOpcode
	}
	info := &e.info
	if payloadLen < 0 {
		return 0, errEncNegPayload
	}
	if payloadLen > maxIPPayload {
		return 0, errEncTooLong
	}
	if payloadLen > 0 && info.Headers&HasPayload == 0 {
		return 0, errEncNoPayload
	}
	if err := validate(p, info); err != nil {
		return 0, err
	}
	pad := padLen(payloadLen)
	udpLen := UDPHeaderLen + info.HeaderLen + payloadLen + pad + ICRCLen
	v6 := p.IP.V6
	l3 := l3Len(v6)
	limit := maxIPPayload // IPv6 payload length
	if !v6 {
		limit -= IPv4HeaderLen // IPv4 total length includes the header
	}
	if udpLen > limit {
		return 0, errEncTooLong
	}
	l2 := l2Len(&p.Eth)
	if len(dst) < l2+l3+udpLen {
		return 0, errEncShort
	}

	b := dst[:l2+l3+UDPHeaderLen+info.HeaderLen]
	copy(b[0:6], p.Eth.Dst[:])
	copy(b[6:12], p.Eth.Src[:])
	et := uint16(etherTypeIPv4)
	if v6 {
		et = etherTypeIPv6
	}
	if p.Eth.HasVLAN {
		binary.BigEndian.PutUint16(b[12:], etherTypeVLAN)
		binary.BigEndian.PutUint16(b[14:], p.Eth.VLANTCI)
	}
	binary.BigEndian.PutUint16(b[l2-2:], et)

	ip := b[l2:]
	putIP(ip, &p.IP, udpLen)

	u := ip[l3:]
	binary.BigEndian.PutUint16(u[0:], p.UDP.SrcPort)
	binary.BigEndian.PutUint16(u[2:], UDPPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	binary.BigEndian.PutUint16(u[6:], p.UDP.Checksum)

	encodeTransport(u[UDPHeaderLen:], p, info.Headers, uint8(pad))
	return len(b), nil
}

// putIP writes the IP header of h, carrying udpLen bytes of UDP datagram,
// into ip: 40 bytes for IPv6, 20 for IPv4 (with its checksum).
func putIP(ip []byte, h *IP, udpLen int) {
	if h.V6 {
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(h.TOS)<<20|h.FlowLabel)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = ipProtoUDP
		ip[7] = h.TTL
		src, dst := h.Src.As16(), h.Dst.As16()
		copy(ip[8:24], src[:])
		copy(ip[24:40], dst[:])
		return
	}
	ip[0] = 0x45
	ip[1] = h.TOS
	binary.BigEndian.PutUint16(ip[2:], uint16(IPv4HeaderLen+udpLen))
	binary.BigEndian.PutUint16(ip[4:], h.ID)
	flags := uint16(0)
	if h.DF {
		flags = 0x4000
	}
	binary.BigEndian.PutUint16(ip[6:], flags)
	ip[8] = h.TTL
	ip[9] = ipProtoUDP
	ip[10], ip[11] = 0, 0
	src, dst := h.Src.As4(), h.Dst.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip[:IPv4HeaderLen]))
}

// GRHLen is the size of the GRH area at the head of a UD receive buffer.
const GRHLen = 40

// PutGRH writes what an RNIC puts in the 40-byte GRH area at the head of a
// UD receive buffer for a packet that came with IP header h and a UDP
// datagram of udpLen bytes: the IPv6 header, or for IPv4 20 zero bytes and
// then the IPv4 header (RoCEv2, as rxe fills it).
func PutGRH(dst *[GRHLen]byte, h *IP, udpLen int) {
	if h.V6 {
		putIP(dst[:], h, udpLen)
		return
	}
	clear(dst[:GRHLen-IPv4HeaderLen])
	putIP(dst[GRHLen-IPv4HeaderLen:], h, udpLen)
}

// Seal is the second half of a scatter encode: frame holds the headers
// written by EncodeHeaders (which returned hdrLen) followed by payloadLen
// payload bytes. Seal zeroes the pad bytes, writes the ICRC and returns the
// frame length. It re-reads the lengths from the frame's headers and refuses
// hdrLen/payloadLen values that disagree with them.
func Seal(frame []byte, hdrLen, payloadLen int) (frameLen int, err error) {
	var eth Ethernet
	off, v6, err := parseEth(frame, &eth)
	if err != nil {
		return 0, err
	}
	end, err := locateL3(frame[off:], v6)
	if err != nil {
		return 0, err
	}
	end += off
	bth := off + l3Len(v6) + UDPHeaderLen
	e := &opTable[frame[bth]]
	if !e.known {
		return 0, errUnknownOpcode
	}
	pad := padLen(payloadLen)
	if payloadLen < 0 || hdrLen != bth+e.info.HeaderLen || hdrLen+payloadLen+pad+ICRCLen != end {
		return 0, errSealLayout
	}
	if int(frame[bth+1]>>4&3) != pad {
		return 0, errSealPadCnt
	}
	return seal(frame, off, v6, hdrLen+payloadLen, pad), nil
}

// SealedLen is the length Seal will give a frame of hdrLen header and
// payloadLen payload bytes: a frame can be committed before its payload is
// in place and it is sealed.
func SealedLen(hdrLen, payloadLen int) int { return hdrLen + payloadLen + padLen(payloadLen) + ICRCLen }

// seal writes pad zero bytes and the ICRC after the payload ending at
// payloadEnd and returns the frame length. The caller has validated the
// layout.
func seal(frame []byte, l3off int, v6 bool, payloadEnd, pad int) int {
	icrcAt := payloadEnd + pad
	clear(frame[payloadEnd:icrcAt])
	icrc := computeICRC(frame[l3off:icrcAt], v6)
	binary.LittleEndian.PutUint32(frame[icrcAt:], icrc)
	return icrcAt + ICRCLen
}

// validate checks the fields Encode writes verbatim against their wire width
// and rejects values that are never valid to send.
func validate(p *Packet, info *OpInfo) error {
	if p.IP.TTL == 0 {
		return errEncTTL
	}
	if p.IP.V6 {
		if !p.IP.Src.Is6() || !p.IP.Dst.Is6() {
			return errEncAddr6
		}
		if p.IP.FlowLabel > mask20 {
			return errEncFlowLabel
		}
	} else if !p.IP.Src.Is4() || !p.IP.Dst.Is4() {
		return errEncAddr4
	}
	if p.UDP.DstPort != UDPPort && p.UDP.DstPort != 0 {
		return errEncDstPort
	}
	h := &p.BTH
	switch {
	case h.DestQP > mask24:
		return errEncDestQP
	case h.PSN > mask24:
		return errEncPSN
	case h.TVer > 0x0f:
		return errEncTVer
	case h.Resv6a > 0x3f:
		return errEncResv6a
	case h.Resv7 > 0x7f:
		return errEncResv7
	case info.Headers&HasAETH != 0 && p.AETH.MSN > mask24:
		return errEncMSN
	case info.Headers&HasDETH != 0 && p.DETH.SrcQP > mask24:
		return errEncSrcQP
	}
	return nil
}

// encodeTransport writes the BTH and extension headers at t.
func encodeTransport(t []byte, p *Packet, h HeaderSet, pad uint8) {
	b := &p.BTH
	t[0] = byte(b.Opcode)
	t[1] = bit(b.SE, 0x80) | bit(b.MigReq, 0x40) | pad<<4 | b.TVer
	binary.BigEndian.PutUint16(t[2:], b.PKey)
	binary.BigEndian.PutUint32(t[4:], b.DestQP)
	t[4] = bit(b.FECN, 0x80) | bit(b.BECN, 0x40) | b.Resv6a
	binary.BigEndian.PutUint32(t[8:], b.PSN)
	t[8] = bit(b.AckReq, 0x80) | b.Resv7

	o := BTHLen
	if h&HasDETH != 0 {
		binary.BigEndian.PutUint32(t[o:], p.DETH.QKey)
		binary.BigEndian.PutUint32(t[o+4:], p.DETH.SrcQP)
		t[o+4] = p.DETH.Resv
		o += DETHLen
	}
	if h&HasRETH != 0 {
		binary.BigEndian.PutUint64(t[o:], p.RETH.VA)
		binary.BigEndian.PutUint32(t[o+8:], p.RETH.RKey)
		binary.BigEndian.PutUint32(t[o+12:], p.RETH.Len)
		o += RETHLen
	}
	if h&HasAtomicETH != 0 {
		binary.BigEndian.PutUint64(t[o:], p.AtomicETH.VA)
		binary.BigEndian.PutUint32(t[o+8:], p.AtomicETH.RKey)
		binary.BigEndian.PutUint64(t[o+12:], p.AtomicETH.SwapAdd)
		binary.BigEndian.PutUint64(t[o+20:], p.AtomicETH.Compare)
		o += AtomicETHLen
	}
	if h&HasAETH != 0 {
		binary.BigEndian.PutUint32(t[o:], uint32(p.AETH.Syndrome)<<24|p.AETH.MSN)
		o += AETHLen
	}
	if h&HasAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(t[o:], p.AtomicAck)
		o += AtomicAckETHLen
	}
	if h&HasImmDt != 0 {
		binary.BigEndian.PutUint32(t[o:], p.ImmDt)
		o += ImmDtLen
	}
	if h&HasIETH != 0 {
		binary.BigEndian.PutUint32(t[o:], p.IETH)
		o += IETHLen
	}
	if h&HasCNPReserved != 0 {
		clear(t[o : o+CNPReservedLen])
	}
}

func bit(v bool, mask uint8) uint8 {
	if v {
		return mask
	}
	return 0
}
