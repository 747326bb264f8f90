package verbs

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// FuzzTransport runs a legitimate transfer from a to b — a WRITE, a SEND
// and a READ, 8 KiB each at PMTU 1024 — while fuzzer-chosen frames, spoofed
// from b, reach a between the engines' steps: responses of any opcode,
// syndrome, PSN and payload, stray requests, and raw bytes. Both engines run
// on the test goroutine with a fake clock, so every input replays exactly.
// The input's first byte puts a's first PSN up to 31 below 2^24, so the
// PSN wrap falls inside the WRITE, the SEND or the READ, or nowhere; forged
// PSNs are offsets from it, reaching across the wrap.
//
// Invariants: no panic; the transfer ends within 60 s of simulated time
// (each WR completes, with success or an error: a forged NAK inside the
// window may fail it, as on any RoCE link); a's memory changes only where
// the READ lands (its region has no remote rights); a READ that succeeds
// holds, in each path MTU of its target, b's bytes or the payload of a
// forged READ response carrying that packet's PSN (a forger who hits the
// very PSN the READ waits for, with the right shape, is a RoCE limit: see
// docs/security.md); a WRITE or SEND that succeeds left b's bytes right.
func FuzzTransport(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{3, 0, 0x11, 0, 0, 0x00, 0, 0})                       // an ACK at the first PSN
	f.Add([]byte{12, 0, 0x11, 0, 3, 0x60, 0, 0, 1, 0x10, 2, 0, 5, 0}) // a NAK, then an ACK ahead
	f.Add([]byte{20, 0, 0x10, 0, 16, 0, 0, 64, 1, 0x0f, 0, 17, 0, 0}) // READ responses inside the READ
	f.Add([]byte{20, 3, 1, 0, 0x10, 0, 16, 0, 64, 0x5a})              // a READ_RESPONSE_ONLY inside the READ, between b's responses
	f.Add([]byte{20, 3, 1, 0, 0x0e, 0, 17, 0, 64, 0x5a})              // a MIDDLE at the PSN the READ waits for: placed, attributed
	f.Add([]byte{1, 0, 0x12, 0, 24, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0})    // atomic ACK, WRITE_ONLY request
	f.Add([]byte{8, 0, 0x11, 0xff, 0xf0, 0x60, 0, 0})                 // a NAK behind, across the wrap
	f.Add([]byte{0, 2, 40, 1, 2, 3, 4, 5, 6, 7, 8})                   // raw bytes
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzTransport(t, data)
	})
}

func fuzzTransport(t *testing.T, data []byte) {
	const size, mtu = 8 << 10, 1024
	var start uint32 // a's first PSN
	if len(data) > 0 {
		start, data = (1<<24-uint32(data[0]%32))&0xffffff, data[1:]
	}
	clk := faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr, access Access) *node {
		n := newNode(t, newDeviceWith(t, l, mac, ip, DeviceConfig{ActiveMTU: 4096, Clock: clk, AckHold: -1}), 4*size)
		mr, err := n.pd.AllocMR(4*size, access)
		must(t, err)
		n.mr = mr
		return n
	}
	il := &interleaver{Link: lb, after: map[int][][]byte{}}
	a := mk(la, macA, ipA, AccessLocalWrite)
	b := mk(il, macB, ipB, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU1024, timeout: 10, retry: 7, rnr: 7, psnA: start})
	fill(a.mr.Bytes(), 1)
	fill(b.mr.Bytes(), 2)
	wantA := append([]byte(nil), a.mr.Bytes()...)
	wantB := append([]byte(nil), b.mr.Bytes()...)
	copy(wantB[size:2*size], a.mr.Bytes()[:size])     // WRITE target
	copy(wantB[2*size:3*size], a.mr.Bytes()[:size])   // SEND target
	copy(wantA[3*size:4*size], b.mr.Bytes()[3*size:]) // READ target

	ls := &lockstep{clk: clk, devs: [2]*Device{a.dev, b.dev}, perFrame: time.Microsecond}
	ls.hold()
	postRecv(t, b, RecvWR{ID: 9, SGList: sge(b.mr, 2*size, size)})
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: b.mr.Addr() + size, RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, size)},
		SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 3*size, size), RemoteAddr: b.mr.Addr() + 3*size, RKey: b.mr.RKey()})
	// The READ's PSNs: after 8 WRITE and 8 SEND packets, start+16 to
	// start+23. forged[k] are the payloads of the forged READ responses
	// with the PSN of its packet k.
	readFirst := (start + 16) & 0xffffff
	var forged [size / mtu][][]byte
	frames := fuzzFrames(t, data, a.qp.QPN(), start, func(psn uint32, payload []byte) {
		if k := (psn - readFirst) & 0xffffff; k < size/mtu {
			forged[k] = append(forged[k], payload)
		}
	})
	var rounds [][]byte // frames delivered one per engine round
	for _, f := range frames {
		if f.after > 0 {
			il.after[f.after] = append(il.after[f.after], f.frame)
		} else {
			rounds = append(rounds, f.frame)
		}
	}
	var wcs []WorkCompletion
	buf := make([]WorkCompletion, 8)
	done := func() bool {
		n := a.scq.Poll(buf)
		wcs = append(wcs, buf[:n]...)
		if len(rounds) > 0 {
			// One forged frame per engine round, between the transfer's
			// packets; the engines step once more after the last.
			la.Inject(rounds[:1])
			rounds = rounds[1:]
			return false
		}
		return len(wcs) == 3
	}
	if took := ls.run(done, 60*time.Second); len(wcs) != 3 {
		t.Fatalf("%d of 3 completions after %v of simulated time%s", len(wcs), took, stallReport(t))
	}
	ok := map[uint64]bool{}
	for _, wc := range wcs {
		ok[wc.WRID] = wc.Status == WCSuccess
	}
	got := a.mr.Bytes()
	if !bytes.Equal(got[:3*size], wantA[:3*size]) {
		t.Fatalf("a's memory outside the READ target changed")
	}
	if ok[3] {
		for k := range size / mtu {
			off := 3*size + k*mtu
			chunk := got[off : off+mtu]
			if bytes.Equal(chunk, wantA[off:off+mtu]) {
				continue
			}
			attributed := false
			for _, p := range forged[k] {
				attributed = attributed || bytes.Equal(chunk, p)
			}
			if !attributed {
				t.Fatalf("the READ succeeded with bytes at offset %d that neither b nor a forged response with PSN %#x sent", k*mtu, (readFirst+uint32(k))&0xffffff)
			}
		}
	}
	if ok[1] && !bytes.Equal(b.mr.Bytes()[size:2*size], wantB[size:2*size]) {
		t.Fatalf("the WRITE succeeded but b's target is wrong")
	}
	if ok[2] && !bytes.Equal(b.mr.Bytes()[2*size:3*size], wantB[2*size:3*size]) {
		t.Fatalf("the SEND succeeded but b's target is wrong")
	}
}

