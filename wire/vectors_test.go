package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// The worked vectors of roce-wire-protocol.md §7 (cross-checked there with
// scapy), the ConnectX-4 Lx CNP capture and scapy's UC vector of §1.10. Each
// frame must decode to the packet built by hand from the description, and
// encoding that hand-built packet must give the frame byte for byte.
type vector struct {
	name string
	dump string
	wire [4]byte // ICRC bytes as printed in the document
	want func() Packet
}

var docVectors = []vector{
	{
		name: "v4 RC SEND_ONLY hello PadCnt 3",
		dump: `
0000  02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00
0010  00 34 00 00 40 00 40 11 b7 65 c0 a8 01 01 c0 a8
0020  01 02 c1 32 12 b7 00 20 00 00 04 30 ff ff 00 00
0030  00 12 80 00 01 00 68 65 6c 6c 6f 00 00 00 33 89
0040  d8 ba`,
		wire: [4]byte{0x33, 0x89, 0xd8, 0xba},
		want: func() Packet {
			p := rxePacket(true, false)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.AckReq, p.BTH.PSN = RCSendOnly, 0x12, true, 0x100
			p.Payload = []byte("hello")
			return p
		},
	},
	{
		name: "v4 RC ACKNOWLEDGE",
		dump: `
0000  02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00
0010  00 30 00 00 40 00 40 11 b7 69 c0 a8 01 02 c0 a8
0020  01 01 c1 32 12 b7 00 1c 00 00 11 00 ff ff 00 00
0030  00 11 00 00 01 00 1f 00 00 01 11 ae 5a ac`,
		wire: [4]byte{0x11, 0xae, 0x5a, 0xac},
		want: func() Packet {
			p := rxePacket(false, false)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN = RCAck, 0x11, 0x100
			p.AETH = AETH{Syndrome: ACKSyndrome(CreditInvalid), MSN: 1}
			return p
		},
	},
	{
		name: "v4 RC RDMA_WRITE_ONLY",
		dump: `
0000  02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00
0010  00 44 00 00 40 00 40 11 b7 55 c0 a8 01 01 c0 a8
0020  01 02 c1 32 12 b7 00 30 00 00 0a 00 ff ff 00 00
0030  00 12 80 00 01 01 00 00 7f 00 00 00 10 00 00 00
0040  12 34 00 00 00 08 00 01 02 03 04 05 06 07 57 56
0050  ee 61`,
		wire: [4]byte{0x57, 0x56, 0xee, 0x61},
		want: func() Packet {
			p := rxePacket(true, false)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.AckReq, p.BTH.PSN = RCWriteOnly, 0x12, true, 0x101
			p.RETH = RETH{VA: 0x7f0000001000, RKey: 0x1234, Len: 8}
			p.Payload = []byte{0, 1, 2, 3, 4, 5, 6, 7}
			return p
		},
	},
	{
		name: "v4 RC RDMA_READ_REQUEST",
		dump: `
0000  02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00
0010  00 3c 00 00 40 00 40 11 b7 5d c0 a8 01 01 c0 a8
0020  01 02 c1 32 12 b7 00 28 00 00 0c 00 ff ff 00 00
0030  00 12 80 00 01 02 00 00 7f 00 00 00 20 00 00 00
0040  12 34 00 00 10 00 6f 2b 75 2b`,
		wire: [4]byte{0x6f, 0x2b, 0x75, 0x2b},
		want: func() Packet {
			p := rxePacket(true, false)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.AckReq, p.BTH.PSN = RCReadRequest, 0x12, true, 0x102
			p.RETH = RETH{VA: 0x7f0000002000, RKey: 0x1234, Len: 4096}
			return p
		},
	},
	{
		name: "v4 RC NAK PSN sequence error",
		dump: `
0000  02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00
0010  00 30 00 00 40 00 40 11 b7 69 c0 a8 01 02 c0 a8
0020  01 01 c1 32 12 b7 00 1c 00 00 11 00 ff ff 00 00
0030  00 11 00 00 01 05 60 00 00 07 9e 34 85 be`,
		wire: [4]byte{0x9e, 0x34, 0x85, 0xbe},
		want: func() Packet {
			p := rxePacket(false, false)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN = RCAck, 0x11, 0x105
			p.AETH = AETH{Syndrome: NAKSyndrome(NAKPSNSequenceError), MSN: 7}
			return p
		},
	},
	{
		name: "v6 RC SEND_ONLY hello",
		dump: `
0000  02 00 00 00 00 02 02 00 00 00 00 01 86 dd 60 00
0010  00 00 00 20 11 40 fd 00 00 00 00 00 00 00 00 00
0020  00 00 00 00 00 01 fd 00 00 00 00 00 00 00 00 00
0030  00 00 00 00 00 02 c1 32 12 b7 00 20 00 00 04 30
0040  ff ff 00 00 00 12 80 00 01 00 68 65 6c 6c 6f 00
0050  00 00 ea fc d0 a1`,
		wire: [4]byte{0xea, 0xfc, 0xd0, 0xa1},
		want: func() Packet {
			p := rxePacket(true, true)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.AckReq, p.BTH.PSN = RCSendOnly, 0x12, true, 0x100
			p.Payload = []byte("hello")
			return p
		},
	},
	{
		name: "v4 RC RDMA_READ_RESPONSE_ONLY",
		dump: `
0000  02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00
0010  00 38 00 00 40 00 40 11 b7 61 c0 a8 01 02 c0 a8
0020  01 01 c1 32 12 b7 00 24 00 00 10 00 ff ff 00 00
0030  00 11 00 00 01 02 1f 00 00 02 a0 a1 a2 a3 a4 a5
0040  a6 a7 23 e3 fe 06`,
		wire: [4]byte{0x23, 0xe3, 0xfe, 0x06},
		want: func() Packet {
			p := rxePacket(false, false)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN = RCReadResponseOnly, 0x11, 0x102
			p.AETH = AETH{Syndrome: 0x1f, MSN: 2}
			p.Payload = []byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7}
			return p
		},
	},
	{
		name: "v4 RC RNR NAK timer 12",
		dump: `
0000  02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00
0010  00 30 00 00 40 00 40 11 b7 69 c0 a8 01 02 c0 a8
0020  01 01 c1 32 12 b7 00 1c 00 00 11 00 ff ff 00 00
0030  00 11 00 00 01 00 2c 00 00 00 c8 c9 c3 39`,
		wire: [4]byte{0xc8, 0xc9, 0xc3, 0x39},
		want: func() Packet {
			p := rxePacket(false, false)
			p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN = RCAck, 0x11, 0x100
			p.AETH = AETH{Syndrome: RNRNAKSyndrome(12), MSN: 0}
			return p
		},
	},
	{
		// 322 bytes; the document prints the first 90, the rest of the CM MAD
		// body is zero (the ICRC check confirms that reading).
		name: "v4 GSI UD SEND_ONLY CM REQ shape",
		dump: `
0000  02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00
0010  01 34 00 00 40 00 40 11 b6 65 c0 a8 01 01 c0 a8
0020  01 02 d8 72 12 b7 01 20 00 00 64 00 ff ff 00 00
0030  00 01 00 00 00 00 80 01 00 00 00 00 00 01 01 07
0040  02 03 00 00 00 00 00 00 00 01 00 00 0a bc 00 10
0050  00 00 00 00 00 00 00 00 00 00`,
		wire: [4]byte{0x6c, 0x13, 0x69, 0xf3},
		want: func() Packet {
			p := rxePacket(true, false)
			p.UDP.SrcPort = UDSourcePort(1)
			p.BTH.Opcode, p.BTH.DestQP = UDSendOnly, 1
			p.DETH = DETH{QKey: 0x80010000, SrcQP: 1}
			mad := make([]byte, 256)
			copy(mad, []byte{1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x0a, 0xbc, 0, 0x10})
			p.Payload = mad
			return p
		},
	},
	{
		name: "ConnectX-4 Lx CNP capture",
		dump: `
0000  e4 1d 2d ab 2b c2 7c fe 90 64 3b 32 08 00 45 c2
0010  00 3c 71 8c 40 00 40 11 91 61 0a 00 11 01 0a 00
0020  12 01 00 00 12 b7 00 28 00 00 81 00 ff ff 40 00
0030  01 18 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0040  00 00 00 00 00 00 82 fd 00 2a`,
		wire: [4]byte{0x82, 0xfd, 0x00, 0x2a},
		want: func() Packet {
			var p Packet
			p.Reset()
			p.Eth.Dst = [6]byte{0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2}
			p.Eth.Src = [6]byte{0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32}
			p.IP.TOS, p.IP.ID = 0xc2, 0x718c
			p.IP.Src, p.IP.Dst = netip.MustParseAddr("10.0.17.1"), netip.MustParseAddr("10.0.18.1")
			p.UDP.SrcPort = 0
			p.BTH.Opcode, p.BTH.BECN, p.BTH.DestQP = CNP, true, 0x118
			return p
		},
	},
	{
		// scapy test/contrib/roce.uts: UC_SEND_ONLY with MigReq, PadCnt 2 and
		// a real (non-zero) UDP checksum, which Encode writes verbatim.
		name: "scapy UC SEND_ONLY",
		dump: `
0000  24 8a 07 a8 fa 22 24 8a 07 a8 fa 22 08 00 45 01
0010  00 40 04 78 40 00 40 11 b4 d5 c0 a8 00 07 c0 a8
0020  00 07 c0 00 12 b7 00 2c ac a2 24 60 ff ff 00 00
0030  00 d3 00 cf 17 10 46 30 81 8b e2 89 35 d9 0e 9a
0040  95 50 54 01 be 88 5e 50 00 00 78 f3 53 f3`,
		wire: [4]byte{0x78, 0xf3, 0x53, 0xf3},
		want: func() Packet {
			var p Packet
			p.Reset()
			p.Eth.Dst = [6]byte{0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22}
			p.Eth.Src = p.Eth.Dst
			p.IP.TOS, p.IP.ID = 1, 1144
			p.IP.Src = netip.MustParseAddr("192.168.0.7")
			p.IP.Dst = p.IP.Src
			p.UDP.SrcPort, p.UDP.Checksum = 49152, 0xaca2
			p.BTH.Opcode, p.BTH.MigReq, p.BTH.DestQP, p.BTH.PSN = UCSendOnly, true, 211, 13571856
			p.Payload = []byte("F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P")
			return p
		},
	},
}

