package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// knownOpcodes lists every opcode Info knows.
func knownOpcodes() []Opcode {
	var ops []Opcode
	for o := range 256 {
		if _, ok := Opcode(o).Info(); ok {
			ops = append(ops, Opcode(o))
		}
	}
	return ops
}

// randomPacket builds a valid packet with random field values; the opcode
// cycles through every known opcode with i.
func randomPacket(rng *rand.Rand, i int) Packet {
	ops := knownOpcodes()
	op := ops[i%len(ops)]
	info, _ := op.Info()
	var p Packet
	p.Reset()
	fill := func(b []byte) {
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
	}
	fill(p.Eth.Dst[:])
	fill(p.Eth.Src[:])
	if rng.IntN(3) == 0 {
		p.Eth.HasVLAN, p.Eth.VLANTCI = true, uint16(rng.Uint32())
	}
	p.IP.TOS = uint8(rng.Uint32())
	p.IP.TTL = uint8(1 + rng.IntN(255))
	if rng.IntN(2) == 0 {
		p.IP.V6, p.IP.DF = true, false
		var a, b [16]byte
		fill(a[:])
		fill(b[:])
		p.IP.Src, p.IP.Dst = netip.AddrFrom16(a), netip.AddrFrom16(b)
		p.IP.FlowLabel = rng.Uint32() & mask20
	} else {
		var a, b [4]byte
		fill(a[:])
		fill(b[:])
		p.IP.Src, p.IP.Dst = netip.AddrFrom4(a), netip.AddrFrom4(b)
		p.IP.ID, p.IP.DF = uint16(rng.Uint32()), rng.IntN(4) != 0
	}
	p.UDP.SrcPort, p.UDP.Checksum = uint16(rng.Uint32()), 0
	if rng.IntN(4) == 0 {
		p.UDP.Checksum = uint16(rng.Uint32())
	}
	p.BTH = BTH{
		Opcode: op, SE: rng.IntN(2) == 0, MigReq: rng.IntN(2) == 0, PKey: uint16(rng.Uint32()),
		FECN: rng.IntN(2) == 0, BECN: rng.IntN(2) == 0, DestQP: rng.Uint32() & mask24,
		AckReq: rng.IntN(2) == 0, PSN: rng.Uint32() & mask24,
	}
	if rng.IntN(8) == 0 {
		p.BTH.Resv6a, p.BTH.Resv7 = uint8(rng.IntN(64)), uint8(rng.IntN(128))
	}
	h := info.Headers
	if h&HasDETH != 0 {
		p.DETH = DETH{QKey: rng.Uint32(), SrcQP: rng.Uint32() & mask24}
		if rng.IntN(8) == 0 {
			p.DETH.Resv = uint8(rng.Uint32())
		}
	}
	if h&HasRETH != 0 {
		p.RETH = RETH{VA: rng.Uint64(), RKey: rng.Uint32(), Len: rng.Uint32()}
	}
	if h&HasAtomicETH != 0 {
		p.AtomicETH = AtomicETH{VA: rng.Uint64(), RKey: rng.Uint32(), SwapAdd: rng.Uint64(), Compare: rng.Uint64()}
	}
	if h&HasAETH != 0 {
		p.AETH = AETH{Syndrome: uint8(rng.Uint32()), MSN: rng.Uint32() & mask24}
	}
	if h&HasAtomicAckETH != 0 {
		p.AtomicAck = rng.Uint64()
	}
	if h&HasImmDt != 0 {
		p.ImmDt = rng.Uint32()
	}
	if h&HasIETH != 0 {
		p.IETH = rng.Uint32()
	}
	if h&HasPayload != 0 {
		n := rng.IntN(40)
		if rng.IntN(4) == 0 {
			n = rng.IntN(5000)
		}
		p.Payload = make([]byte, n)
		fill(p.Payload)
	}
	return p
}

