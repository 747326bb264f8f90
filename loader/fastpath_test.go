package loader

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/wire"
)

// XDP verdicts (enum xdp_action).
const (
	xdpDrop = 1
	xdpTX   = 3
)

var (
	fpLocal  = netip.MustParseAddr("198.18.0.1")
	fpRemote = netip.MustParseAddr("198.18.0.2")
	fpMACA   = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	fpMACB   = [6]byte{0x02, 0, 0, 0, 0, 0xb}
)

const (
	fpQPN     = 0x123 // the responder's QP
	fpPeerQPN = 0x456 // the requester's
	fpPD      = 7
	fpRKey    = 0x00abcd01
	fpROKey   = 0x00abcd02 // a region without remote write
	fpBase    = 100        // the region's first byte in the DM block
	fpLen     = 3000
	fpEPSN    = 0x10
	fpMSN     = 5
	fpSport   = 0xc123
)

// fpRig is the program loaded (not attached) with one fast-path QP
// handed to it, over a DM block holding two regions.
type fpRig struct {
	objs *bpf.SteerObjects
	fast *FastPath
	dm   *DeviceMemory
}

// fpAck is the ACK the Go responder sends for fpQPN (its engine.header:
// TTL 64, DF, ID 0, UDP checksum 0, P_Key 0xffff, AETH unlimited credits).
func fpAck(psn, msn uint32) [FastAckLen]byte {
	p := wire.Packet{
		Eth:  wire.Ethernet{Dst: fpMACB, Src: fpMACA},
		IP:   wire.IP{Src: fpLocal, Dst: fpRemote, TTL: 64, DF: true},
		UDP:  wire.UDP{SrcPort: fpSport, DstPort: wire.UDPPort},
		BTH:  wire.BTH{Opcode: wire.RCAck, PKey: 0xffff, DestQP: fpPeerQPN, PSN: psn},
		AETH: wire.AETH{Syndrome: wire.ACKSyndrome(0x1f), MSN: msn},
	}
	var b [FastAckLen]byte
	if n, err := wire.Encode(b[:], &p); err != nil || n != FastAckLen {
		panic(err)
	}
	return b
}

func newFPRig(t testing.TB) *fpRig {
	t.Helper()
	netns.RequireRoot(t)
	objs := new(bpf.SteerObjects)
	if err := bpf.LoadSteerObjects(objs, nil); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { closeObjects(objs) })
	if err := objs.LocalAddrs.Put(fpLocal.As16(), uint8(1)); err != nil {
		t.Fatal(err)
	}
	fast, err := newFastPath(objs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fast.close() })
	dm, err := NewDeviceMemory(2 * DMPage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dm.Close() })
	idx, err := fast.AddDM(dm)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		key    uint32
		access uint32
	}{{fpRKey, FastMRRemoteWrite}, {fpROKey, 0}} {
		if err := fast.AddMR(m.key, FastMR{PD: fpPD, DM: idx, Base: fpBase, Len: fpLen, Access: m.access}); err != nil {
			t.Fatal(err)
		}
	}
	q := FastQP{Src: fpLocal.As4(), Dst: fpRemote.As4(), PD: fpPD, MTU: 1024, Flags: FastQPRemoteWrite, Ack: fpAck(0, 0)}
	q.AckCRC = FastAckCRC(&q.Ack)
	if err := fast.SetQP(fpQPN, &q); err != nil {
		t.Fatal(err)
	}
	if err := fast.HandBack(fpQPN, fpEPSN, fpMSN); err != nil {
		t.Fatal(err)
	}
	return &fpRig{objs: objs, fast: fast, dm: dm}
}

// fpWrite is a WRITE ONLY of payload at va with rkey, from the peer, as
// its Go requester encodes it.
func fpWrite(psn uint32, rkey uint32, va uint64, payload []byte) *wire.Packet {
	return &wire.Packet{
		Eth:     wire.Ethernet{Dst: fpMACA, Src: fpMACB},
		IP:      wire.IP{Src: fpRemote, Dst: fpLocal, TTL: 64, DF: true},
		UDP:     wire.UDP{SrcPort: 0xd000, DstPort: wire.UDPPort},
		BTH:     wire.BTH{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: fpQPN, AckReq: true, PSN: psn},
		RETH:    wire.RETH{VA: va, RKey: rkey, Len: uint32(len(payload))},
		Payload: payload,
	}
}

