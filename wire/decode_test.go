package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// goodFrame returns an IPv4 RC RDMA_WRITE_ONLY with a 5-byte payload (pad 3),
// or the IPv6 version.
func goodFrame(t *testing.T, v6 bool) []byte {
	p := rxePacket(true, v6)
	p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN = RCWriteOnly, 0x12, 0x101
	p.RETH = RETH{VA: 0x7f0000001000, RKey: 0x1234, Len: 5}
	p.Payload = []byte("hello")
	return mustEncode(t, &p)
}

const (
	l3    = EthHeaderLen
	udp4  = l3 + IPv4HeaderLen
	bth4  = udp4 + UDPHeaderLen
	udp6  = l3 + IPv6HeaderLen
	bth6  = udp6 + UDPHeaderLen
	ipEnd = -1
)

// fixIPv4 recomputes the IPv4 header checksum.
func fixIPv4(f []byte) {
	f[l3+10], f[l3+11] = 0, 0
	binary.BigEndian.PutUint16(f[l3+10:], ipv4Checksum(f[l3:l3+IPv4HeaderLen]))
}

// resize4 grows (delta > 0, zero bytes) or shrinks the IPv4 packet before the
// ICRC and updates both length fields and the checksum.
func resize4(f []byte, delta int) []byte {
	body := append([]byte(nil), f[:len(f)-4]...)
	if delta > 0 {
		body = append(body, make([]byte, delta)...)
	} else {
		body = body[:len(body)+delta]
	}
	out := append(body, 0, 0, 0, 0)
	binary.BigEndian.PutUint16(out[l3+2:], uint16(len(out)-l3))
	binary.BigEndian.PutUint16(out[udp4+4:], uint16(len(out)-udp4))
	fixIPv4(out)
	return out
}