// checkRoundTrip encodes p both ways, decodes the frame, and checks the
// decoded packet equals p plus the derived fields.
func checkRoundTrip(t *testing.T, p *Packet) []byte {
	t.Helper()
	frame := mustEncode(t, p)
	if sc := scatterEncode(t, p); !bytes.Equal(sc, frame) {
		t.Fatalf("%v: EncodeHeaders+Seal differs from Encode:\n%x\n%x", p.BTH.Opcode, sc, frame)
	}
	var q Packet
	if err := Decode(frame, &q); err != nil {
		t.Fatalf("%v: Decode of an encoded frame: %v", p.BTH.Opcode, err)
	}
	want := *p
	want.UDP.DstPort = UDPPort
	want.UDP.Length = uint16(len(frame) - l2Len(&p.Eth) - l3Len(p.IP.V6))
	want.BTH.PadCnt = uint8(padLen(len(p.Payload)))
	want.ICRC = q.ICRC
	if d := diffPackets(&q, &want); d != "" {
		t.Fatalf("%v: round trip changed the packet:\n%s", p.BTH.Opcode, d)
	}
	if icrc, err := ICRC(frame); err != nil || icrc != q.ICRC {
		t.Fatalf("ICRC(frame) = %#x, %v; Decode found %#x", icrc, err, q.ICRC)
	}
	return frame
}

func TestEveryOpcodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ops := knownOpcodes()
	for i := range 40 * len(ops) {
		p := randomPacket(rng, i)
		checkRoundTrip(t, &p)
	}
}

func TestPadCnt(t *testing.T) {
	for n := range 9 {
		for _, v6 := range []bool{false, true} {
			p := rxePacket(true, v6)
			p.BTH.Opcode = RCSendOnly
			p.Payload = bytes.Repeat([]byte{0xa5}, n)
			frame := checkRoundTrip(t, &p)
			pad := (4 - n%4) % 4
			bth := EthHeaderLen + l3Len(v6) + UDPHeaderLen
			if got := int(frame[bth+1] >> 4 & 3); got != pad {
				t.Errorf("payload %d: PadCnt %d, want %d", n, got, pad)
			}
			if len(frame) != bth+BTHLen+n+pad+ICRCLen || (len(frame)-bth)%4 != 0 {
				t.Errorf("payload %d: frame length %d not aligned", n, len(frame))
			}
			if !bytes.Equal(frame[bth+BTHLen+n:len(frame)-4], make([]byte, pad)) {
				t.Errorf("payload %d: pad bytes not zero", n)
			}
		}
	}
}

func TestVLAN(t *testing.T) {
	p := rxePacket(true, false)
	p.BTH.Opcode, p.BTH.DestQP = RCWriteOnly, 0x12
	p.RETH = RETH{VA: 0x1000, RKey: 7, Len: 3}
	p.Payload = []byte{1, 2, 3}
	plain := checkRoundTrip(t, &p)
	p.Eth.HasVLAN, p.Eth.VLANTCI = true, 0xa00c // PCP 5, VID 12
	tagged := checkRoundTrip(t, &p)
	if len(tagged) != len(plain)+VLANTagLen {
		t.Fatalf("tagged frame %d bytes, untagged %d", len(tagged), len(plain))
	}
	if !bytes.Equal(tagged[12:18], []byte{0x81, 0x00, 0xa0, 0x0c, 0x08, 0x00}) {
		t.Fatalf("tag bytes %x", tagged[12:18])
	}
	// The ICRC does not cover the link layer.
	if !bytes.Equal(tagged[len(tagged)-4:], plain[len(plain)-4:]) || !bytes.Equal(tagged[18:], plain[14:]) {
		t.Fatal("VLAN tag changed the IP packet")
	}
	// Double tagging is not RoCEv2 as far as this codec is concerned.
	qinq := append(append(append([]byte(nil), tagged[:16]...), 0x81, 0x00, 0, 1), tagged[16:]...)
	var q Packet
	if err := Decode(qinq, &q); !errors.Is(err, ErrNotRoCE) {
		t.Fatalf("QinQ: %v, want ErrNotRoCE", err)
	}
}

func TestIPv6(t *testing.T) {
	p := rxePacket(true, true)
	p.IP.TOS, p.IP.FlowLabel = 0x68, 0x12345
	p.BTH.Opcode, p.BTH.DestQP = RCSendOnlyImm, 0x12
	p.ImmDt = 0xdeadbeef
	p.Payload = []byte("ipv6")
	frame := checkRoundTrip(t, &p)
	ip := frame[EthHeaderLen:]
	if ip[0] != 0x66 || ip[1] != 0x81 || ip[2] != 0x23 || ip[3] != 0x45 || ip[6] != 17 || ip[7] != 64 {
		t.Fatalf("IPv6 header %x", ip[:8])
	}
	if got := int(ip[4])<<8 | int(ip[5]); got != len(frame)-EthHeaderLen-IPv6HeaderLen {
		t.Fatalf("payload length %d", got)
	}
	// Traffic class and flow label are masked out of the ICRC.
	p.IP.TOS, p.IP.FlowLabel = 0, 0
	other := mustEncode(t, &p)
	if !bytes.Equal(other[len(other)-4:], frame[len(frame)-4:]) {
		t.Fatal("traffic class / flow label changed the ICRC")
	}
}

