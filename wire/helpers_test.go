package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// hexDump parses "0000  02 00 ..." hex dumps (offset column first).
func hexDump(t testing.TB, s string) []byte {
	t.Helper()
	var out []byte
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		b, err := hex.DecodeString(strings.Join(f[1:], ""))
		if err != nil {
			t.Fatalf("bad hex line %q: %v", line, err)
		}
		out = append(out, b...)
	}
	return out
}

// headers is everything in a Packet except the payload, as a comparable value.
type headers struct {
	Eth       Ethernet
	IP        IP
	UDP       UDP
	BTH       BTH
	RETH      RETH
	AETH      AETH
	AtomicETH AtomicETH
	AtomicAck uint64
	ImmDt     uint32
	IETH      uint32
	DETH      DETH
	ICRC      uint32
}

func headersOf(p *Packet) headers {
	return headers{p.Eth, p.IP, p.UDP, p.BTH, p.RETH, p.AETH, p.AtomicETH, p.AtomicAck, p.ImmDt, p.IETH, p.DETH, p.ICRC}
}

// diffPackets returns "" if a and b are equal (payload compared by content).
func diffPackets(a, b *Packet) string {
	ha, hb := headersOf(a), headersOf(b)
	var d []string
	if ha != hb {
		d = append(d, fmt.Sprintf("headers differ:\n  %+v\n  %+v", ha, hb))
	}
	if !bytes.Equal(a.Payload, b.Payload) {
		d = append(d, fmt.Sprintf("payload differs: %x vs %x", a.Payload, b.Payload))
	}
	return strings.Join(d, "\n")
}

var (
	macA = [6]byte{2, 0, 0, 0, 0, 1}
	macB = [6]byte{2, 0, 0, 0, 0, 2}
)

// rxePacket is a packet from host A (QPN 0x11) to host B (QPN 0x12) of the
// protocol document's §7, or the reverse, with rxe's header choices.
func rxePacket(fromA, v6 bool) Packet {
	var p Packet
	p.Reset()
	p.Eth.Src, p.Eth.Dst = macA, macB
	p.IP.Src, p.IP.Dst = netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("192.168.1.2")
	if v6 {
		p.IP.V6 = true
		p.IP.DF = false
		p.IP.Src, p.IP.Dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	}
	if !fromA {
		p.Eth.Src, p.Eth.Dst = p.Eth.Dst, p.Eth.Src
		p.IP.Src, p.IP.Dst = p.IP.Dst, p.IP.Src
	}
	p.UDP.SrcPort = UDPSourcePort(0, 0x11, 0x12)
	return p
}

// mustEncode encodes p into a fresh buffer of exactly FrameLen bytes.
func mustEncode(t testing.TB, p *Packet) []byte {
	t.Helper()
	buf := make([]byte, p.FrameLen())
	n, err := Encode(buf, p)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if n != len(buf) {
		t.Fatalf("Encode wrote %d bytes, FrameLen says %d", n, len(buf))
	}
	return buf
}

// scatterEncode encodes p through EncodeHeaders + payload copy + Seal.
func scatterEncode(t testing.TB, p *Packet) []byte {
	t.Helper()
	buf := make([]byte, p.FrameLen())
	for i := range buf {
		buf[i] = 0xee // Seal must overwrite pad bytes
	}
	hl, err := EncodeHeaders(buf, p, len(p.Payload))
	if err != nil {
		t.Fatalf("EncodeHeaders: %v", err)
	}
	copy(buf[hl:], p.Payload)
	n, err := Seal(buf, hl, len(p.Payload))
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	if n != len(buf) {
		t.Fatalf("Seal returned %d, want %d", n, len(buf))
	}
	return buf
}

// sentinels lists every exported sentinel error.
var sentinels = []error{
	ErrTruncated, ErrNotRoCE, ErrIPOptions, ErrBadIPHeader, ErrBadUDPLength, ErrBadTVer,
	ErrUnknownOpcode, ErrBadPad, ErrBadLength, ErrBadICRC, ErrReserved, ErrInvalidField, ErrShortBuffer,
	ErrSplitHeaders,
}

// sentinelOf returns the single sentinel err wraps, or an error if it wraps
// none or several.
func sentinelOf(err error) (error, error) {
	var found error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			if found != nil {
				return nil, fmt.Errorf("%v wraps both %v and %v", err, found, s)
			}
			found = s
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%v wraps no sentinel", err)
	}
	return found, nil
}

// fixICRC recomputes the ICRC of a frame in place; it reports false if the
// frame's lengths do not locate one.
func fixICRC(frame []byte) bool {
	v, err := ICRC(frame)
	if err != nil {
		return false
	}
	var eth Ethernet
	off, v6, _ := parseEth(frame, &eth)
	end, _ := locateL3(frame[off:], v6)
	at := off + end - ICRCLen
	frame[at], frame[at+1], frame[at+2], frame[at+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	return true
}