func encode(t testing.TB, p *wire.Packet) []byte {
	t.Helper()
	b := make([]byte, 9000)
	n, err := wire.Encode(b, p)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// run runs the program on frame and returns its verdict and output.
func (r *fpRig) run(t *testing.T, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	opts := ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := r.objs.XdpRoceSteer.Run(&opts)
	if err != nil {
		t.Fatalf("BPF_PROG_RUN: %v", err)
	}
	return ret, opts.DataOut
}

func (r *fpRig) counters(t testing.TB) Counters {
	t.Helper()
	c, err := readCounters(r.objs.Stats)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fpPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// TestFastPathWrite: an in-order WRITE ONLY into a device-memory region is
// written there by the program and answered with XDP_TX by the ACK the Go
// responder would send, byte for byte; ePSN and MSN move on. Without
// AckReq it is executed and dropped, with no ACK.
func TestFastPathWrite(t *testing.T) {
	r := newFPRig(t)
	payload := fpPayload(37) // odd: the frame carries pad bytes
	const va = 500
	ret, out := r.run(t, encode(t, fpWrite(fpEPSN, fpRKey, va, payload)))
	if ret != xdpTX {
		t.Fatalf("verdict %d, want XDP_TX (%d); counters %+v", ret, xdpTX, r.counters(t))
	}
	want := fpAck(fpEPSN, fpMSN+1)
	if !bytes.Equal(out, want[:]) {
		t.Errorf("ACK\n got %x\nwant %x", out, want)
	}
	var dec wire.Packet
	if err := wire.Decode(out, &dec); err != nil {
		t.Errorf("the ACK does not decode: %v", err)
	}
	if got := r.dm.Bytes()[fpBase+va : fpBase+va+len(payload)]; !bytes.Equal(got, payload) {
		t.Errorf("device memory holds %x, want %x", got, payload)
	}
	if s, _ := r.fast.State(fpQPN); s.Owner != FastOwnerXDP || s.EPSN != fpEPSN+1 || s.MSN != fpMSN+1 {
		t.Errorf("state %+v, want the program's, ePSN %#x, MSN %d", s, fpEPSN+1, fpMSN+1)
	}

	// Unsignaled (no AckReq): executed, no ACK.
	p := fpWrite(fpEPSN+1, fpRKey, 0, payload[:8])
	p.BTH.AckReq = false
	if ret, _ := r.run(t, encode(t, p)); ret != xdpDrop {
		t.Errorf("WRITE without AckReq: verdict %d, want XDP_DROP (executed)", ret)
	}
	if got := r.dm.Bytes()[fpBase : fpBase+8]; !bytes.Equal(got, payload[:8]) {
		t.Errorf("device memory holds %x, want %x", got, payload[:8])
	}
	c := r.counters(t)
	if c.FastPlaced != 2 || c.FastAcked != 1 || c.NoSocket != 0 || c.Redirected != 0 {
		t.Errorf("counters %+v: want 2 placed, 1 acked, none steered", c)
	}
	if s, _ := r.fast.State(fpQPN); s.EPSN != fpEPSN+2 || s.MSN != fpMSN+2 {
		t.Errorf("state %+v after the second WRITE", s)
	}
}

// TestFastPathSentAck: the program records the PSN of each ACK it sends
// (SentAck), and only of those: a WRITE without AckReq leaves the record,
// so the engine can tell a lazy requester's ask (a duplicate of that
// WRITE) from a sign that the program's ACKs are lost
// (engine's fastDuplicate). SetQP forgets it.
func TestFastPathSentAck(t *testing.T) {
	r := newFPRig(t)
	if _, ok, err := r.fast.SentAck(fpQPN); err != nil || ok {
		t.Fatalf("before any WRITE: ok %v, err %v; want none sent", ok, err)
	}
	if ret, _ := r.run(t, encode(t, fpWrite(fpEPSN, fpRKey, 0, fpPayload(8)))); ret != xdpTX {
		t.Fatalf("verdict %d, want XDP_TX", ret)
	}
	if psn, ok, err := r.fast.SentAck(fpQPN); err != nil || !ok || psn != fpEPSN {
		t.Fatalf("after an ACK of %#x: SentAck %#x %v %v", fpEPSN, psn, ok, err)
	}
	p := fpWrite(fpEPSN+1, fpRKey, 0, fpPayload(8))
	p.BTH.AckReq = false
	if ret, _ := r.run(t, encode(t, p)); ret != xdpDrop {
		t.Fatalf("WRITE without AckReq: verdict %d, want XDP_DROP", ret)
	}
	if psn, ok, _ := r.fast.SentAck(fpQPN); !ok || psn != fpEPSN {
		t.Errorf("after a WRITE without AckReq: SentAck %#x %v, want %#x still", psn, ok, fpEPSN)
	}
	if _, _, err := r.fast.TakeOver(fpQPN); err != nil {
		t.Fatal(err)
	}
	q := FastQP{Src: fpLocal.As4(), Dst: fpRemote.As4(), PD: fpPD, MTU: 1024, Flags: FastQPRemoteWrite, Ack: fpAck(0, 0)}
	q.AckCRC = FastAckCRC(&q.Ack)
	if err := r.fast.SetQP(fpQPN, &q); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := r.fast.SentAck(fpQPN); ok {
		t.Error("SetQP kept the last configuration's ACK")
	}
}

// TestFastPathWriteSizes: WRITEs of every length class the program's
// word loops split differently (ICRC eight bytes a step, then four; the
// copy eight bytes a step, then bytes) land exactly where RETH says, at
// an odd offset, leaving the bytes around them; each is acknowledged.
func TestFastPathWriteSizes(t *testing.T) {
	r := newFPRig(t)
	psn, msn := uint32(fpEPSN), uint32(fpMSN)
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 33, 63, 64, 65, 100, 127, 200, 255, FastMaxPayload} {
		const va = 1001
		mem := r.dm.Bytes()[fpBase:]
		clear(mem[:4096-fpBase])
		payload := fpPayload(n)
		ret, out := r.run(t, encode(t, fpWrite(psn, fpRKey, va, payload)))
		msn++
		if want := fpAck(psn, msn); ret != xdpTX || !bytes.Equal(out, want[:]) {
			t.Fatalf("%d B: verdict %d, ACK %x, want %x", n, ret, out, want)
		}
		psn++
		if !bytes.Equal(mem[va:va+n], payload) {
			t.Errorf("%d B: device memory holds %x, want %x", n, mem[va:va+n], payload)
		}
		if !bytes.Equal(mem[va-16:va], make([]byte, 16)) || !bytes.Equal(mem[va+n:va+n+16], make([]byte, 16)) {
			t.Errorf("%d B: bytes around the region written", n)
		}
	}
}

// TestPlainProgramHasNoFastPath: xdp_roce_plain, which the loader attaches
// where the kernel refuses the fast path (6.1), steers the WRITE the fast
// path would execute to AF_XDP (here: no socket, dropped and counted) and
// touches neither device memory nor the QP's state.
func TestPlainProgramHasNoFastPath(t *testing.T) {
	r := newFPRig(t)
	payload := fpPayload(16)
	out := make([]byte, 1024)
	opts := ebpf.RunOptions{Data: encode(t, fpWrite(fpEPSN, fpRKey, 0, payload)), DataOut: out}
	ret, err := r.objs.XdpRocePlain.Run(&opts)
	if err != nil {
		t.Fatalf("BPF_PROG_RUN: %v", err)
	}
	if ret != xdpDrop {
		t.Fatalf("verdict %d, want XDP_DROP (steered, no socket)", ret)
	}
	if c := r.counters(t); c.FastPlaced != 0 || c.FastAcked != 0 || c.NoSocket != 1 {
		t.Errorf("counters %+v: want none placed, one steered to the missing socket", c)
	}
	if got := r.dm.Bytes()[fpBase : fpBase+len(payload)]; bytes.Equal(got, payload) {
		t.Error("device memory holds the payload: the plain program ran the fast path")
	}
	if s, _ := r.fast.State(fpQPN); s.EPSN != fpEPSN || s.MSN != fpMSN {
		t.Errorf("state %+v moved", s)
	}
}

// TestFastPathRefuses: a frame failing any one check goes on to AF_XDP
// (here: no socket, so steer drops and counts it), counted under the check
// it failed; neither the QP's state nor device memory changes.
func TestFastPathRefuses(t *testing.T) {
	payload := fpPayload(64)
	good := func() *wire.Packet { return fpWrite(fpEPSN, fpRKey, 8, payload) }
	cases := []struct {
		name    string
		frame   func(t *testing.T, r *fpRig) []byte
		counter func(c Counters) uint64
		steered bool // reaches steer's redirect (else dropped as malformed)
	}{
		{"bad ICRC", func(t *testing.T, r *fpRig) []byte {
			b := encode(t, good())
			b[len(b)-1] ^= 0x40
			return b
		}, func(c Counters) uint64 { return c.FastICRC }, true},
		{"payload corrupted", func(t *testing.T, r *fpRig) []byte {
			b := encode(t, good())
			b[14+20+8+12+16+3] ^= 1
			return b
		}, func(c Counters) uint64 { return c.FastICRC }, true},
		{"PSN past ePSN", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN+1, fpRKey, 8, payload))
		}, func(c Counters) uint64 { return c.FastPSN }, true},
		{"duplicate", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN-1, fpRKey, 8, payload))
		}, func(c Counters) uint64 { return c.FastPSN }, true},
		{"bad rkey", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN, fpRKey+0x100, 8, payload))
		}, func(c Counters) uint64 { return c.FastRKey }, true},
		{"region without remote write", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN, fpROKey, 8, payload))
		}, func(c Counters) uint64 { return c.FastAccess }, true},
		{"QP without remote write", func(t *testing.T, r *fpRig) []byte {
			r.setQPFlags(t, 0)
			return encode(t, good())
		}, func(c Counters) uint64 { return c.FastAccess }, true},
		{"past the region", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN, fpRKey, fpLen-10, payload))
		}, func(c Counters) uint64 { return c.FastBounds }, true},
		{"va wraps", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN, fpRKey, ^uint64(0)-10, payload))
		}, func(c Counters) uint64 { return c.FastBounds }, true},
		{"across a page", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN, fpRKey, DMPage-fpBase-10, payload))
		}, func(c Counters) uint64 { return c.FastBounds }, true},
		{"Go owns the QP", func(t *testing.T, r *fpRig) []byte {
			if _, _, err := r.fast.TakeOver(fpQPN); err != nil {
				t.Fatal(err)
			}
			return encode(t, good())
		}, func(c Counters) uint64 { return c.FastGoOwned }, true},
		{"SEND ONLY", func(t *testing.T, r *fpRig) []byte {
			p := good()
			p.BTH.Opcode, p.RETH = wire.RCSendOnly, wire.RETH{}
			return encode(t, p)
		}, func(c Counters) uint64 { return c.FastOtherOp }, true},
		{"RETH length not the payload's", func(t *testing.T, r *fpRig) []byte {
			p := good()
			p.RETH.Len++
			return encode(t, p)
		}, func(c Counters) uint64 { return c.FastLength }, true},
		{"larger than the fast path takes", func(t *testing.T, r *fpRig) []byte {
			return encode(t, fpWrite(fpEPSN, fpRKey, 8, fpPayload(FastMaxPayload+4)))
		}, func(c Counters) uint64 { return c.FastLength }, true},
		{"from another address", func(t *testing.T, r *fpRig) []byte {
			p := good()
			p.IP.Src = netip.MustParseAddr("198.18.0.9")
			return encode(t, p)
		}, func(c Counters) uint64 { return c.FastHeader }, true},
		{"no room for the RETH", func(t *testing.T, r *fpRig) []byte {
			p := good()
			p.BTH.Opcode, p.RETH, p.Payload = wire.RCSendOnly, wire.RETH{}, payload[:4]
			b := encode(t, p)
			b[14+20+8] = byte(wire.RCWriteOnly)
			return b
		}, func(c Counters) uint64 { return c.FastTruncated }, true},
		{"bad IPv4 header checksum (TOS changed: the ICRC does not cover it)", func(t *testing.T, r *fpRig) []byte {
			b := encode(t, good())
			b[14+1] = 0x20
			return b
		}, func(c Counters) uint64 { return c.FastHeader }, true},
		{"TTL 0", func(t *testing.T, r *fpRig) []byte {
			p := good()
			p.IP.TTL = 1
			b := encode(t, p)
			b[14+8] = 0 // TTL 1 -> 0: the checksum's word 4 drops by 0x100
			sum := uint16(b[14+10])<<8 | uint16(b[14+11])
			sum += 0x100
			b[14+10], b[14+11] = byte(sum>>8), byte(sum)
			return b
		}, func(c Counters) uint64 { return c.FastHeader }, true},
		{"pad byte not zero", func(t *testing.T, r *fpRig) []byte {
			b := encode(t, fpWrite(fpEPSN, fpRKey, 8, payload[:61]))
			b[len(b)-4-1] = 1
			icrc, err := wire.ICRC(b)
			if err != nil {
				t.Fatal(err)
			}
			binary.LittleEndian.PutUint32(b[len(b)-4:], icrc)
			return b
		}, func(c Counters) uint64 { return c.FastHeader }, true},
		{"cut short", func(t *testing.T, r *fpRig) []byte {
			b := encode(t, good())
			return b[:len(b)-20]
		}, func(c Counters) uint64 { return c.Malformed }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newFPRig(t)
			frame := tc.frame(t, r)
			before, _ := r.fast.State(fpQPN)
			ret, out := r.run(t, frame)
			c := r.counters(t)
			if ret == xdpTX || c.FastPlaced != 0 || c.FastAcked != 0 {
				t.Fatalf("verdict %d, counters %+v: the fast path took it", ret, c)
			}
			if ret != xdpDrop || !bytes.Equal(out, frame) {
				t.Errorf("verdict %d (want steer's XDP_DROP for a queue without socket), frame changed %v", ret, !bytes.Equal(out, frame))
			}
			if tc.counter(c) != 1 {
				t.Errorf("counters %+v: the failed check not counted once", c)
			}
			if steered := c.NoSocket == 1; steered != tc.steered {
				t.Errorf("counters %+v: reached the socket redirect %v, want %v", c, steered, tc.steered)
			}
			if s, _ := r.fast.State(fpQPN); s != before {
				t.Errorf("state %+v, was %+v", s, before)
			}
			if !bytes.Equal(r.dm.Bytes(), make([]byte, len(r.dm.Bytes()))) {
				t.Error("device memory written")
			}
		})
	}
}

