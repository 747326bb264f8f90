package verbs

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/uverbs"
)

// FuzzSharedRings plays a hostile daemon client: fuzzer-chosen work requests
// of any opcode, flags, keys, addresses and lengths, slots patched past what
// PutSendWQE writes, producer indices moved anywhere and a CQ consumer index
// moved out of turn, all in the rings of one shared RC QP whose peer is
// honest. Both engines run on the test goroutine with a fake clock, so every
// input replays exactly.
//
// Invariants: no panic; memory the client may not write (a region without
// local write, a region of another PD, the peer's region without remote
// rights) never changes; the shared QP is in RTS, SQE or ERR; every
// completion in the client's CQ ring is its QP's and has a status ibverbs
// knows; and a second, honest QP pair on the same two devices still WRITEs
// byte for byte afterwards.
func FuzzSharedRings(f *testing.F) {
	f.Add([]byte{})
	f.Add(sharedFuzzSeed)
	f.Add([]byte{2, 0x80, 3, 0x7f, 4, 0x40})                   // producers and the CQ consumer far off
	f.Add([]byte{0, 8, 0x02, 0, 3, 0, 0, 0, 0, 2, 0x2c, 0x11}) // a BIND_MW with a patched slot
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzSharedRings(t, data)
	})
}

// sharedFuzzSeed, in FuzzSharedRings' records: a signaled WRITE of 64 bytes
// from the client's region into the peer's (WRID 1), a receive into the
// client's region (WRID 2), then a signaled READ into the client's region
// without local write (WRID 3).
var sharedFuzzSeed = []byte{
	0, 1, byte(WRRDMAWrite), byte(SendSignaled), 1, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	1, 2, 1, 0, 0, 0x20, 0, 4, 0,
	0, 3, byte(WRRDMARead), byte(SendSignaled), 1, 1, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
}

// The fuzz target's replay reaches the engine: its seed's WRITE lands, and
// its READ into a region without local write fails LOC_PROT_ERR, taking the
// QP to the error state, which flushes the receive.
func TestSharedRingsReplay(t *testing.T) {
	cqes := fuzzSharedRings(t, sharedFuzzSeed)
	want := []struct {
		id     uint64
		status WCStatus
	}{{1, WCSuccess}, {3, WCLocProtErr}, {2, WCWRFlushErr}}
	if len(cqes) != len(want) {
		t.Fatalf("completions %+v", cqes)
	}
	for i, w := range want {
		if cqes[i].WRID != w.id || WCStatus(cqes[i].Status) != w.status {
			t.Fatalf("completion %d: %+v, want WRID %d %v", i, cqes[i], w.id, w.status)
		}
	}
}

// sharedFuzz is one replay's objects.
type sharedFuzz struct {
	a     *sharedNode
	b     *node
	ro    *MR // the client's region without local write
	other *MR // a region of another PD on the client's device
	bNo   *MR // the peer's region without remote rights
	mw    *MW
	// seen counts the completions the client read from its CQ ring; lie
	// is what it adds to that count in the consumer index it publishes.
	seen, lie uint32
}