func TestDocumentVectors(t *testing.T) {
	for _, v := range docVectors {
		t.Run(v.name, func(t *testing.T) {
			frame := hexDump(t, v.dump)
			want := v.want()
			if n := want.FrameLen(); n > len(frame) {
				// Only a prefix is printed: zero-fill, then the ICRC.
				full := make([]byte, n)
				copy(full, frame)
				copy(full[n-4:], v.wire[:])
				frame = full
			}
			if !bytes.Equal(frame[len(frame)-4:], v.wire[:]) {
				t.Fatalf("dump ends in %x, document says ICRC %x", frame[len(frame)-4:], v.wire)
			}
			icrc := binary.LittleEndian.Uint32(v.wire[:])

			got, err := ICRC(frame)
			if err != nil || got != icrc {
				t.Fatalf("ICRC = %#08x, %v; want %#08x", got, err, icrc)
			}
			var p Packet
			if err := Decode(frame, &p); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			// The fields Decode reports and Encode derives.
			want.UDP.Length = uint16(len(frame) - EthHeaderLen - l3Len(want.IP.V6))
			want.BTH.PadCnt = uint8(padLen(len(want.Payload)))
			want.ICRC = icrc
			if d := diffPackets(&p, &want); d != "" {
				t.Fatalf("decoded packet differs from the description:\n%s", d)
			}
			if enc := mustEncode(t, &want); !bytes.Equal(enc, frame) {
				t.Fatalf("Encode of the described packet:\n got %x\nwant %x", enc, frame)
			}
			if enc := scatterEncode(t, &want); !bytes.Equal(enc, frame) {
				t.Fatalf("EncodeHeaders+Seal:\n got %x\nwant %x", enc, frame)
			}
		})
	}
}