// interleaver is b's end of the link: after b's n-th frame it delivers
// to a the forged frames in after[n], so that a forgery lands between
// two of b's genuine packets (a READ's responses arrive in one batch).
type interleaver struct {
	*memlink.Link
	sent  int
	after map[int][][]byte
}

func (l *interleaver) Send(frames [][]byte) error {
	for i := range frames {
		if err := l.Link.Send(frames[i : i+1]); err != nil {
			return err
		}
		l.sent++
		if f := l.after[l.sent]; f != nil {
			l.Peer().Inject(f)
			delete(l.after, l.sent)
		}
	}
	return nil
}

// fuzzFrame is a forged frame and where it goes: after b's after-th frame,
// or (0) in an engine round of its own.
type fuzzFrame struct {
	frame []byte
	after int
}

// fuzzFrames turns fuzz input into frames for a's QP, spoofed from b. Each
// record starts with a kind byte: 0 a well-formed frame (opcode, PSN as a
// signed 16-bit offset from start, AETH syndrome, payload length in
// 16-byte units, then a fill byte), 1 the same with a random destination
// QPN, 2 raw bytes (length, bytes), 3 a position: the frames after it go
// right after b's n-th frame (the next byte; 0: one per engine round, as
// at first). noteRead is told the PSN and payload of every forged READ
// response.
func fuzzFrames(t *testing.T, data []byte, qpn, start uint32, noteRead func(psn uint32, payload []byte)) []fuzzFrame {
	var out []fuzzFrame
	after := 0
	for len(data) > 0 && len(out) < 64 {
		kind := data[0] % 4
		data = data[1:]
		if kind == 3 {
			if len(data) == 0 {
				break
			}
			after, data = int(data[0]), data[1:]
			continue
		}
		if kind == 2 {
			if len(data) == 0 {
				break
			}
			n := min(int(data[0]), len(data)-1)
			out = append(out, fuzzFrame{append([]byte(nil), data[1:1+n]...), after})
			data = data[1+n:]
			continue
		}
		if len(data) < 6 {
			break
		}
		op := wire.Opcode(data[0] & 0x1f) // RC opcodes
		psn := (start + uint32(int32(int16(binary.BigEndian.Uint16(data[1:3]))))) & 0xffffff
		syndrome, plen, fillByte := data[3], int(data[4])*16%1041, data[5]
		data = data[6:]
		dst := qpn
		if kind == 1 && len(data) > 0 {
			dst = uint32(data[0])
			data = data[1:]
		}
		if _, known := op.Info(); !known {
			continue
		}
		var p wire.Packet
		p.Eth = wire.Ethernet{Dst: [6]byte(macA), Src: [6]byte(macB)}
		p.IP = wire.IP{Src: ipB, Dst: ipA, TTL: 64, DF: true}
		p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
		p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: dst, PSN: psn, AckReq: syndrome&1 != 0}
		p.AETH = wire.AETH{Syndrome: syndrome, MSN: psn}
		p.RETH = wire.RETH{VA: uint64(psn) << 8, RKey: uint32(syndrome), Len: uint32(plen)}
		p.AtomicETH = wire.AtomicETH{VA: uint64(psn) << 3, SwapAdd: 1}
		p.AtomicAck = uint64(fillByte)
		p.Payload = bytes.Repeat([]byte{fillByte}, plen)
		buf := make([]byte, 4096+200)
		n, err := wire.Encode(buf, &p)
		if err != nil {
			continue // a combination the codec refuses (say, payload on an ACK)
		}
		if info, _ := op.Info(); info.Flags&wire.FlagRequest == 0 && op != wire.RCAck && op != wire.RCAtomicAck {
			noteRead(psn, p.Payload)
		}
		out = append(out, fuzzFrame{buf[:max(n, wire.MinFrameLen)], after})
	}
	return out
}