func (r *fpRig) setQPFlags(t testing.TB, flags uint32) {
	t.Helper()
	s, _, err := r.fast.TakeOver(fpQPN)
	if err != nil {
		t.Fatal(err)
	}
	q := FastQP{Src: fpLocal.As4(), Dst: fpRemote.As4(), PD: fpPD, MTU: 1024, Flags: flags, Ack: fpAck(0, 0)}
	q.AckCRC = FastAckCRC(&q.Ack)
	if err := r.fast.SetQP(fpQPN, &q); err != nil {
		t.Fatal(err)
	}
	if err := r.fast.HandBack(fpQPN, s.EPSN, s.MSN); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFastPathProgram: the program's own time (BPF_PROG_RUN's
// measurement, no system call) on a WRITE the fast path executes and
// acknowledges against the same frame for a QP Go owns (steered to
// AF_XDP, as every frame is without the fast path), by payload size.
func BenchmarkFastPathProgram(b *testing.B) {
	for _, size := range []int{8, 64, FastMaxPayload} {
		for _, fast := range []bool{true, false} {
			name := fmt.Sprintf("%dB/steered", size)
			if fast {
				name = fmt.Sprintf("%dB/fast", size)
			}
			b.Run(name, func(b *testing.B) {
				r := newFPRig(b)
				frame := encode(b, fpWrite(fpEPSN, fpRKey, 8, fpPayload(size)))
				want := uint32(xdpTX)
				if !fast {
					want = xdpDrop // steered: no socket in BPF_PROG_RUN
				}
				var total time.Duration
				for b.Loop() {
					if _, _, err := r.fast.TakeOver(fpQPN); err != nil {
						b.Fatal(err)
					}
					if fast {
						if err := r.fast.HandBack(fpQPN, fpEPSN, fpMSN); err != nil {
							b.Fatal(err)
						}
					}
					ret, d, err := r.objs.XdpRoceSteer.Benchmark(frame, 1, nil)
					if err != nil || ret != want {
						b.Fatalf("verdict %d, %v", ret, err)
					}
					total += d
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "prog-ns/op")
			})
		}
	}
}

// FuzzFastPath runs the program on mutations of a WRITE the fast path
// executes. Whatever the frame, the program either executes it exactly as
// the codec reads it — a WRITE ONLY with a good ICRC at ePSN to the
// region, its payload where RETH says, the ACK the Go responder's with the
// next MSN, or no ACK without AckReq — or leaves the QP's state and device
// memory untouched. With reseal the mutated frame's ICRC is computed anew
// (where its IPv4 lengths allow), so that mutations reach the checks
// behind the ICRC.
func FuzzFastPath(f *testing.F) {
	payload := fpPayload(40)
	f.Add(encode(f, fpWrite(fpEPSN, fpRKey, 8, payload)), false)
	f.Add(encode(f, fpWrite(fpEPSN, fpRKey, fpLen-40, payload)), true)
	noAck := fpWrite(fpEPSN, fpRKey, 100, payload[:3])
	noAck.BTH.AckReq = false
	f.Add(encode(f, noAck), true)
	r := newFPRig(f)
	mem := r.dm.Bytes()
	f.Fuzz(func(t *testing.T, frame []byte, reseal bool) {
		if len(frame) < 14 || len(frame) > 4000 {
			return // BPF_PROG_RUN refuses less than an Ethernet header; no link delivers it
		}
		if reseal && len(frame) >= 14+20 {
			if end := 14 + (int(frame[16])<<8 | int(frame[17])); end >= 14+20+8+4 && end <= len(frame) {
				if icrc, err := wire.ICRC(frame); err == nil {
					binary.LittleEndian.PutUint32(frame[end-4:], icrc)
				}
			}
		}
		if _, _, err := r.fast.TakeOver(fpQPN); err != nil {
			t.Fatal(err)
		}
		if err := r.fast.HandBack(fpQPN, fpEPSN, fpMSN); err != nil {
			t.Fatal(err)
		}
		clear(mem)
		before := r.counters(t)
		ret, out := r.run(t, frame)
		c := r.counters(t)
		s, _ := r.fast.State(fpQPN)
		if c.FastPlaced == before.FastPlaced {
			if ret == xdpTX || s.EPSN != fpEPSN || s.MSN != fpMSN || s.Owner != FastOwnerXDP {
				t.Fatalf("not executed, yet verdict %d, state %+v", ret, s)
			}
			if !bytes.Equal(mem, make([]byte, len(mem))) {
				t.Fatal("not executed, yet device memory written")
			}
			return
		}
		var p wire.Packet
		if err := wire.Decode(frame, &p); err != nil {
			t.Fatalf("executed a frame the codec refuses: %v", err)
		}
		n := uint64(len(p.Payload))
		if p.BTH.Opcode != wire.RCWriteOnly || p.BTH.PSN != fpEPSN || p.BTH.DestQP != fpQPN || p.RETH.RKey != fpRKey ||
			p.IP.Src != fpRemote || p.IP.Dst != fpLocal || n == 0 || uint64(p.RETH.Len) != n || p.RETH.VA+n > fpLen {
			t.Fatalf("executed %+v", p)
		}
		if got := mem[fpBase+p.RETH.VA : fpBase+p.RETH.VA+n]; !bytes.Equal(got, p.Payload) {
			t.Fatalf("device memory holds %x, the payload is %x", got, p.Payload)
		}
		if s.EPSN != fpEPSN+1 || s.MSN != fpMSN+1 || s.Owner != FastOwnerXDP {
			t.Fatalf("state %+v after executing", s)
		}
		if !p.BTH.AckReq {
			if ret != xdpDrop {
				t.Fatalf("verdict %d without AckReq", ret)
			}
			return
		}
		if want := fpAck(fpEPSN, fpMSN+1); ret != xdpTX || !bytes.Equal(out, want[:]) {
			t.Fatalf("verdict %d, ACK %x, want %x", ret, out, want)
		}
	})
}

// fpPeerAck is an ACK the peer's responder sends to fpQPN's requester.
func fpPeerAck(psn, msn uint32, syndrome uint8) *wire.Packet {
	return &wire.Packet{
		Eth:  wire.Ethernet{Dst: fpMACA, Src: fpMACB},
		IP:   wire.IP{Src: fpRemote, Dst: fpLocal, TTL: 64, DF: true},
		UDP:  wire.UDP{SrcPort: 0xd000, DstPort: wire.UDPPort},
		BTH:  wire.BTH{Opcode: wire.RCAck, PKey: 0xffff, DestQP: fpQPN, PSN: psn},
		AETH: wire.AETH{Syndrome: syndrome, MSN: msn},
	}
}

// TestFastPathAck: for a QP whose requester takes ACKs from the program,
// an ACK is published (its PSN and MSN, the count moving on) and dropped;
// while an engine sleeps it is published and passed on as well, to wake
// it. A NAK, a bad ICRC, or a QP without the flag: nothing published,
// passed on.
func TestFastPathAck(t *testing.T) {
	r := newFPRig(t)
	r.setQPFlags(t, FastQPRemoteWrite|FastQPRequester)
	if err := r.fast.SetSendWindow(fpQPN, 0x2f0, 0x310, true); err != nil {
		t.Fatal(err)
	}
	ack := fpPeerAck(0x300, 9, wire.ACKSyndrome(0x1f))
	if ret, _ := r.run(t, encode(t, ack)); ret != xdpDrop {
		t.Fatalf("verdict %d", ret)
	}
	c := r.counters(t)
	if n, psn, msn, _ := r.fast.Acked(fpQPN); n != 1 || psn != 0x300 || msn != 9 || c.FastAckConsumed != 1 || c.NoSocket != 0 {
		t.Fatalf("published #%d PSN %#x MSN %d; counters %+v", n, psn, msn, c)
	}
	r.fast.Sleeping(true)
	ack.BTH.PSN, ack.AETH.MSN = 0x301, 10
	r.run(t, encode(t, ack))
	r.fast.Sleeping(false)
	c = r.counters(t)
	if n, psn, msn, _ := r.fast.Acked(fpQPN); n != 2 || psn != 0x301 || msn != 10 || c.FastAckWake != 1 || c.NoSocket != 1 {
		t.Fatalf("with an engine asleep: published #%d PSN %#x MSN %d; counters %+v", n, psn, msn, c)
	}
	nak := encode(t, fpPeerAck(0x302, 10, wire.NAKSyndrome(wire.NAKPSNSequenceError)))
	bad := encode(t, fpPeerAck(0x303, 11, wire.ACKSyndrome(0x1f)))
	bad[len(bad)-2] ^= 1
	for _, f := range [][]byte{nak, bad} {
		r.run(t, f)
	}
	c = r.counters(t)
	if n, _, _, _ := r.fast.Acked(fpQPN); n != 2 || c.FastAckOther != 1 || c.FastICRC != 1 || c.NoSocket != 3 {
		t.Fatalf("a NAK and a bad ICRC: published #%d; counters %+v", n, c)
	}
	r.setQPFlags(t, FastQPRemoteWrite)
	r.run(t, encode(t, fpPeerAck(0x304, 12, wire.ACKSyndrome(0x1f))))
	if n, _, _, _ := r.fast.Acked(fpQPN); n != 2 || r.counters(t).NoSocket != 4 {
		t.Fatal("an ACK of a QP whose requester is the engine's was published or not passed on")
	}
}

// TestFastPathAckRefuses: an ACK with a valid ICRC from the peer's address
// is taken into the requester's record only if the completer would admit
// it: its PSN in the window the engine published ([oldest, end)), and not
// behind the ACK taken last. Any other — forged, or an old copy — would
// hide the real ACK the engine has not read yet (costing a
// retransmission); it goes on to AF_XDP, counted, the record unchanged.
func TestFastPathAckRefuses(t *testing.T) {
	const oldest, end = 0xfffff0, 0x10 // the window wraps
	cases := []struct {
		name     string
		psn, msn uint32
	}{
		{"PSN not sent yet", end, 40},
		{"PSN far ahead", 0x400000, 40},
		{"behind the window", oldest - 1, 40},
		{"far behind", 0x800010, 40},
		{"behind the ACK taken last", 0xfffffa, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newFPRig(t)
			r.setQPFlags(t, FastQPRemoteWrite|FastQPRequester)
			if err := r.fast.SetSendWindow(fpQPN, oldest, end, true); err != nil {
				t.Fatal(err)
			}
			// The real ACK, not read by the engine yet.
			if ret, _ := r.run(t, encode(t, fpPeerAck(0xfffffc, 30, wire.ACKSyndrome(0x1f)))); ret != xdpDrop || r.counters(t).FastAckConsumed != 1 {
				t.Fatalf("the in-window ACK: verdict %d, counters %+v", ret, r.counters(t))
			}
			frame := encode(t, fpPeerAck(tc.psn, tc.msn, wire.ACKSyndrome(0x1f)))
			ret, out := r.run(t, frame)
			c := r.counters(t)
			if n, psn, msn, _ := r.fast.Acked(fpQPN); n != 1 || psn != 0xfffffc || msn != 30 {
				t.Errorf("record #%d PSN %#x MSN %d: the ACK at %#x replaced the one taken", n, psn, msn, tc.psn)
			}
			if ret != xdpDrop || !bytes.Equal(out, frame) || c.NoSocket != 1 || c.FastAckConsumed != 1 {
				t.Errorf("verdict %d, counters %+v: want it passed on to the (absent) socket unchanged", ret, c)
			}
			if c.FastAckWindow != 1 {
				t.Errorf("counters %+v: the refusal not counted once", c)
			}
		})
	}
	// Within the window and not behind: taken, the wrap included.
	r := newFPRig(t)
	r.setQPFlags(t, FastQPRemoteWrite|FastQPRequester)
	if err := r.fast.SetSendWindow(fpQPN, oldest, end, true); err != nil {
		t.Fatal(err)
	}
	for i, psn := range []uint32{oldest, 0xfffffc, 0xfffffc, 0x2, end - 1} {
		r.run(t, encode(t, fpPeerAck(psn, uint32(i), wire.ACKSyndrome(0x1f))))
		if n, got, _, _ := r.fast.Acked(fpQPN); n != uint16(i+1) || got != psn {
			t.Fatalf("ACK %d at %#x: record #%d PSN %#x", i, psn, n, got)
		}
	}
	if c := r.counters(t); c.FastAckWindow != 0 || c.NoSocket != 0 {
		t.Errorf("counters %+v: an in-window ACK refused", c)
	}
}

