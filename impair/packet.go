package impair

import "encoding/binary"

const (
	ethHeaderLen  = 14
	vlanTagLen    = 4
	maxVLANTags   = 2
	udpHeaderLen  = 8
	ipv6HeaderLen = 40
	roceUDPPort   = 4791

	etherTypeIPv4   = 0x0800
	etherTypeIPv6   = 0x86DD
	etherTypeVLAN   = 0x8100
	etherTypeQinQ   = 0x88A8
	ipProtocolUDP   = 17
	ipv4FlagMF      = 0x2000
	ipv4OffsetMask  = 0x1FFF
	ipv4MinIHL      = 5
	udpChecksumSkip = 6 // offset of the checksum in the UDP header
)

// roceFrame locates the UDP header and payload of a RoCEv2 frame.
type roceFrame struct {
	udp        int // offset of the UDP header
	payload    int // offset of the UDP payload
	payloadLen int // UDP payload length (0 if the UDP length is unusable)
}

// parseRoCE mirrors is_roce in impair.c: an unfragmented IPv4 or IPv6 UDP
// datagram to port 4791, after at most two in-band VLAN tags. It never
// reads out of bounds; ok is false for anything else.
func parseRoCE(b []byte) (f roceFrame, ok bool) {
	if len(b) < ethHeaderLen {
		return f, false
	}
	off := ethHeaderLen
	proto := binary.BigEndian.Uint16(b[12:14])
	for i := 0; i < maxVLANTags && (proto == etherTypeVLAN || proto == etherTypeQinQ); i++ {
		if len(b) < off+vlanTagLen {
			return f, false
		}
		proto = binary.BigEndian.Uint16(b[off+2 : off+4])
		off += vlanTagLen
	}
	var l4 int
	switch proto {
	case etherTypeIPv4:
		if len(b) < off+20 {
			return f, false
		}
		ip := b[off:]
		ihl := int(ip[0] & 0x0F)
		if ip[0]>>4 != 4 || ihl < ipv4MinIHL || ip[9] != ipProtocolUDP {
			return f, false
		}
		if binary.BigEndian.Uint16(ip[6:8])&(ipv4FlagMF|ipv4OffsetMask) != 0 {
			return f, false
		}
		l4 = off + ihl*4
	case etherTypeIPv6:
		if len(b) < off+ipv6HeaderLen {
			return f, false
		}
		ip := b[off:]
		if ip[0]>>4 != 6 || ip[6] != ipProtocolUDP {
			return f, false
		}
		l4 = off + ipv6HeaderLen
	default:
		return f, false
	}
	if len(b) < l4+udpHeaderLen || binary.BigEndian.Uint16(b[l4+2:l4+4]) != roceUDPPort {
		return f, false
	}
	f.udp = l4
	f.payload = l4 + udpHeaderLen
	// The UDP length bounds the payload (Ethernet padding is not payload).
	if ulen := int(binary.BigEndian.Uint16(b[l4+4 : l4+6])); ulen >= udpHeaderLen && l4+ulen <= len(b) {
		f.payloadLen = ulen - udpHeaderLen
	}
	return f, true
}

// flipPayloadByte XORs mask into the payload byte at off and, when the UDP
// checksum is complete and non-zero, patches it incrementally (RFC 1624) so
// that the packet still passes UDP and only an end-to-end check (the RoCE
// ICRC) sees the damage. csumPending means the checksum is still to be
// computed from the data (CHECKSUM_PARTIAL), which needs no patch.
func flipPayloadByte(b []byte, f roceFrame, off int, mask byte, csumPending bool) {
	i := f.payload + off
	old := b[i]
	b[i] ^= mask
	if csumPending {
		return
	}
	sum := binary.BigEndian.Uint16(b[f.udp+udpChecksumSkip:])
	if sum == 0 {
		return // IPv4 "no checksum"
	}
	// The checksum covers 16-bit words counted from the UDP header.
	var oldWord, newWord uint16
	if (i-f.udp)%2 == 0 {
		oldWord, newWord = uint16(old)<<8, uint16(b[i])<<8
	} else {
		oldWord, newWord = uint16(old), uint16(b[i])
	}
	// HC' = ~(~HC + ~m + m')
	acc := uint32(^sum) + uint32(^oldWord) + uint32(newWord)
	for acc > 0xFFFF {
		acc = acc&0xFFFF + acc>>16
	}
	next := ^uint16(acc)
	if next == 0 {
		next = 0xFFFF // 0 would mean "no checksum"
	}
	binary.BigEndian.PutUint16(b[f.udp+udpChecksumSkip:], next)
}

// virtio_net_hdr, as PACKET_VNET_HDR puts it before every frame (host
// byte order, little-endian on the targets we build for).
const (
	vnetHeaderLen     = 10
	vnetFlagNeedsCsum = 1
	vnetFlagDataValid = 2
	vnetHdrLenOff     = 2
	vnetCsumStartOff  = 6
)

// insertVLANTag turns an offloaded tag (reported in PACKET_AUXDATA) back
// into an in-band one, since AF_PACKET cannot send a tag as metadata.
// buf[start:] holds the vnet header and the frame, and start >= 4: the
// header and MAC addresses move 4 bytes left. It returns the new start.
func insertVLANTag(buf []byte, start int, tpid, tci uint16) int {
	copy(buf[start-vlanTagLen:], buf[start:start+vnetHeaderLen+12])
	start -= vlanTagLen
	tag := buf[start+vnetHeaderLen+12:]
	binary.BigEndian.PutUint16(tag[0:2], tpid)
	binary.BigEndian.PutUint16(tag[2:4], tci)
	if buf[start]&vnetFlagNeedsCsum != 0 {
		cs := binary.LittleEndian.Uint16(buf[start+vnetCsumStartOff:])
		binary.LittleEndian.PutUint16(buf[start+vnetCsumStartOff:], cs+vlanTagLen)
	}
	if hl := binary.LittleEndian.Uint16(buf[start+vnetHdrLenOff:]); hl != 0 {
		binary.LittleEndian.PutUint16(buf[start+vnetHdrLenOff:], hl+vlanTagLen)
	}
	return start
}