func TestDecodeErrors(t *testing.T) {
	type mut struct {
		name string
		v6   bool
		// edit returns the frame to decode; it gets a fresh copy of goodFrame.
		edit func(f []byte) []byte
		// fix: recompute the IPv4 checksum and the ICRC after edit so that the
		// intended check is the one that fails.
		fix  bool
		want error
	}
	set := func(i int, v byte) func([]byte) []byte {
		return func(f []byte) []byte { f[i] = v; return f }
	}
	cases := []mut{
		{"empty", false, func(f []byte) []byte { return nil }, false, ErrTruncated},
		{"13 bytes", false, func(f []byte) []byte { return f[:13] }, false, ErrTruncated},
		{"VLAN tag cut", false, func(f []byte) []byte { f[12], f[13] = 0x81, 0; return f[:17] }, false, ErrTruncated},
		{"ARP", false, func(f []byte) []byte { f[12], f[13] = 0x08, 0x06; return f }, false, ErrNotRoCE},
		{"IPv4 header cut", false, func(f []byte) []byte { return f[:l3+19] }, false, ErrTruncated},
		{"IPv4 version 6", false, set(l3, 0x65), false, ErrBadIPHeader},
		{"IPv4 TCP", false, set(l3+9, 6), true, ErrNotRoCE},
		{"IPv4 IHL 4", false, set(l3, 0x44), false, ErrBadIPHeader},
		{"IPv4 IHL 6 (options)", false, func(f []byte) []byte {
			// A real options header: 4 NOP bytes.
			out := append(append(append([]byte(nil), f[:l3+20]...), 1, 1, 1, 1), f[l3+20:]...)
			out[l3] = 0x46
			binary.BigEndian.PutUint16(out[l3+2:], uint16(len(out)-l3))
			out[l3+10], out[l3+11] = 0, 0
			binary.BigEndian.PutUint16(out[l3+10:], ipv4Checksum(out[l3:l3+24]))
			return out
		}, false, ErrIPOptions},
		{"IPv4 total length 19", false, func(f []byte) []byte { binary.BigEndian.PutUint16(f[l3+2:], 19); fixIPv4(f); return f }, false, ErrBadIPHeader},
		{"IPv4 total length beyond frame", false, func(f []byte) []byte { return f[:len(f)-1] }, false, ErrTruncated},
		{"IPv4 checksum", false, set(l3+11, 0), false, ErrBadIPHeader},
		{"IPv4 MF", false, set(l3+6, 0x60), true, ErrBadIPHeader},
		{"IPv4 fragment offset", false, set(l3+7, 0x01), true, ErrBadIPHeader},
		{"IPv4 reserved flag", false, set(l3+6, 0xc0), true, ErrBadIPHeader},
		{"IPv4 TTL 0", false, set(l3+8, 0), true, ErrBadIPHeader},
		{"UDP header cut", false, func(f []byte) []byte { binary.BigEndian.PutUint16(f[l3+2:], 27); fixIPv4(f); return f }, false, ErrTruncated},
		{"UDP port 4792", false, set(udp4+3, 0xb8), true, ErrNotRoCE},
		{"UDP length short", false, func(f []byte) []byte { f[udp4+5] -= 4; return f }, true, ErrBadUDPLength},
		{"UDP length long", false, func(f []byte) []byte { f[udp4+5] += 4; return f }, true, ErrBadUDPLength},
		{"UDP length 0", false, func(f []byte) []byte { f[udp4+4], f[udp4+5] = 0, 0; return f }, true, ErrBadUDPLength},
		{"BTH cut", false, func(f []byte) []byte { return resize4(f, -(len(f) - bth4 - 12)) }, false, ErrTruncated},
		{"not a multiple of 4", false, func(f []byte) []byte { return resize4(f, -1) }, true, ErrBadLength},
		{"bad ICRC", false, func(f []byte) []byte { f[len(f)-1] ^= 0x80; return f }, false, ErrBadICRC},
		{"payload bit flip", false, func(f []byte) []byte { f[bth4+BTHLen+RETHLen] ^= 1; return f }, false, ErrBadICRC},
		{"TVer 1", false, func(f []byte) []byte { f[bth4+1] |= 1; return f }, true, ErrBadTVer},
		{"TVer 15", false, func(f []byte) []byte { f[bth4+1] |= 0x0f; return f }, true, ErrBadTVer},
		{"reserved RC opcode 0x15", false, set(bth4, 0x15), true, ErrUnknownOpcode},
		{"RC FLUSH 0x1c", false, set(bth4, 0x1c), true, ErrUnknownOpcode},
		{"UC READ 0x2c", false, set(bth4, 0x2c), true, ErrUnknownOpcode},
		{"UC ACK 0x31", false, set(bth4, 0x31), true, ErrUnknownOpcode},
		{"UC SEND_ONLY_INV 0x37", false, set(bth4, 0x37), true, ErrUnknownOpcode},
		{"RD 0x44", false, set(bth4, 0x44), true, ErrUnknownOpcode},
		{"UD SEND_FIRST 0x60", false, set(bth4, 0x60), true, ErrUnknownOpcode},
		{"XRC 0xa4", false, set(bth4, 0xa4), true, ErrUnknownOpcode},
		{"CNP 0x80", false, set(bth4, 0x80), true, ErrUnknownOpcode},
		{"headers longer than packet", false, set(bth4, byte(RCFetchAdd)), true, ErrTruncated},
		{"PadCnt beyond payload", false, func(f []byte) []byte {
			f = resize4(f, -8) // RETH + 0 bytes: nothing after the headers
			f[bth4+1] = 0x10
			return f
		}, true, ErrBadPad},
		{"pad byte not zero", false, func(f []byte) []byte { f[len(f)-5] = 1; return f }, true, ErrBadPad},
		{"payload on READ request", false, func(f []byte) []byte {
			f[bth4] = byte(RCReadRequest)
			f[bth4+1] = 0 // PadCnt 0: 8 bytes remain after the RETH
			return f
		}, true, ErrBadLength},
		{"payload on ACK", false, func(f []byte) []byte { f[bth4], f[bth4+1] = byte(RCAck), 0; return f }, true, ErrBadLength},
		{"CNP reserved not zero", false, func(f []byte) []byte {
			f = resize4(f, 28+4-(len(f)-bth4))
			f[bth4], f[bth4+1], f[bth4+20] = byte(CNP), 0, 1
			return f
		}, true, ErrReserved},

		{"IPv6 header cut", true, func(f []byte) []byte { return f[:l3+39] }, false, ErrTruncated},
		{"IPv6 version 4", true, set(l3, 0x40), false, ErrBadIPHeader},
		{"IPv6 hop-by-hop header", true, set(l3+6, 0), false, ErrNotRoCE},
		{"IPv6 payload beyond frame", true, func(f []byte) []byte { return f[:len(f)-4] }, false, ErrTruncated},
		{"IPv6 hop limit 0", true, set(l3+7, 0), false, ErrBadIPHeader},
		{"IPv6 UDP length", true, func(f []byte) []byte { f[udp6+5] -= 4; return f }, true, ErrBadUDPLength},
		{"IPv6 bad ICRC", true, func(f []byte) []byte { f[bth6+5] ^= 1; return f }, false, ErrBadICRC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.edit(goodFrame(t, tc.v6))
			if tc.fix {
				if !tc.v6 && len(f) >= l3+IPv4HeaderLen {
					fixIPv4(f)
				}
				fixICRC(f)
			}
			var p Packet
			err := Decode(f, &p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode: %v, want %v", err, tc.want)
			}
			t.Logf("%v", err)
			if s, e := sentinelOf(err); e != nil || s != tc.want {
				t.Fatalf("error classification: %v", e)
			}
			// DecodeIP fails the same way once the Ethernet header is valid.
			if len(f) >= l3 {
				if et := binary.BigEndian.Uint16(f[12:]); et == 0x0800 || et == 0x86dd {
					if err2 := DecodeIP(f[l3:], tc.v6, &p); err2 != err {
						t.Fatalf("DecodeIP: %v, Decode: %v", err2, err)
					}
				}
			}
		})
	}
}

