package impair

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// frameSpec builds test frames.
type frameSpec struct {
	tags     []uint16 // TPIDs of in-band VLAN tags
	v6       bool
	ihl      int // IPv4 header words (default 5)
	proto    byte
	fragOff  uint16 // IPv4 flags+offset field
	port     uint16
	payload  int
	udpLen   int // 0: correct
	version  byte
	checksum uint16
}

func (s frameSpec) build() []byte {
	if s.ihl == 0 {
		s.ihl = 5
	}
	if s.proto == 0 {
		s.proto = ipProtocolUDP
	}
	b := make([]byte, 12, 128+s.payload)
	for i := range b {
		b[i] = byte(i + 1)
	}
	for i, tpid := range s.tags {
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, uint16(100+i))
	}
	if s.v6 {
		b = binary.BigEndian.AppendUint16(b, etherTypeIPv6)
		ip := make([]byte, ipv6HeaderLen)
		ip[0] = 0x60
		if s.version != 0 {
			ip[0] = s.version << 4
		}
		binary.BigEndian.PutUint16(ip[4:6], uint16(8+s.payload))
		ip[6] = s.proto
		ip[7] = 64
		b = append(b, ip...)
	} else {
		b = binary.BigEndian.AppendUint16(b, etherTypeIPv4)
		ip := make([]byte, s.ihl*4)
		ip[0] = 0x40 | byte(s.ihl&0x0F)
		if s.version != 0 {
			ip[0] = s.version<<4 | byte(s.ihl&0x0F)
		}
		binary.BigEndian.PutUint16(ip[2:4], uint16(s.ihl*4+8+s.payload))
		binary.BigEndian.PutUint16(ip[6:8], s.fragOff)
		ip[8] = 64
		ip[9] = s.proto
		b = append(b, ip...)
	}
	udpLen := 8 + s.payload
	if s.udpLen != 0 {
		udpLen = s.udpLen
	}
	b = binary.BigEndian.AppendUint16(b, 0xC000)
	b = binary.BigEndian.AppendUint16(b, s.port)
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = binary.BigEndian.AppendUint16(b, s.checksum)
	for i := range s.payload {
		b = append(b, byte(i*7))
	}
	return b
}

func TestParseRoCE(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       frameSpec
		ok         bool
		payload    int
		payloadLen int
	}{
		{"ipv4", frameSpec{port: 4791, payload: 40}, true, 14 + 20 + 8, 40},
		{"ipv6", frameSpec{v6: true, port: 4791, payload: 40}, true, 14 + 40 + 8, 40},
		{"ipv4 options", frameSpec{ihl: 7, port: 4791, payload: 40}, true, 14 + 28 + 8, 40},
		{"vlan", frameSpec{tags: []uint16{0x8100}, port: 4791, payload: 40}, true, 18 + 20 + 8, 40},
		{"qinq", frameSpec{tags: []uint16{0x88A8, 0x8100}, port: 4791, payload: 40}, true, 22 + 20 + 8, 40},
		{"three tags", frameSpec{tags: []uint16{0x88A8, 0x8100, 0x8100}, port: 4791, payload: 40}, false, 0, 0},
		{"other port", frameSpec{port: 4792, payload: 40}, false, 0, 0},
		{"tcp", frameSpec{proto: 6, port: 4791, payload: 40}, false, 0, 0},
		{"first fragment", frameSpec{fragOff: ipv4FlagMF, port: 4791, payload: 40}, false, 0, 0},
		{"later fragment", frameSpec{fragOff: 3, port: 4791, payload: 40}, false, 0, 0},
		{"DF is fine", frameSpec{fragOff: 0x4000, port: 4791, payload: 40}, true, 14 + 20 + 8, 40},
		{"ihl 4", frameSpec{ihl: 4, port: 4791, payload: 40}, false, 0, 0},
		{"version 6 in IPv4", frameSpec{version: 6, port: 4791, payload: 40}, false, 0, 0},
		{"ipv6 next header tcp", frameSpec{v6: true, proto: 6, port: 4791, payload: 40}, false, 0, 0},
		{"udp length too big", frameSpec{port: 4791, payload: 40, udpLen: 100}, true, 14 + 20 + 8, 0},
		{"udp length too small", frameSpec{port: 4791, payload: 40, udpLen: 7}, true, 14 + 20 + 8, 0},
		{"udp length short of frame", frameSpec{port: 4791, payload: 40, udpLen: 20}, true, 14 + 20 + 8, 12},
	} {
		b := tc.spec.build()
		f, ok := parseRoCE(b)
		if ok != tc.ok || (ok && (f.payload != tc.payload || f.payloadLen != tc.payloadLen)) {
			t.Errorf("%s: got %+v ok=%v, want payload %d len %d ok=%v", tc.name, f, ok, tc.payload, tc.payloadLen, tc.ok)
		}
		// Every truncation is handled without panicking.
		for n := range len(b) {
			if f, ok := parseRoCE(b[:n]); ok && f.payload+f.payloadLen > n {
				t.Fatalf("%s truncated to %d: payload beyond the end", tc.name, n)
			}
		}
	}
}