// FuzzFastPathAck runs the program on mutations of an ACK to a requester
// that takes ACKs from it, after a real one in the window was taken.
// Whatever the frame, the program either publishes it exactly as the
// engine's codec reads it — a plain ACK (not a NAK) from the peer to the
// QP, its PSN in the published window and not behind the ACK taken — or
// leaves the record as it was. With reseal the ICRC is computed anew, so
// that mutations reach the checks behind it.
func FuzzFastPathAck(f *testing.F) {
	const oldest, end, taken = 0x100, 0x140, 0x110
	f.Add(encode(f, fpPeerAck(0x120, 7, wire.ACKSyndrome(0x1f))), false)
	f.Add(encode(f, fpPeerAck(0x150, 7, wire.ACKSyndrome(0x1f))), true)
	f.Add(encode(f, fpPeerAck(0x108, 7, wire.ACKSyndrome(0x1f))), true)
	f.Add(encode(f, fpPeerAck(0x120, 7, wire.NAKSyndrome(wire.NAKPSNSequenceError))), true)
	r := newFPRig(f)
	r.setQPFlags(f, FastQPRemoteWrite|FastQPRequester)
	real := encode(f, fpPeerAck(taken, 5, wire.ACKSyndrome(0x1f)))
	f.Fuzz(func(t *testing.T, frame []byte, reseal bool) {
		if len(frame) < 14 || len(frame) > 4000 {
			return
		}
		if reseal && len(frame) >= 14+20 {
			if e := 14 + (int(frame[16])<<8 | int(frame[17])); e >= 14+20+8+4 && e <= len(frame) {
				if icrc, err := wire.ICRC(frame); err == nil {
					binary.LittleEndian.PutUint32(frame[e-4:], icrc)
				}
			}
		}
		if err := r.fast.SetSendWindow(fpQPN, oldest, end, true); err != nil {
			t.Fatal(err)
		}
		if ret, _ := r.run(t, real); ret != xdpDrop {
			t.Fatalf("the real ACK: verdict %d", ret)
		}
		n0, psn0, msn0, _ := r.fast.Acked(fpQPN)
		r.run(t, frame)
		n, psn, msn, _ := r.fast.Acked(fpQPN)
		if n == n0 {
			if psn != psn0 || msn != msn0 {
				t.Fatalf("record changed without its count: %#x/%d, was %#x/%d", psn, msn, psn0, msn0)
			}
			return
		}
		var p wire.Packet
		if err := wire.Decode(frame, &p); err != nil {
			t.Fatalf("published a frame the codec refuses: %v", err)
		}
		if p.BTH.Opcode != wire.RCAck || !p.AETH.IsACK() || p.BTH.DestQP != fpQPN || p.IP.Src != fpRemote || p.IP.Dst != fpLocal {
			t.Fatalf("published %+v", p)
		}
		if n != n0+1 || psn != p.BTH.PSN || msn != p.AETH.MSN {
			t.Fatalf("record #%d %#x/%d for ACK %#x/%d (was #%d)", n, psn, msn, p.BTH.PSN, p.AETH.MSN, n0)
		}
		if psn < taken || psn >= end {
			t.Fatalf("published PSN %#x outside [%#x, %#x)", psn, taken, end)
		}
	})
}