func TestIPv4HeaderAsRxe(t *testing.T) {
	p := rxePacket(true, false)
	p.IP.ID, p.IP.TOS = 0x1234, 0x02
	p.BTH.Opcode = RCSendOnly
	frame := mustEncode(t, &p)
	ip := frame[EthHeaderLen : EthHeaderLen+IPv4HeaderLen]
	if ip[0] != 0x45 || ip[1] != 0x02 || ip[4] != 0x12 || ip[5] != 0x34 || ip[6] != 0x40 || ip[7] != 0 || ip[8] != 64 || ip[9] != 17 {
		t.Fatalf("IPv4 header %x", ip)
	}
	if ipv4Checksum(ip) != 0 {
		t.Fatal("IPv4 header checksum does not verify")
	}
	udp := frame[EthHeaderLen+IPv4HeaderLen:]
	if udp[2] != 0x12 || udp[3] != 0xb7 || udp[6] != 0 || udp[7] != 0 {
		t.Fatalf("UDP header %x", udp[:8])
	}
	// The smallest frame is below the Ethernet minimum; Encode leaves it so.
	if len(frame) != 58 || len(frame) >= MinFrameLen {
		t.Fatalf("BTH-only frame is %d bytes, want 58", len(frame))
	}
	// Decode ignores Ethernet padding.
	padded := append(append([]byte(nil), frame...), 0, 0)
	var q Packet
	if err := Decode(padded, &q); err != nil || len(q.Payload) != 0 {
		t.Fatalf("padded frame: %v", err)
	}
}

func TestReservedBitsPreserved(t *testing.T) {
	p := rxePacket(true, false)
	p.BTH.Opcode = UDSendOnly
	p.BTH.Resv6a, p.BTH.Resv7 = 0x2a, 0x55
	p.DETH = DETH{QKey: 0x11111111, SrcQP: 0x45, Resv: 0x99}
	frame := checkRoundTrip(t, &p)
	bth := EthHeaderLen + IPv4HeaderLen + UDPHeaderLen
	if frame[bth+4] != 0x2a || frame[bth+8] != 0x55 || frame[bth+BTHLen+4] != 0x99 {
		t.Fatalf("reserved bits not on the wire: %x", frame[bth:bth+20])
	}
}

func TestResetDefaults(t *testing.T) {
	var p Packet
	p.ImmDt, p.Payload = 5, []byte{1}
	p.Reset()
	if p.IP.TTL != 64 || !p.IP.DF || p.BTH.PKey != 0xffff || p.UDP.DstPort != 4791 || p.UDP.Checksum != 0 ||
		p.IP.FlowLabel != 0 || p.ImmDt != 0 || p.Payload != nil {
		t.Fatalf("Reset: %+v", headersOf(&p))
	}
}