// fuzzSharedRings replays data, checks the invariants and returns the
// completions the client's CQ ring received.
func fuzzSharedRings(t *testing.T, data []byte) []uverbs.CQE {
	const size = 16 << 10
	clk := faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	cfg := DeviceConfig{ActiveMTU: 4096, Clock: clk, AckHold: -1}
	da := newDeviceWith(t, la, macA, ipA, cfg)
	db := newDeviceWith(t, lb, macB, ipB, cfg)
	s := &sharedFuzz{a: newSharedNode(t, da, size), b: newNode(t, db, size)}
	var err error
	s.ro, err = s.a.pd.AllocMR(size, 0)
	must(t, err)
	pd2, err := da.AllocPD()
	must(t, err)
	s.other, err = pd2.AllocMR(size, AccessLocalWrite|AccessRemoteWrite)
	must(t, err)
	s.bNo, err = s.b.pd.AllocMR(size, AccessLocalWrite)
	must(t, err)
	s.mw, err = s.a.pd.AllocMW(MWType2)
	must(t, err)
	opts := connOpts{mtu: MTU1024, timeout: 10, retry: 3, rnr: 3}
	connect(t, s.a.node, s.b, ipA, ipB, macA, macB, opts)
	a2, b2 := newNode(t, da, size), newNode(t, db, size)
	connect(t, a2, b2, ipA, ipB, macA, macB, opts)
	for _, mr := range []*MR{s.a.mr, s.ro, s.other, s.b.mr, s.bNo} {
		fill(mr.Bytes(), int(mr.LKey()))
	}
	frozen := map[*MR][]byte{}
	for _, mr := range []*MR{s.ro, s.other, s.bNo} {
		frozen[mr] = append([]byte(nil), mr.Bytes()...)
	}

	ls := &lockstep{clk: clk, devs: [2]*Device{da, db}, perFrame: time.Microsecond}
	ls.hold()
	for i := range 4 {
		postRecv(t, s.b, RecvWR{ID: uint64(100 + i), SGList: sge(s.b.mr, i*1024, 1024)})
	}
	var cqes []uverbs.CQE
	honestPosted := false
	buf := make([]WorkCompletion, 4)
	var honest []WorkCompletion
	done := func() bool {
		cqes = s.consume(cqes)
		if len(data) > 0 {
			data = s.apply(data)
			return false
		}
		if !honestPosted {
			honestPosted = true
			postSend(t, a2, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a2.mr, 0, 4096),
				RemoteAddr: b2.mr.Addr() + 8192, RKey: b2.mr.RKey()})
		}
		n := a2.scq.Poll(buf)
		honest = append(honest, buf[:n]...)
		return len(honest) > 0
	}
	took := ls.run(done, 60*time.Second)
	if len(honest) != 1 || honest[0].Status != WCSuccess {
		t.Fatalf("the honest QP's WRITE after the hostile client: %+v after %v of simulated time%s", honest, took, stallReport(t))
	}
	equalBytes(t, "the honest WRITE", b2.mr.Bytes()[8192:8192+4096], a2.mr.Bytes()[:4096])
	for mr, want := range frozen {
		if !bytes.Equal(mr.Bytes(), want) {
			t.Fatalf("region %#x (access %v) changed", mr.LKey(), mr.access)
		}
	}
	switch st := s.a.qp.State(); st {
	case StateRTS, StateSQE, StateErr:
	default:
		t.Fatalf("the client's QP in %v", st)
	}
	for _, c := range cqes {
		if known := !strings.HasPrefix(WCStatus(c.Status).String(), "WCStatus("); c.QPNum != s.a.qp.QPN() || !known {
			t.Fatalf("completion %+v in the client's ring (its QP is %d)", c, s.a.qp.QPN())
		}
	}
	return cqes
}

// consume reads the completions the engine wrote since the client last
// looked, as a client polling its CQ does, and publishes its consumer
// index: the slots it read, moved by what the records made it lie.
func (s *sharedFuzz) consume(got []uverbs.CQE) []uverbs.CQE {
	r := s.a.cqr
	for p := r.Producer(); s.seen != p && p-s.seen <= r.Slots(); s.seen++ {
		var c uverbs.CQE
		uverbs.CQEOf(r.Slot(s.seen), &c)
		got = append(got, c)
	}
	r.SetConsumer(s.seen + s.lie)
	return got
}

