package verbs

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// FuzzTransport runs a legitimate transfer from a to b — a WRITE, a SEND
// and a READ, 8 KiB each at PMTU 1024 — while fuzzer-chosen frames, spoofed
// from b, reach a between the engines' steps: responses of any opcode,
// syndrome, PSN and payload, stray requests, and raw bytes. Both engines run
// on the test goroutine with a fake clock, so every input replays exactly.
//
// Invariants: no panic; the transfer ends within 60 s of simulated time
// (each WR completes, with success or an error: a forged NAK inside the
// window may fail it, as on any RoCE link); a's memory changes only where
// the READ lands (its region has no remote rights); a READ that succeeds
// holds b's bytes unless a forged READ response had a PSN inside it; a
// WRITE or SEND that succeeds left b's bytes right.
func FuzzTransport(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0x11, 0, 0, 0x00, 0, 0})                      // an ACK at PSN 0
	f.Add([]byte{0, 0x11, 0, 3, 0x60, 0, 0, 1, 0x10, 2, 0, 5, 0}) // a NAK, then an ACK ahead
	f.Add([]byte{0, 0x10, 0, 16, 0, 0, 64, 1, 0x0f, 0, 17, 0, 0}) // READ responses inside the READ
	f.Add([]byte{0, 0x12, 0, 24, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0})   // atomic ACK, WRITE_ONLY request
	f.Add([]byte{2, 40, 1, 2, 3, 4, 5, 6, 7, 8})                  // raw bytes
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzTransport(t, data)
	})
}

func fuzzTransport(t *testing.T, data []byte) {
	const size = 8 << 10
	clk := NewFakeClock(time.Unix(1e9, 0))
	la, lb := NewMemLinkPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr, access Access) *node {
		n := newNode(t, newDeviceWith(t, l, mac, ip, DeviceConfig{ActiveMTU: 4096, Clock: clk, AckHold: -1}), 4*size)
		mr, err := n.pd.AllocMR(4*size, access)
		must(t, err)
		n.mr = mr
		return n
	}
	a := mk(la, macA, ipA, AccessLocalWrite)
	b := mk(lb, macB, ipB, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU1024, timeout: 10, retry: 7, rnr: 7})
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
	// The READ's PSNs: after 8 WRITE and 8 SEND packets, from 16 to 23.
	forgedIntoRead := false
	frames := fuzzFrames(t, data, a.qp.QPN(), func(psn uint32) { forgedIntoRead = forgedIntoRead || psn >= 16 && psn <= 23 })
	var wcs []WorkCompletion
	buf := make([]WorkCompletion, 8)
	done := func() bool {
		// One forged frame per engine round, between the transfer's packets.
		if len(frames) > 0 {
			la.deliver(frames[:1])
			frames = frames[1:]
		}
		n := a.scq.Poll(buf)
		wcs = append(wcs, buf[:n]...)
		return len(wcs) == 3 && len(frames) == 0
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
	if ok[3] && !forgedIntoRead && !bytes.Equal(got[3*size:], wantA[3*size:]) {
		t.Fatalf("the READ succeeded with bytes that b did not send")
	}
	if ok[1] && !bytes.Equal(b.mr.Bytes()[size:2*size], wantB[size:2*size]) {
		t.Fatalf("the WRITE succeeded but b's target is wrong")
	}
	if ok[2] && !bytes.Equal(b.mr.Bytes()[2*size:3*size], wantB[2*size:3*size]) {
		t.Fatalf("the SEND succeeded but b's target is wrong")
	}
}

// fuzzFrames turns fuzz input into frames for a's QP, spoofed from b. Each
// record starts with a kind byte: 0 a well-formed frame (opcode, 16-bit
// PSN, AETH syndrome, payload length in 16-byte units, then a fill byte),
// 1 the same with a random destination QPN, 2 raw bytes (length, bytes).
// noteRead is told the PSN of every forged READ response.
func fuzzFrames(t *testing.T, data []byte, qpn uint32, noteRead func(psn uint32)) [][]byte {
	var out [][]byte
	for len(data) > 0 && len(out) < 64 {
		kind := data[0] % 3
		data = data[1:]
		if kind == 2 {
			if len(data) == 0 {
				break
			}
			n := min(int(data[0]), len(data)-1)
			out = append(out, append([]byte(nil), data[1:1+n]...))
			data = data[1+n:]
			continue
		}
		if len(data) < 6 {
			break
		}
		op := wire.Opcode(data[0] & 0x1f) // RC opcodes
		psn := uint32(binary.BigEndian.Uint16(data[1:3]))
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
			noteRead(psn)
		}
		out = append(out, buf[:max(n, wire.MinFrameLen)])
	}
	return out
}
