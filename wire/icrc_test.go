package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// crc32LE is the kernel's crc32_le: reflected CRC-32, polynomial 0xEDB88320,
// one bit at a time, no pre- or post-inversion.
func crc32LE(crc uint32, p []byte) uint32 {
	for _, b := range p {
		crc ^= uint32(b)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xedb88320
			} else {
				crc >>= 1
			}
		}
	}
	return crc
}

// rxeICRC follows drivers/infiniband/sw/rxe/rxe_icrc.c field by field:
// copy the IP, UDP and BTH headers into a pseudo-header, set the variant
// fields to ones through their struct positions, then
// ~crc32_le(crc32_le(crc32_le(0xdebb20e3, pshdr), rest of headers), payload+pad).
// ip runs from the IP header to the ICRC field (excluded).
func rxeICRC(ip []byte, v6 bool, hdrLen int) uint32 {
	iphdr := 20
	if v6 {
		iphdr = 40
	}
	ps := append([]byte(nil), ip[:iphdr+8+12]...)
	if v6 {
		// struct ipv6hdr: priority:4 is the low nibble of byte 0 (little-endian
		// bitfield), flow_lbl[3] bytes 1..3, hop_limit byte 7.
		ps[0] = ps[0]&0xf0 | 0x0f
		copy(ps[1:4], []byte{0xff, 0xff, 0xff})
		ps[7] = 0xff
	} else {
		// struct iphdr: tos byte 1, ttl byte 8, check bytes 10-11 =
		// CSUM_MANGLED_0.
		ps[1] = 0xff
		ps[8] = 0xff
		binary.BigEndian.PutUint16(ps[10:], 0xffff)
	}
	binary.BigEndian.PutUint16(ps[iphdr+6:], 0xffff) // udph->check
	qpn := binary.BigEndian.Uint32(ps[iphdr+8+4:])   // bth->qpn |= ~BTH_QPN_MASK
	binary.BigEndian.PutUint32(ps[iphdr+8+4:], qpn|^uint32(0x00ffffff))

	crc := uint32(0xdebb20e3)
	crc = crc32LE(crc, ps)
	crc = crc32LE(crc, ip[iphdr+8+12:iphdr+8+hdrLen])
	crc = crc32LE(crc, ip[iphdr+8+hdrLen:])
	return ^crc
}

// scapyICRC is the formulation scapy and the protocol document use: standard
// CRC-32 of 8 bytes of 0xFF followed by the masked packet.
func scapyICRC(ip []byte, v6 bool) uint32 {
	b := append(bytes.Repeat([]byte{0xff}, 8), ip...)
	m := b[8:]
	if v6 {
		m[0] |= 0x0f
		m[1], m[2], m[3], m[7] = 0xff, 0xff, 0xff, 0xff
		m[46], m[47], m[52] = 0xff, 0xff, 0xff
	} else {
		m[1], m[8], m[10], m[11] = 0xff, 0xff, 0xff, 0xff
		m[26], m[27], m[32] = 0xff, 0xff, 0xff
	}
	return crc32.ChecksumIEEE(b)
}

func TestUpdateSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for n := range 200 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		seed := rng.Uint32()
		if got, want := updateSmall(seed, b), crc32.Update(seed, crc32.IEEETable, b); got != want {
			t.Fatalf("len %d: %#08x, want %#08x", n, got, want)
		}
	}
}

func TestICRCSeed(t *testing.T) {
	if got := crc32LE(0xffffffff, bytes.Repeat([]byte{0xff}, 8)); got != 0xdebb20e3 {
		t.Fatalf("crc32_le(~0, 8x0xff) = %#08x, want 0xdebb20e3", got)
	}
	if ^uint32(icrcSeed) != 0xdebb20e3 {
		t.Fatalf("icrcSeed %#08x", icrcSeed)
	}
}

// TestICRCMatchesBitwiseReference proves the hash/crc32 implementation equals
// rxe's formulation computed bit by bit, on random packets of every length
// class (below and above the 64-byte threshold of the CLMUL path).
func TestICRCMatchesBitwiseReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		v6 := i%2 == 1
		iphdr := l3Len(v6)
		hdrLen := BTHLen + 4*rng.IntN(8)
		n := iphdr + UDPHeaderLen + hdrLen + rng.IntN(9000)
		if i%5 == 0 {
			n = iphdr + UDPHeaderLen + hdrLen + rng.IntN(80)
		}
		ip := make([]byte, n)
		for j := range ip {
			ip[j] = byte(rng.Uint32())
		}
		want := rxeICRC(ip, v6, hdrLen)
		if got := computeICRC(ip, v6); got != want {
			t.Fatalf("case %d (v6=%v, %d bytes): computeICRC %#08x, bitwise rxe %#08x", i, v6, n, got, want)
		}
		if got := scapyICRC(ip, v6); got != want {
			t.Fatalf("case %d: scapy formulation %#08x, bitwise rxe %#08x", i, got, want)
		}
	}
}