func TestFrameLen(t *testing.T) {
	p := rxePacket(true, false)
	p.BTH.Opcode = Opcode(0x15)
	if n := p.FrameLen(); n != 0 {
		t.Fatalf("unknown opcode FrameLen %d", n)
	}
	for _, tc := range []struct {
		op      Opcode
		v6      bool
		vlan    bool
		payload int
		want    int
	}{
		{RCAck, false, false, 0, 14 + 20 + 8 + 12 + 4 + 4},
		{RCSendOnly, false, false, 5, 14 + 20 + 8 + 12 + 8 + 4},
		{RCWriteOnlyImm, true, true, 1, 18 + 40 + 8 + 12 + 16 + 4 + 4 + 4},
		{RCAtomicAck, false, false, 0, 14 + 20 + 8 + 12 + 4 + 8 + 4},
		{RCFetchAdd, false, false, 0, 14 + 20 + 8 + 12 + 28 + 4},
		{UDSendOnlyImm, false, false, 4, 14 + 20 + 8 + 12 + 8 + 4 + 4 + 4},
		{CNP, false, false, 0, 14 + 20 + 8 + 12 + 16 + 4},
	} {
		p := rxePacket(true, tc.v6)
		p.Eth.HasVLAN = tc.vlan
		p.BTH.Opcode = tc.op
		p.Payload = make([]byte, tc.payload)
		if got := p.FrameLen(); got != tc.want {
			t.Errorf("%v: FrameLen %d, want %d", tc.op, got, tc.want)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	base := func() Packet {
		p := rxePacket(true, false)
		p.BTH.Opcode = RCSendOnly
		return p
	}
	big := make([]byte, 70000)
	for _, tc := range []struct {
		name   string
		mutate func(*Packet)
		dst    int // destination size; 0 = FrameLen
		want   error
	}{
		{"unknown opcode", func(p *Packet) { p.BTH.Opcode = 0x15 }, 100, ErrUnknownOpcode},
		{"RD opcode", func(p *Packet) { p.BTH.Opcode = 0x44 }, 100, ErrUnknownOpcode},
		{"payload on ACK", func(p *Packet) { p.BTH.Opcode, p.Payload = RCAck, []byte{1} }, 100, ErrBadLength},
		{"payload on READ request", func(p *Packet) { p.BTH.Opcode, p.Payload = RCReadRequest, []byte{1} }, 100, ErrBadLength},
		{"IPv4 too long", func(p *Packet) { p.Payload = big[:65535-20-8-12-4+1] }, 70000, ErrBadLength},
		{"IPv6 too long", func(p *Packet) {
			*p = rxePacket(true, true)
			p.BTH.Opcode, p.Payload = RCSendOnly, big[:65535-8-12-4+1]
		}, 70000, ErrBadLength},
		{"short buffer", nil, -1, ErrShortBuffer},
		{"TTL 0", func(p *Packet) { p.IP.TTL = 0 }, 0, ErrInvalidField},
		{"v6 addresses on v4", func(p *Packet) { p.IP.Src = netip.MustParseAddr("fd00::1") }, 0, ErrInvalidField},
		{"no addresses", func(p *Packet) { p.IP.Dst = netip.Addr{} }, 0, ErrInvalidField},
		{"v4 addresses on v6", func(p *Packet) { p.IP.V6 = true }, 100, ErrInvalidField},
		{"flow label", func(p *Packet) { *p = rxePacket(true, true); p.BTH.Opcode = RCSendOnly; p.IP.FlowLabel = 1 << 20 }, 0, ErrInvalidField},
		{"dst port", func(p *Packet) { p.UDP.DstPort = 4792 }, 0, ErrInvalidField},
		{"DestQP", func(p *Packet) { p.BTH.DestQP = 1 << 24 }, 0, ErrInvalidField},
		{"PSN", func(p *Packet) { p.BTH.PSN = 1 << 24 }, 0, ErrInvalidField},
		{"TVer", func(p *Packet) { p.BTH.TVer = 16 }, 0, ErrInvalidField},
		{"Resv6a", func(p *Packet) { p.BTH.Resv6a = 64 }, 0, ErrInvalidField},
		{"Resv7", func(p *Packet) { p.BTH.Resv7 = 128 }, 0, ErrInvalidField},
		{"MSN", func(p *Packet) { p.BTH.Opcode, p.AETH.MSN = RCAck, 1<<24 }, 0, ErrInvalidField},
		{"SrcQP", func(p *Packet) { p.BTH.Opcode, p.DETH.SrcQP = UDSendOnly, 1<<24 }, 0, ErrInvalidField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			if tc.mutate != nil {
				tc.mutate(&p)
			}
			n := tc.dst
			switch n {
			case 0:
				n = p.FrameLen()
			case -1:
				n = p.FrameLen() - 1
			}
			dst := make([]byte, n)
			if _, err := Encode(dst, &p); !errors.Is(err, tc.want) {
				t.Fatalf("Encode: %v, want %v", err, tc.want)
			}
			if _, err := EncodeHeaders(dst, &p, len(p.Payload)); !errors.Is(err, tc.want) {
				t.Fatalf("EncodeHeaders: %v, want %v", err, tc.want)
			}
		})
	}
	// Fields of headers the opcode does not carry are ignored.
	p := base()
	p.AETH.MSN, p.DETH.SrcQP, p.IP.FlowLabel = 1<<30, 1<<30, 1<<30
	mustEncode(t, &p)
	// A zero destination port means 4791.
	p.UDP.DstPort = 0
	frame := mustEncode(t, &p)
	if frame[36] != 0x12 || frame[37] != 0xb7 {
		t.Fatalf("dst port %x", frame[36:38])
	}
	if _, err := EncodeHeaders(make([]byte, 100), &p, -1); !errors.Is(err, ErrBadLength) {
		t.Fatalf("negative payload: %v", err)
	}
	if _, err := EncodeHeaders(make([]byte, 100), &p, 1<<40); !errors.Is(err, ErrBadLength) {
		t.Fatalf("huge payload: %v", err)
	}
}

func TestMaximumSizes(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		p := rxePacket(true, v6)
		p.BTH.Opcode = RCSendOnly
		// The UDP payload (BTH..ICRC) is a multiple of 4 bytes and the IP
		// length fields are 16 bits.
		limit := 65535 - UDPHeaderLen
		if !v6 {
			limit -= IPv4HeaderLen
		}
		max := limit&^3 - BTHLen - ICRCLen
		p.Payload = make([]byte, max)
		frame := checkRoundTrip(t, &p)
		if len(frame) != EthHeaderLen+l3Len(v6)+UDPHeaderLen+limit&^3 {
			t.Fatalf("v6=%v: frame %d bytes", v6, len(frame))
		}
		p.Payload = make([]byte, max+1)
		if _, err := Encode(make([]byte, 70000), &p); !errors.Is(err, ErrBadLength) {
			t.Fatalf("v6=%v: one byte more: %v", v6, err)
		}
	}
}