// BenchmarkFastPathAckProgram: the requester's program on the ACK of a
// fast-path WRITE, consumed (published to the record and dropped) against
// the same ACK for a QP whose requester the engine serves (steered to
// AF_XDP). Beside BenchmarkFastPathProgram it prices each leg of the
// device-memory round trip in XDP.
func BenchmarkFastPathAckProgram(b *testing.B) {
	for _, consumed := range []bool{true, false} {
		name := "steered"
		if consumed {
			name = "consumed"
		}
		b.Run(name, func(b *testing.B) {
			r := newFPRig(b)
			flags := uint32(FastQPRemoteWrite)
			if consumed {
				flags |= FastQPRequester
			}
			r.setQPFlags(b, flags)
			// A window wide enough for every ACK of the loop: each names
			// the next PSN, as a stream's would.
			if err := r.fast.SetSendWindow(fpQPN, 0, 0x2000, true); err != nil {
				b.Fatal(err)
			}
			frames := make([][]byte, 4096)
			for i := range frames {
				frames[i] = encode(b, fpPeerAck(uint32(i+1), uint32(i+1), wire.ACKSyndrome(0x1f)))
			}
			var total time.Duration
			i := 0
			for b.Loop() {
				ret, d, err := r.objs.XdpRoceSteer.Benchmark(frames[i%len(frames)], 1, nil)
				if err != nil || ret != xdpDrop {
					b.Fatalf("verdict %d, %v", ret, err)
				}
				total += d
				i++
				if i%len(frames) == 0 && consumed {
					b.StopTimer()
					// The record only moves forward: start the PSNs again.
					r.setQPFlags(b, flags)
					if err := r.fast.SetSendWindow(fpQPN, 0, 0x2000, true); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
			if c := r.counters(b); consumed != (c.FastAckConsumed == uint64(b.N)) {
				b.Fatalf("%d ACKs consumed of %d", c.FastAckConsumed, b.N)
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "prog-ns/op")
		})
	}
}
