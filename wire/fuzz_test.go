package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// repair recomputes the IPv4 header checksum and the ICRC of a frame (when
// its lengths allow), so the fuzzer's mutations reach the transport-layer
// checks instead of dying at a 16- or 32-bit checksum it cannot guess.
func repair(frame []byte) bool {
	var eth Ethernet
	off, v6, err := parseEth(frame, &eth)
	if err != nil {
		return false
	}
	if !v6 && len(frame) >= off+IPv4HeaderLen {
		h := frame[off : off+IPv4HeaderLen]
		h[10], h[11] = 0, 0
		binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
	}
	return fixICRC(frame)
}

// checkStable: decoding never panics and fails only with a sentinel; a frame
// that decodes re-encodes (both encode paths) to exactly its bytes up to the
// end of the IP packet, and that encoding decodes to the same Packet.
func checkStable(t *testing.T, frame []byte) {
	var p Packet
	err := Decode(frame, &p)
	if err != nil {
		if _, e := sentinelOf(err); e != nil {
			t.Fatal(e)
		}
		return
	}
	n := p.FrameLen()
	if n == 0 || n > len(frame) {
		t.Fatalf("FrameLen %d for a %d-byte frame", n, len(frame))
	}
	buf := make([]byte, n)
	m, err := Encode(buf, &p)
	if err != nil || m != n {
		t.Fatalf("Encode of a decoded packet: %d, %v", m, err)
	}
	if !bytes.Equal(buf, frame[:n]) {
		t.Fatalf("re-encoding differs:\n got %x\nwant %x", buf, frame[:n])
	}
	if sc := scatterEncode(t, &p); !bytes.Equal(sc, buf) {
		t.Fatalf("EncodeHeaders+Seal differs:\n got %x\nwant %x", sc, buf)
	}
	var q Packet
	if err := Decode(buf, &q); err != nil {
		t.Fatalf("re-encoded frame does not decode: %v", err)
	}
	if d := diffPackets(&p, &q); d != "" {
		t.Fatalf("decode -> encode -> decode changed the packet:\n%s", d)
	}
	// DecodeIP on the same bytes agrees with Decode.
	off := l2Len(&p.Eth)
	if err := DecodeIP(frame[off:], p.IP.V6, &q); err != nil {
		t.Fatalf("DecodeIP: %v", err)
	}
	q.Eth = p.Eth
	if d := diffPackets(&p, &q); d != "" {
		t.Fatalf("DecodeIP differs from Decode:\n%s", d)
	}
}

func FuzzDecode(f *testing.F) {
	for _, v := range docVectors {
		f.Add(hexDump(f, v.dump))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkStable(t, frame)
		for _, v6 := range []bool{false, true} {
			var p Packet
			if err := DecodeIP(frame, v6, &p); err != nil {
				if _, e := sentinelOf(err); e != nil {
					t.Fatal(e)
				}
			}
		}
		if _, err := ICRC(frame); err != nil {
			if _, e := sentinelOf(err); e != nil {
				t.Fatal(e)
			}
		}
		fixed := append([]byte(nil), frame...)
		if repair(fixed) {
			checkStable(t, fixed)
		}
	})
}