// TestClassifierMatchesBPF runs the divert program (BPF_PROG_TEST_RUN) and
// parseRoCE on the same frames: the two must agree on every one, or a
// diverted packet could be lost in Go (or foreign traffic forwarded).
func TestClassifierMatchesBPF(t *testing.T) {
	requireBPF(t)
	objs := loadTestObjects(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var corpus [][]byte
	for _, tags := range [][]uint16{nil, {0x8100}, {0x88A8, 0x8100}, {0x8100, 0x8100, 0x8100}} {
		for _, v6 := range []bool{false, true} {
			for _, port := range []uint16{4791, 4792, 0xB712} {
				for _, frag := range []uint16{0, 0x4000, ipv4FlagMF, 5} {
					for _, ihl := range []int{4, 5, 6, 15} {
						corpus = append(corpus, frameSpec{tags: tags, v6: v6, port: port, fragOff: frag, ihl: ihl, payload: 60}.build())
					}
				}
			}
		}
	}
	// Truncations and random single-byte damage of RoCE frames.
	for _, base := range [][]byte{
		frameSpec{port: 4791, payload: 60}.build(),
		frameSpec{v6: true, port: 4791, payload: 60}.build(),
		frameSpec{tags: []uint16{0x8100}, port: 4791, payload: 60}.build(),
	} {
		for n := ethHeaderLen; n <= len(base); n++ {
			corpus = append(corpus, base[:n])
		}
		for range 1500 {
			b := append([]byte(nil), base...)
			b[rng.IntN(min(len(b), 70))] = byte(rng.Uint32())
			corpus = append(corpus, b)
		}
	}
	diverted := 0
	for i, b := range corpus {
		ret, _, err := objs.Divert.Test(b)
		_, goSays := parseRoCE(b)
		if errors.Is(err, unix.EINVAL) && len(b) < ethHeaderLen+ipv6HeaderLen {
			// BPF_PROG_TEST_RUN refuses frames shorter than their L3
			// header; too short for a UDP header anyway.
			if goSays {
				t.Fatalf("frame %d (% x): Go says RoCE", i, b)
			}
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: test run: %v", i, err)
		}
		bpfSays := ret == tcActRedirect
		if ret != tcActRedirect && ret != tcActOK {
			t.Fatalf("frame %d: divert returned %d", i, ret)
		}
		if goSays != bpfSays {
			t.Fatalf("frame %d (% x): Go says RoCE=%v, BPF says %v", i, b, goSays, bpfSays)
		}
		if bpfSays {
			diverted++
		}
	}
	t.Logf("%d frames, %d RoCEv2", len(corpus), diverted)
	if diverted == 0 || diverted == len(corpus) {
		t.Fatal("corpus does not exercise both outcomes")
	}
}

// skbContext is struct __sk_buff as BPF_PROG_TEST_RUN takes it: only a
// few fields (mark among them) may be set.
type skbContext [48]uint32

const skbMarkWord = 2

// TestMarks: the injector's output (carrying the mark) is let through by
// divert with the mark cleared; reinject accepts only marked frames.
func TestMarks(t *testing.T) {
	requireBPF(t)
	objs := loadTestObjects(t)
	roce := frameSpec{port: 4791, payload: 60}.build()
	run := func(p *ebpf.Program, mark uint32) (uint32, uint32) {
		var in, out skbContext
		in[skbMarkWord] = mark
		ret, err := p.Run(&ebpf.RunOptions{Data: roce, Context: in, ContextOut: &out})
		if err != nil {
			t.Fatal(err)
		}
		return ret, out[skbMarkWord]
	}
	if ret, mark := run(objs.Divert, reinjectMark); ret != tcActOK || mark != 0 {
		t.Errorf("divert, marked: ret %d mark %#x; want pass with mark cleared", ret, mark)
	}
	if ret, _ := run(objs.Divert, 0); ret != tcActRedirect {
		t.Errorf("divert, unmarked RoCE: ret %d, want redirect", ret)
	}
	if ret, _ := run(objs.Divert, 7); ret != tcActRedirect {
		t.Errorf("divert, foreign mark: ret %d, want redirect", ret)
	}
	if ret, _ := run(objs.Reinject, reinjectMark); ret != tcActRedirect {
		t.Errorf("reinject, marked: ret %d, want redirect", ret)
	}
	if ret, _ := run(objs.Reinject, 0); ret != tcActShot {
		t.Errorf("reinject, unmarked: ret %d, want drop", ret)
	}
	if ret, _ := run(objs.Sink, 0); ret != tcActShot {
		t.Errorf("sink: ret %d, want drop", ret)
	}
}

const (
	tcActOK       = 0
	tcActShot     = 2
	tcActRedirect = 7
)

func requireBPF(t *testing.T) {
	t.Helper()
	if _, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("BPF unavailable (CI=true, failing instead of skipping): %v", err)
		}
		t.Skipf("BPF unavailable: %v", err)
	}
}