// apply carries out the first record of data and returns the rest. A
// record's first byte is its kind: 0 a send WQE, 1 a receive WQE, 2 and 3
// move the send and receive producer indices, 4 the CQ's consumer index
// (from then on).
// WQEs are built from fields (opcode, flags, SGEs naming one of the
// regions by a selector, offset and length, a remote region the same way)
// and then patched byte by byte, so the fuzzer reaches both the checks of
// well-formed requests and the decoding of malformed slots.
func (s *sharedFuzz) apply(data []byte) []byte {
	in := fuzzInput(data[1:])
	switch data[0] % 5 {
	case 0:
		w := uverbs.SendWQE{WRID: uint64(in.byte()), Opcode: in.byte() % 12, SendFlags: in.byte()}
		sgl := make([]uverbs.SGE, int(in.byte())%3)
		for i := range sgl {
			sgl[i] = s.localSGE(&in)
		}
		w.RKey, w.RemoteAddr = s.remote(&in)
		w.InvRKey, w.Imm = s.key(&in), uint32(in.byte())
		w.CompareAdd, w.Swap = uint64(in.u16()), uint64(s.key(&in))<<32|uint64(in.byte())
		var inline []byte
		if SendFlags(w.SendFlags)&SendInline != 0 {
			inline, sgl = bytes.Repeat([]byte{in.byte()}, int(in.byte())%80), nil
		}
		p := s.a.sq.Producer()
		slot := s.a.sq.Slot(p)
		uverbs.PutSendWQE(slot, &w, sgl, inline)
		in.patch(slot)
		s.a.sq.SetProducer(p + 1)
	case 1:
		id := uint64(in.byte())
		sgl := make([]uverbs.SGE, int(in.byte())%3)
		for i := range sgl {
			sgl[i] = s.localSGE(&in)
		}
		p := s.a.rq.Producer()
		slot := s.a.rq.Slot(p)
		uverbs.PutRecvWQE(slot, id, sgl)
		in.patch(slot)
		s.a.rq.SetProducer(p + 1)
	case 2:
		s.a.sq.SetProducer(s.a.sq.Producer() + uint32(int8(in.byte())))
	case 3:
		s.a.rq.SetProducer(s.a.rq.Producer() + uint32(int8(in.byte())))
	case 4:
		s.lie += uint32(int8(in.byte()))
	}
	return in
}

// localSGE is an SGE in one of the client's device's regions, past one's
// end, or under a key from the input.
func (s *sharedFuzz) localSGE(in *fuzzInput) uverbs.SGE {
	mrs := []*MR{s.a.mr, s.ro, s.other}
	sel, off, n := in.byte(), uint64(in.u16()), uint32(in.u16())
	mr := mrs[int(sel)%len(mrs)]
	g := uverbs.SGE{Addr: mr.Addr() + off%uint64(mr.Len()+64), Length: n % uint32(mr.Len()+64), LKey: mr.LKey()}
	if sel >= 0x80 {
		g.LKey = s.key(in)
	}
	return g
}

// remote is a remote key and address: one of the peer's regions or the
// client's own window, under its key or another.
func (s *sharedFuzz) remote(in *fuzzInput) (rkey uint32, addr uint64) {
	sel, off := in.byte(), uint64(in.u16())
	switch sel % 3 {
	case 0:
		rkey, addr = s.b.mr.RKey(), s.b.mr.Addr()
	case 1:
		rkey, addr = s.bNo.RKey(), s.bNo.Addr()
	default:
		rkey, addr = s.mw.RKey(), s.a.mr.Addr()
	}
	if sel >= 0x80 {
		rkey = s.key(in)
	}
	return rkey, addr + off
}

// key is one of the keys in play, or one from the input.
func (s *sharedFuzz) key(in *fuzzInput) uint32 {
	keys := []uint32{s.a.mr.LKey(), s.ro.LKey(), s.other.LKey(), s.mw.RKey(), s.b.mr.RKey(), s.bNo.RKey()}
	if k := int(in.byte()); k < len(keys) {
		return keys[k]
	}
	return binary.LittleEndian.Uint32(append(in.take(4), 0, 0, 0, 0))
}

// fuzzInput hands out fuzz input bytes, zeros once it runs out.
type fuzzInput []byte

func (in *fuzzInput) take(n int) []byte {
	n = min(n, len(*in))
	b := (*in)[:n]
	*in = (*in)[n:]
	return b
}

func (in *fuzzInput) byte() byte {
	if b := in.take(1); len(b) == 1 {
		return b[0]
	}
	return 0
}

func (in *fuzzInput) u16() uint16 { return uint16(in.byte()) | uint16(in.byte())<<8 }

// patch applies up to two (offset, value) patches to slot.
func (in *fuzzInput) patch(slot []byte) {
	for range int(in.byte()) % 3 {
		off, v := int(in.byte()), in.byte()
		slot[off%len(slot)] = v
	}
}