func TestSealErrors(t *testing.T) {
	p := rxePacket(true, false)
	p.BTH.Opcode = RCSendOnly
	p.Payload = []byte{1, 2, 3, 4, 5}
	frame := mustEncode(t, &p)
	hl := len(frame) - 5 - 3 - 4
	if n, err := Seal(append([]byte(nil), frame...), hl, 5); err != nil || n != len(frame) {
		t.Fatalf("Seal of a good frame: %d, %v", n, err)
	}
	for _, tc := range []struct {
		name        string
		f           []byte
		hl, payload int
		want        error
	}{
		{"wrong hdrLen", frame, hl + 4, 1, ErrBadLength},
		{"wrong payloadLen", frame, hl, 4, ErrBadLength},
		{"negative payloadLen", frame, hl, -3, ErrBadLength},
		{"PadCnt disagrees", frame, hl, 6, ErrBadPad},
		{"truncated", frame[:20], hl, 5, ErrTruncated},
		{"not IP", append([]byte{}, make([]byte, 14)...), 0, 0, ErrNotRoCE},
	} {
		if _, err := Seal(append([]byte(nil), tc.f...), tc.hl, tc.payload); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A PadCnt in the BTH that disagrees with payloadLen.
	f := append([]byte(nil), frame...)
	f[EthHeaderLen+IPv4HeaderLen+UDPHeaderLen+1] = 0x10
	if _, err := Seal(f, hl, 5); !errors.Is(err, ErrBadPad) {
		t.Errorf("PadCnt mismatch: %v", err)
	}
	// Unknown opcode in the frame.
	f = append([]byte(nil), frame...)
	f[EthHeaderLen+IPv4HeaderLen+UDPHeaderLen] = 0x15
	if _, err := Seal(f, hl, 5); !errors.Is(err, ErrUnknownOpcode) {
		t.Errorf("unknown opcode: %v", err)
	}
}

func TestNoAllocations(t *testing.T) {
	p := rxePacket(true, false)
	p.BTH.Opcode, p.BTH.DestQP = RCWriteOnly, 0x12
	p.RETH = RETH{VA: 1, RKey: 2, Len: 4096}
	p.Payload = make([]byte, 4096)
	buf := make([]byte, p.FrameLen())
	var q Packet
	var bad [60]byte
	allocs := testing.AllocsPerRun(100, func() {
		n, err := Encode(buf, &p)
		if err != nil {
			panic(err)
		}
		if err := Decode(buf[:n], &q); err != nil {
			panic(err)
		}
		hl, _ := EncodeHeaders(buf, &p, 4096)
		if _, err := Seal(buf, hl, 4096); err != nil {
			panic(err)
		}
		if _, err := ICRC(buf); err != nil {
			panic(err)
		}
		// Failures allocate nothing either.
		buf[n-1] ^= 1
		if err := Decode(buf[:n], &q); !errors.Is(err, ErrBadICRC) {
			panic(err)
		}
		if err := Decode(bad[:], &q); err == nil {
			panic("decoded zeros")
		}
		_ = q.AETH.RNRTimer()
		_ = UDPSourcePort(0, 1, 2) + UDSourcePort(3)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
}