// TestVectorFacts pins down the reading of individual vectors.
func TestVectorFacts(t *testing.T) {
	var p Packet
	if err := Decode(hexDump(t, docVectors[7].dump), &p); err != nil {
		t.Fatal(err)
	}
	if !p.AETH.IsRNRNAK() || p.AETH.RNRTimer().Microseconds() != 640 {
		t.Errorf("RNR NAK vector: %+v timer %v, want RNR NAK 0.64 ms", p.AETH, p.AETH.RNRTimer())
	}
	if err := Decode(hexDump(t, docVectors[4].dump), &p); err != nil {
		t.Fatal(err)
	}
	if !p.AETH.IsNAK() || p.AETH.NAKCode() != NAKPSNSequenceError || p.BTH.PSN != 0x105 {
		t.Errorf("NAK vector: %+v PSN %#x", p.AETH, p.BTH.PSN)
	}
	if err := Decode(hexDump(t, docVectors[1].dump), &p); err != nil {
		t.Fatal(err)
	}
	if n, limited := p.AETH.Credits(); !p.AETH.IsACK() || limited || n != 0 {
		t.Errorf("ACK vector: %+v credits %d limited %v, want unlimited", p.AETH, n, limited)
	}
	if err := Decode(hexDump(t, docVectors[9].dump), &p); err != nil {
		t.Fatal(err)
	}
	if p.BTH.Opcode != CNP || !p.BTH.BECN || p.BTH.FECN || p.UDP.SrcPort != 0 || p.UDP.Checksum != 0 || len(p.Payload) != 0 {
		t.Errorf("CNP vector: %+v", headersOf(&p))
	}
}