func loadTestObjects(t *testing.T) *impairObjects {
	t.Helper()
	spec, err := loadImpair()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]uint32{"divert_ifindex": 1, "port_ifindex": 1, "reinject_mark": reinjectMark} {
		if err := spec.Variables[name].Set(v); err != nil {
			t.Fatal(err)
		}
	}
	var objs impairObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

// udpChecksum computes the full UDP checksum over an IPv4 frame built by
// frameSpec (source/destination addresses are zero there).
func udpChecksum(b []byte, f roceFrame) uint16 {
	ulen := binary.BigEndian.Uint16(b[f.udp+4:])
	sum := uint32(ipProtocolUDP) + uint32(ulen)
	seg := b[f.udp : f.udp+int(ulen)]
	for i := 0; i+1 < len(seg); i += 2 {
		if i == udpChecksumSkip {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(seg[i:]))
	}
	if len(seg)%2 == 1 {
		sum += uint32(seg[len(seg)-1]) << 8
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

func TestFlipPatchesChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{1, 2, 7, 8, 61, 256, 1001} {
		for range 200 {
			b := frameSpec{port: 4791, payload: size}.build()
			for i := ethHeaderLen + 28; i < len(b); i++ {
				b[i] = byte(rng.Uint32())
			}
			f, ok := parseRoCE(b)
			if !ok {
				t.Fatal("frame not RoCE")
			}
			binary.BigEndian.PutUint16(b[f.udp+udpChecksumSkip:], udpChecksum(b, f))
			off, mask := rng.IntN(size), byte(1)<<rng.IntN(8)
			before := b[f.payload+off]
			flipPayloadByte(b, f, off, mask, false)
			if b[f.payload+off] != before^mask {
				t.Fatal("byte not flipped")
			}
			if got, want := binary.BigEndian.Uint16(b[f.udp+udpChecksumSkip:]), udpChecksum(b, f); got != want {
				t.Fatalf("size %d off %d mask %x: patched checksum %#04x, recomputed %#04x", size, off, mask, got, want)
			}
		}
	}
	// Zero (no checksum) and pending (offloaded) checksums are left alone.
	for _, pending := range []bool{false, true} {
		b := frameSpec{port: 4791, payload: 10, checksum: 0}.build()
		if pending {
			binary.BigEndian.PutUint16(b[ethHeaderLen+20+udpChecksumSkip:], 0x1234)
		}
		f, _ := parseRoCE(b)
		want := binary.BigEndian.Uint16(b[f.udp+udpChecksumSkip:])
		flipPayloadByte(b, f, 3, 0x10, pending)
		if got := binary.BigEndian.Uint16(b[f.udp+udpChecksumSkip:]); got != want {
			t.Fatalf("pending=%v: checksum changed %#x -> %#x", pending, want, got)
		}
	}
}

func TestInsertVLANTag(t *testing.T) {
	frame := frameSpec{port: 4791, payload: 20}.build()
	buf := make([]byte, headroom+vnetHeaderLen+len(frame))
	buf[headroom] = vnetFlagNeedsCsum
	binary.LittleEndian.PutUint16(buf[headroom+vnetCsumStartOff:], 34)
	copy(buf[headroom+vnetHeaderLen:], frame)
	start := insertVLANTag(buf, headroom, 0x8100, 0x2064)
	if start != 0 {
		t.Fatalf("start %d", start)
	}
	got := buf[start+vnetHeaderLen:]
	if string(got[:12]) != string(frame[:12]) || binary.BigEndian.Uint16(got[12:]) != 0x8100 ||
		binary.BigEndian.Uint16(got[14:]) != 0x2064 || string(got[16:]) != string(frame[12:]) {
		t.Fatalf("tagged frame % x", got)
	}
	if cs := binary.LittleEndian.Uint16(buf[start+vnetCsumStartOff:]); cs != 38 || buf[start] != vnetFlagNeedsCsum {
		t.Fatalf("vnet header not moved/adjusted: csum_start %d flags %x", cs, buf[start])
	}
}

func TestDecide(t *testing.T) {
	// Rate 0 never acts, rate 1 always does.
	for seq := range uint64(1000) {
		if d := Decide(Config{Seed: 5}, seq, 100); d.Action != 0 {
			t.Fatalf("rate 0: %v", d.Action)
		}
		if d := Decide(Config{Drop: 1, Duplicate: 1, Seed: 5}, seq, 100); d.Action != Dropped {
			t.Fatalf("drop 1: %v", d.Action)
		}
		d := Decide(Config{Duplicate: 1, Corrupt: 1, Reorder: 1, Seed: 5}, seq, 100)
		if d.Action != Duplicated|Corrupted|Reordered || d.Offset < 0 || d.Offset >= 100 || d.Mask == 0 || d.Mask&(d.Mask-1) != 0 {
			t.Fatalf("all but drop at 1: %+v", d)
		}
		if d := Decide(Config{Corrupt: 1, Seed: 5}, seq, 0); d.Action != 0 {
			t.Fatalf("corrupting an empty payload: %v", d.Action)
		}
	}
	// Rates are independent: raising one does not move another's picks.
	base := Config{Drop: 0.1, Seed: 99}
	more := base
	more.Duplicate = 0.5
	for seq := range uint64(5000) {
		a := Decide(base, seq, 50).Action & Dropped
		b := Decide(more, seq, 50).Action & Dropped
		if a != b {
			t.Fatalf("seq %d: drop decision changed with the duplicate rate", seq)
		}
	}
	// Frequencies over a long run, and every offset and bit reachable.
	const n = 200000
	cfg := Config{Drop: 0.01, Duplicate: 0.2, Corrupt: 0.3, Reorder: 0.5, Seed: 1234}
	counts := map[Action]int{}
	offsets := make([]int, 16)
	bits := make([]int, 8)
	for seq := range uint64(n) {
		d := Decide(cfg, seq, 16)
		for _, a := range []Action{Dropped, Duplicated, Corrupted, Reordered} {
			if d.Action&a != 0 {
				counts[a]++
			}
		}
		if d.Action&Corrupted != 0 {
			offsets[d.Offset]++
			for b := range 8 {
				if d.Mask == 1<<b {
					bits[b]++
				}
			}
		}
	}
	notDropped := float64(n - counts[Dropped])
	for a, tc := range map[Action]struct{ trials, p float64 }{
		Dropped: {n, 0.01}, Duplicated: {notDropped, 0.2}, Corrupted: {notDropped, 0.3}, Reordered: {notDropped, 0.5},
	} {
		// Within 5 standard deviations of the binomial mean.
		mean, sd := tc.trials*tc.p, math.Sqrt(tc.trials*tc.p*(1-tc.p))
		if got := float64(counts[a]); math.Abs(got-mean) > 5*sd {
			t.Errorf("%v: %v times, want %v ± %.0f", a, got, mean, 5*sd)
		}
	}
	for i, c := range offsets {
		if c < counts[Corrupted]/16*8/10 {
			t.Errorf("offset %d chosen %d times of %d", i, c, counts[Corrupted])
		}
	}
	for i, c := range bits {
		if c < counts[Corrupted]/8*8/10 {
			t.Errorf("bit %d chosen %d times of %d", i, c, counts[Corrupted])
		}
	}
	// Seeds matter.
	same := 0
	for seq := range uint64(1000) {
		if Decide(Config{Drop: 0.5, Seed: 1}, seq, 1) == Decide(Config{Drop: 0.5, Seed: 2}, seq, 1) {
			same++
		}
	}
	if same > 600 {
		t.Errorf("seeds 1 and 2 agree on %d of 1000 coin flips", same)
	}
}

func TestValidate(t *testing.T) {
	good := []Config{{}, {Drop: 1, Duplicate: 0.5, ReorderDistance: MaxReorderDistance, LogLimit: 10, HoldTimeout: time.Second}}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	nan := 0.0
	nan /= nan
	bad := []Config{{Drop: -0.1}, {Corrupt: 1.1}, {Reorder: nan}, {ReorderDistance: MaxReorderDistance + 1},
		{ReorderDistance: -1}, {HoldTimeout: -1}, {LogLimit: -1}, {LogLimit: MaxLogLimit + 1}}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{0: "pass", Dropped: "drop", Duplicated | Corrupted: "dup|corrupt", Reordered | 0x80: "reorder|0x80"} {
		if got := a.String(); got != want {
			t.Errorf("%d: %q, want %q", a, got, want)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	s := compile(Config{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 1})
	b.ReportAllocs()
	var sink Action
	for i := range b.N {
		a, _, _ := s.decide(uint64(i), 1000)
		sink ^= a
	}
	_ = sink
}

// BenchmarkHandleBatch measures the per-packet work of the forwarder
// (parse, decide, corrupt, hold/release, queue) without the syscalls;
// the steady state must not allocate.
func BenchmarkHandleBatch(b *testing.B) {
	for _, logging := range []bool{false, true} {
		name := "nolog"
		if logging {
			name = "log"
		}
		b.Run(name, func(b *testing.B) {
			var cfg atomic.Pointer[settings]
			cfg.Store(compile(Config{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 1}))
			var st sharedStats
			log := &decisionLog{}
			if logging {
				log.limit = MaxLogLimit
				log.entries = make([]Decision, 0, MaxLogLimit)
			}
			f := newForwarder(nil, &cfg, &st, log, 1500)
			frame := frameSpec{port: 4791, payload: 1024}.build()
			for i := range batchSize {
				copy(f.rxBufs[i][headroom+vnetHeaderLen:], frame)
			}
			s := cfg.Load()
			now := time.Now()
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			b.ResetTimer()
			for i := 0; i < b.N; i += batchSize {
				for j := range batchSize {
					f.rxHdr[j].Len = uint32(vnetHeaderLen + len(frame))
					f.rxHdr[j].Hdr.Controllen = 0
					f.rxHdr[j].Hdr.Flags = 0
					// Corruption flips bytes in place; restore the
					// frame so every batch parses the same.
					copy(f.rxBufs[j][headroom+vnetHeaderLen:], frame)
				}
				f.handleBatch(batchSize, s, now)
				f.releaseExpired(now)
				f.recycle()
				if log.limit > 0 && len(log.entries)+batchSize > MaxLogLimit {
					log.entries = log.entries[:0]
					f.logged = 0
				}
				f.publish()
			}
		})
	}
}
