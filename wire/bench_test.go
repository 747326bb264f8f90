package wire

import "testing"

// benchPacket is a 4 KiB RDMA WRITE MIDDLE, the bulk-transfer packet at PMTU 4096.
func benchPacket(payload int) Packet {
	p := rxePacket(true, false)
	p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN = RCWriteMiddle, 0x12, 0x100
	p.Payload = make([]byte, payload)
	for i := range p.Payload {
		p.Payload[i] = byte(i)
	}
	if payload == 0 {
		p.BTH.Opcode, p.AETH = RCAck, AETH{Syndrome: 0x1f, MSN: 1}
	}
	return p
}

func benchDecode(b *testing.B, payload int) {
	p := benchPacket(payload)
	frame := mustEncode(b, &p)
	var q Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Decode(frame, &q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode4K: full decode including ICRC verification.
func BenchmarkDecode4K(b *testing.B) { benchDecode(b, 4096) }

// BenchmarkDecodeACK: an ACK (no payload).
func BenchmarkDecodeACK(b *testing.B) { benchDecode(b, 0) }

func BenchmarkEncode4K(b *testing.B) {
	p := benchPacket(4096)
	buf := make([]byte, p.FrameLen())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(buf, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeScatter4K: EncodeHeaders, payload copy, Seal.
func BenchmarkEncodeScatter4K(b *testing.B) {
	p := benchPacket(4096)
	buf := make([]byte, p.FrameLen())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		hl, err := EncodeHeaders(buf, &p, len(p.Payload))
		if err != nil {
			b.Fatal(err)
		}
		copy(buf[hl:], p.Payload)
		if _, err := Seal(buf, hl, len(p.Payload)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkICRC4K(b *testing.B) {
	p := benchPacket(4096)
	frame := mustEncode(b, &p)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ICRC(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// A PMTU 4096 frame in two 4 KiB AF_XDP chunks (3840 bytes in the first),
// received and placed: gathered into one buffer and decoded, then copied
// into a region (two copies of the payload), or decoded in its pieces and
// copied into the region from them (one).
func benchTwoChunks(b *testing.B, split bool) {
	p := benchPacket(4096)
	frame := mustEncode(b, &p)
	head, tail := frame[:3840], frame[3840:]
	scratch, region := make([]byte, 8192), make([]byte, 4096)
	var q Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if split {
			if err := DecodeSplit(head, tail, &q); err != nil {
				b.Fatal(err)
			}
			copy(region[copy(region, q.Payload):], q.PayloadTail)
			continue
		}
		n := copy(scratch, head)
		n += copy(scratch[n:], tail)
		if err := Decode(scratch[:n], &q); err != nil {
			b.Fatal(err)
		}
		copy(region, q.Payload)
	}
}

func BenchmarkTwoChunksGathered(b *testing.B) { benchTwoChunks(b, false) }
func BenchmarkTwoChunksSplit(b *testing.B)    { benchTwoChunks(b, true) }
