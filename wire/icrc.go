package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// icrcSeed turns crc32.Update into rxe's formulation. rxe computes
// ~crc32_le(0xdebb20e3, masked headers || rest), where 0xdebb20e3 is
// crc32_le(~0, 8 bytes of 0xFF) -- the masked LRH that RoCEv2 does not have.
// crc32.Update(c, IEEETable, b) returns ~crc32_le(~c, b), so starting from
// ^0xdebb20e3 gives exactly rxe's value, and chained Updates compose.
const icrcSeed = ^uint32(0xdebb20e3)

// slicing8 holds slicing-by-8 tables for the IEEE polynomial, built once from
// crc32.IEEETable and only read afterwards. computeICRC uses them for the
// masked pseudo-header, which lives in a stack array: handing that array to
// crc32.Update would move it to the heap (Update dispatches through a function
// variable, so escape analysis must assume it is retained).
var slicing8 = makeSlicing8()

func makeSlicing8() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xff] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}

// updateSmall is crc32.Update(crc, crc32.IEEETable, p) for short inputs that
// must not escape.
func updateSmall(crc uint32, p []byte) uint32 {
	t := slicing8
	c := ^crc
	for len(p) >= 8 {
		c ^= binary.LittleEndian.Uint32(p)
		c = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][c>>24] ^ t[5][c>>16&0xff] ^ t[6][c>>8&0xff] ^ t[7][c&0xff]
		p = p[8:]
	}
	for _, b := range p {
		c = t[0][byte(c)^b] ^ c>>8
	}
	return ^c
}

// maskedLen is the size of the masked pseudo-header: IP header, UDP header
// and BTH.
func maskedLen(v6 bool) int { return l3Len(v6) + UDPHeaderLen + BTHLen }

// computeICRC returns the ICRC of an IP packet, ip being the bytes from the
// IP header up to (not including) the ICRC field. len(ip) >= maskedLen(v6).
//
// Masked to ones, as rxe_icrc_hdr does: IPv4 TOS, TTL and header checksum;
// IPv6 traffic class, flow label and hop limit; the UDP checksum; BTH byte 4
// (FECN, BECN, Resv6a). Everything else, including the IPv4 ID and flags, is
// covered. The masked copy lives on the stack, so nothing is allocated; the
// rest of the packet goes through hash/crc32 (carry-less multiply on amd64).
func computeICRC(ip []byte, v6 bool) uint32 {
	var hdr [IPv6HeaderLen + UDPHeaderLen + BTHLen]byte
	n := maskedLen(v6)
	copy(hdr[:n], ip)
	if v6 {
		hdr[0] |= 0x0f // traffic class high nibble
		hdr[1], hdr[2], hdr[3] = 0xff, 0xff, 0xff
		hdr[7] = 0xff // hop limit
	} else {
		hdr[1] = 0xff // TOS
		hdr[8] = 0xff // TTL
		hdr[10], hdr[11] = 0xff, 0xff
	}
	udp := l3Len(v6)
	hdr[udp+6], hdr[udp+7] = 0xff, 0xff
	hdr[udp+UDPHeaderLen+4] = 0xff
	crc := updateSmall(icrcSeed, hdr[:n])
	return crc32.Update(crc, crc32.IEEETable, ip[n:])
}

// ICRC computes the ICRC of a full Ethernet frame holding a RoCEv2 packet, as
// rxe would (the ICRC field itself is excluded). The frame's Ethernet, IP and
// UDP length fields must be consistent; checksums and the BTH are not
// validated. The four ICRC bytes on the wire are the result in little-endian
// order.
func ICRC(frame []byte) (uint32, error) {
	var eth Ethernet
	off, v6, err := parseEth(frame, &eth)
	if err != nil {
		return 0, err
	}
	l3 := frame[off:]
	end, err := locateL3(l3, v6)
	if err != nil {
		return 0, err
	}
	return computeICRC(l3[:end-ICRCLen], v6), nil
}

// locateL3 checks the length fields of the IP and UDP headers at the start of
// b and returns the end of the IP packet (one past the ICRC). It is the
// structural subset of Decode's checks that ICRC and Seal need.
func locateL3(b []byte, v6 bool) (end int, err error) {
	if v6 {
		if len(b) < IPv6HeaderLen {
			return 0, errIPv6Truncated
		}
		if b[0]>>4 != 6 {
			return 0, errIPv6Version
		}
		if b[6] != ipProtoUDP {
			return 0, errNotUDPv6
		}
		end = IPv6HeaderLen + int(binary.BigEndian.Uint16(b[4:]))
		if end > len(b) {
			return 0, errIPv6BeyondFrame
		}
	} else {
		if end, err = ipv4End(b, len(b)); err != nil {
			return 0, err
		}
	}
	udp := l3Len(v6)
	if end-udp < UDPHeaderLen {
		return 0, errUDPTruncated
	}
	if int(binary.BigEndian.Uint16(b[udp+4:])) != end-udp {
		return 0, errUDPLength
	}
	if end-udp-UDPHeaderLen < BTHLen+ICRCLen {
		return 0, errBTHTruncated
	}
	return end, nil
}