// TestICRCThroughFrames checks the exported ICRC on encoded frames against the
// bitwise reference, and that masked fields do not change it while covered
// ones do.
func TestICRCThroughFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 400 {
		p := randomPacket(rng, i)
		frame := mustEncode(t, &p)
		l3 := l2Len(&p.Eth)
		info, _ := p.BTH.Opcode.Info()
		want := rxeICRC(frame[l3:len(frame)-4], p.IP.V6, info.HeaderLen)
		got, err := ICRC(frame)
		if err != nil || got != want {
			t.Fatalf("ICRC %#08x, %v; want %#08x", got, err, want)
		}
		if stored := binary.LittleEndian.Uint32(frame[len(frame)-4:]); stored != want {
			t.Fatalf("Encode stored %#08x, want %#08x little-endian", stored, want)
		}
	}
}

func TestICRCMaskedAndCoveredFields(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		p := rxePacket(true, v6)
		p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN = RCSendOnly, 0x12, 7
		p.Payload = []byte("abc")
		base := mustEncode(t, &p)
		l3 := EthHeaderLen
		bth := l3 + l3Len(v6) + UDPHeaderLen
		var masked, covered []int
		if v6 {
			masked = []int{l3 + 1, l3 + 2, l3 + 3, l3 + 7} // TC/flow label, hop limit
			covered = []int{l3 + 8, l3 + 23, l3 + 39}      // addresses
		} else {
			masked = []int{l3 + 1, l3 + 8, l3 + 10, l3 + 11} // TOS, TTL, checksum
			covered = []int{l3 + 4, l3 + 5, l3 + 6, l3 + 12} // ID, flags, address
		}
		masked = append(masked, bth-2, bth-1, bth+4) // UDP checksum, FECN/BECN/resv6a
		covered = append(covered, bth-8, bth-5, bth, bth+1, bth+2, bth+5, bth+8, bth+11, bth+12, bth+14)
		want, _ := ICRC(base)
		for _, i := range masked {
			f := append([]byte(nil), base...)
			f[i] ^= 0x5a
			if got, err := ICRC(f); err != nil || got != want {
				t.Errorf("v6=%v: flipping masked byte %d changed the ICRC (%v)", v6, i, err)
			}
		}
		for _, i := range covered {
			f := append([]byte(nil), base...)
			f[i] ^= 0x01
			got, err := ICRC(f)
			if err == nil && got == want {
				t.Errorf("v6=%v: flipping covered byte %d left the ICRC unchanged", v6, i)
			}
		}
		// The traffic class high nibble is masked too, the version is not.
		if v6 {
			f := append([]byte(nil), base...)
			f[l3] ^= 0x0f
			if got, _ := ICRC(f); got != want {
				t.Errorf("traffic class high nibble is covered")
			}
		}
	}
}

func TestICRCErrors(t *testing.T) {
	v4, v6 := goodFrame(t, false), goodFrame(t, true)
	edit := func(f []byte, fn func([]byte) []byte) []byte { return fn(append([]byte(nil), f...)) }
	set := func(i int, v byte) func([]byte) []byte { return func(f []byte) []byte { f[i] = v; return f } }
	for _, tc := range []struct {
		name string
		f    []byte
		want error
	}{
		{"short", v4[:10], ErrTruncated},
		{"arp", edit(v4, set(13, 6)), ErrNotRoCE},
		{"v4 header cut", v4[:30], ErrTruncated},
		{"v4 version", edit(v4, set(l3, 0x55)), ErrBadIPHeader},
		{"v4 not UDP", edit(v4, set(l3+9, 6)), ErrNotRoCE},
		{"v4 IHL 4", edit(v4, set(l3, 0x44)), ErrBadIPHeader},
		{"v4 IHL 6", edit(v4, set(l3, 0x46)), ErrIPOptions},
		{"v4 total length 19", edit(v4, set(l3+3, 19)), ErrBadIPHeader},
		{"v4 beyond frame", v4[:len(v4)-1], ErrTruncated},
		{"v4 no UDP header", edit(v4, set(l3+3, 27)), ErrTruncated},
		{"v4 UDP length", edit(v4, set(udp4+5, 0)), ErrBadUDPLength},
		{"v4 BTH cut", resize4(v4, -(len(v4) - bth4 - 12)), ErrTruncated},
		{"v6 header cut", v6[:50], ErrTruncated},
		{"v6 version", edit(v6, set(l3, 0x40)), ErrBadIPHeader},
		{"v6 not UDP", edit(v6, set(l3+6, 58)), ErrNotRoCE},
		{"v6 beyond frame", v6[:len(v6)-1], ErrTruncated},
	} {
		if _, err := ICRC(tc.f); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
