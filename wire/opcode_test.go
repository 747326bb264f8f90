package wire

import (
	"strings"
	"testing"
)

// opcodeSpec is roce-wire-protocol.md §2.2 (from rxe_opcode.c) written out
// by hand: headers after the BTH in wire order, and the flags.
var opcodeSpec = []struct {
	op      Opcode
	name    string
	headers string // wire order
	payload bool
	flags   string
}{
	{0x00, "RC_SEND_FIRST", "", true, "req S RWR send"},
	{0x01, "RC_SEND_MIDDLE", "", true, "req M send"},
	{0x02, "RC_SEND_LAST", "", true, "req E COMP send"},
	{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", "ImmDt", true, "req E COMP send"},
	{0x04, "RC_SEND_ONLY", "", true, "req S E RWR COMP send"},
	{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", "ImmDt", true, "req S E RWR COMP send"},
	{0x06, "RC_RDMA_WRITE_FIRST", "RETH", true, "req S write"},
	{0x07, "RC_RDMA_WRITE_MIDDLE", "", true, "req M write"},
	{0x08, "RC_RDMA_WRITE_LAST", "", true, "req E write"},
	{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "ImmDt", true, "req E RWR COMP write"},
	{0x0a, "RC_RDMA_WRITE_ONLY", "RETH", true, "req S E write"},
	{0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RETH ImmDt", true, "req S E RWR COMP write"},
	{0x0c, "RC_RDMA_READ_REQUEST", "RETH", false, "req S E read"},
	{0x0d, "RC_RDMA_READ_RESPONSE_FIRST", "AETH", true, "resp S"},
	{0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", "", true, "resp M"},
	{0x0f, "RC_RDMA_READ_RESPONSE_LAST", "AETH", true, "resp E"},
	{0x10, "RC_RDMA_READ_RESPONSE_ONLY", "AETH", true, "resp S E"},
	{0x11, "RC_ACKNOWLEDGE", "AETH", false, "resp S E"},
	{0x12, "RC_ATOMIC_ACKNOWLEDGE", "AETH AtomicAckETH", false, "resp S E"},
	{0x13, "RC_COMPARE_SWAP", "AtomicETH", false, "req S E atomic"},
	{0x14, "RC_FETCH_ADD", "AtomicETH", false, "req S E atomic"},
	{0x16, "RC_SEND_LAST_WITH_INVALIDATE", "IETH", true, "req E COMP send"},
	{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", "IETH", true, "req S E RWR COMP send"},
	{0x20, "UC_SEND_FIRST", "", true, "req S RWR send"},
	{0x21, "UC_SEND_MIDDLE", "", true, "req M send"},
	{0x22, "UC_SEND_LAST", "", true, "req E COMP send"},
	{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", "ImmDt", true, "req E COMP send"},
	{0x24, "UC_SEND_ONLY", "", true, "req S E RWR COMP send"},
	{0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", "ImmDt", true, "req S E RWR COMP send"},
	{0x26, "UC_RDMA_WRITE_FIRST", "RETH", true, "req S write"},
	{0x27, "UC_RDMA_WRITE_MIDDLE", "", true, "req M write"},
	{0x28, "UC_RDMA_WRITE_LAST", "", true, "req E write"},
	{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "ImmDt", true, "req E RWR COMP write"},
	{0x2a, "UC_RDMA_WRITE_ONLY", "RETH", true, "req S E write"},
	{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RETH ImmDt", true, "req S E RWR COMP write"},
	{0x64, "UD_SEND_ONLY", "DETH", true, "req S E RWR COMP send"},
	{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", "DETH ImmDt", true, "req S E RWR COMP send"},
	{0x81, "CNP", "CNPReserved", false, ""},
}

var headerBits = map[string]struct {
	bit HeaderSet
	len int
}{
	"DETH": {HasDETH, 8}, "RETH": {HasRETH, 16}, "AtomicETH": {HasAtomicETH, 28}, "AETH": {HasAETH, 4},
	"AtomicAckETH": {HasAtomicAckETH, 8}, "ImmDt": {HasImmDt, 4}, "IETH": {HasIETH, 4}, "CNPReserved": {HasCNPReserved, 16},
}

var flagBits = map[string]OpFlags{
	"S": FlagStart, "M": FlagMiddle, "E": FlagEnd, "req": FlagRequest, "resp": FlagResponse,
	"RWR": FlagConsumesRecv, "COMP": FlagCompletes, "send": FlagSend, "write": FlagWrite,
	"read": FlagRead, "atomic": FlagAtomic,
}

func TestOpcodeTable(t *testing.T) {
	specified := map[Opcode]bool{}
	for _, s := range opcodeSpec {
		specified[s.op] = true
		info, ok := s.op.Info()
		if !ok {
			t.Errorf("%#x: unknown", s.op)
			continue
		}
		if info.Name != s.name || s.op.String() != s.name {
			t.Errorf("%#x: name %q / %q, want %q", s.op, info.Name, s.op.String(), s.name)
		}
		var h HeaderSet
		n := BTHLen
		for _, name := range strings.Fields(s.headers) {
			h |= headerBits[name].bit
			n += headerBits[name].len
		}
		if s.payload {
			h |= HasPayload
		}
		if info.Headers != h || info.HeaderLen != n {
			t.Errorf("%v: headers %b len %d, want %b len %d", s.op, info.Headers, info.HeaderLen, h, n)
		}
		var f OpFlags
		for _, name := range strings.Fields(s.flags) {
			f |= flagBits[name]
		}
		if info.Flags != f {
			t.Errorf("%v: flags %b, want %b", s.op, info.Flags, f)
		}
		if !info.Has(h) || !info.Is(f) {
			t.Errorf("%v: Has/Is disagree with the fields", s.op)
		}
	}
	for o := range 256 {
		op := Opcode(o)
		if _, ok := op.Info(); ok != specified[op] {
			t.Errorf("%#x: known=%v, specified=%v", o, ok, specified[op])
		}
		if !specified[op] && !strings.HasPrefix(op.String(), "Opcode(0x") {
			t.Errorf("%#x: String %q", o, op.String())
		}
	}
}

// TestHeaderOrder encodes every opcode with distinct values in each header
// and checks the bytes sit where the spec's wire order puts them.
func TestHeaderOrder(t *testing.T) {
	vals := map[string][]byte{
		"DETH":         {0xd1, 0xd2, 0xd3, 0xd4, 0x00, 0xd6, 0xd7, 0xd8},
		"RETH":         {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xb1, 0xb2, 0xb3, 0xb4, 0xc1, 0xc2, 0xc3, 0xc4},
		"AtomicETH":    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28},
		"AETH":         {0x1f, 0x0a, 0x0b, 0x0c},
		"AtomicAckETH": {0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8},
		"ImmDt":        {0x11, 0x22, 0x33, 0x44},
		"IETH":         {0x55, 0x66, 0x77, 0x88},
		"CNPReserved":  make([]byte, 16),
	}
	for _, s := range opcodeSpec {
		p := rxePacket(true, false)
		p.BTH.Opcode = s.op
		p.DETH = DETH{QKey: 0xd1d2d3d4, SrcQP: 0xd6d7d8}
		p.RETH = RETH{VA: 0xa1a2a3a4a5a6a7a8, RKey: 0xb1b2b3b4, Len: 0xc1c2c3c4}
		p.AtomicETH = AtomicETH{VA: 0x0102030405060708, RKey: 0x090a0b0c, SwapAdd: 0x0d0e0f1011121314, Compare: 0x15161718191a1b1c}
		p.AETH = AETH{Syndrome: 0x1f, MSN: 0x0a0b0c}
		p.AtomicAck = 0xe1e2e3e4e5e6e7e8
		p.ImmDt, p.IETH = 0x11223344, 0x55667788
		var want []byte
		for _, name := range strings.Fields(s.headers) {
			want = append(want, vals[name]...)
		}
		if s.payload {
			p.Payload = []byte{0xfe, 0xfd, 0xfc, 0xfb}
			want = append(want, p.Payload...)
		}
		frame := mustEncode(t, &p)
		got := frame[bth4+BTHLen : len(frame)-ICRCLen]
		if string(got) != string(want) {
			t.Errorf("%v: after BTH % x\nwant % x", s.op, got, want)
		}
	}
}

func TestTransport(t *testing.T) {
	for _, tc := range []struct {
		op   Opcode
		want Transport
		name string
	}{
		{RCSendOnly, TransportRC, "RC"}, {UCWriteOnlyImm, TransportUC, "UC"}, {UDSendOnlyImm, TransportUD, "UD"},
		{CNP, TransportCNP, "CNP"}, {0x44, TransportRD, "RD"}, {0xa0, TransportXRC, "XRC"}, {0xe0, 0xe0, "Transport(0xe0)"},
	} {
		if tc.op.Transport() != tc.want || tc.op.Transport().String() != tc.name {
			t.Errorf("%v: %v", tc.op, tc.op.Transport())
		}
	}
	if Opcode(0x15).String() != "Opcode(0x15)" {
		t.Errorf("unknown opcode String %q", Opcode(0x15).String())
	}
}