func TestDecodeIP(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f := goodFrame(t, v6)
		var a, b Packet
		if err := Decode(f, &a); err != nil {
			t.Fatal(err)
		}
		b.Eth.HasVLAN = true // must be cleared
		if err := DecodeIP(f[EthHeaderLen:], v6, &b); err != nil {
			t.Fatal(err)
		}
		a.Eth = Ethernet{}
		if d := diffPackets(&a, &b); d != "" {
			t.Fatal(d)
		}
		if err := DecodeIP(f[EthHeaderLen:], !v6, &b); !errors.Is(err, ErrBadIPHeader) {
			t.Fatalf("wrong version flag: %v", err)
		}
	}
}

func TestDecodeOverwritesEverything(t *testing.T) {
	var p Packet
	if err := Decode(goodFrame(t, true), &p); err != nil {
		t.Fatal(err)
	}
	ack := rxePacket(false, false)
	ack.BTH.Opcode, ack.AETH = RCAck, AETH{Syndrome: 0x1f, MSN: 3}
	if err := Decode(mustEncode(t, &ack), &p); err != nil {
		t.Fatal(err)
	}
	if p.RETH != (RETH{}) || p.IP.V6 || p.IP.FlowLabel != 0 || len(p.Payload) != 0 || p.AETH.MSN != 3 {
		t.Fatalf("stale fields after reuse: %+v", headersOf(&p))
	}
}

func TestPayloadAliasesFrame(t *testing.T) {
	f := goodFrame(t, false)
	var p Packet
	if err := Decode(f, &p); err != nil {
		t.Fatal(err)
	}
	if string(p.Payload) != "hello" || cap(p.Payload) != len(p.Payload) {
		t.Fatalf("payload %q cap %d", p.Payload, cap(p.Payload))
	}
	p.Payload[0] = 'j'
	if !bytes.Contains(f, []byte("jello")) {
		t.Fatal("payload is a copy")
	}
}

// TestChecksum: RFC 1071's worked example, an odd length (the last byte
// padded with zero), a partial sum carried in, and data holding its own
// checksum verifying to 0.
func TestChecksum(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Checksum(b, 0); got != ^uint16(0xddf2) {
		t.Errorf("RFC 1071 example: %#04x, want %#04x", got, ^uint16(0xddf2))
	}
	if got, want := Checksum(append(b, 0x12), 0), Checksum(append(b, 0x12, 0), 0); got != want {
		t.Errorf("odd length: %#04x, want %#04x (padded)", got, want)
	}
	if got, want := Checksum(b[2:], 0x0001), Checksum(b, 0); got != want {
		t.Errorf("partial sum: %#04x, want %#04x", got, want)
	}
	c := Checksum(b, 0)
	if Checksum(append(b, byte(c>>8), byte(c)), 0) != 0 {
		t.Error("data with its checksum does not verify to 0")
	}
}
