package verbs

import (
	"bytes"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// patternMem is memory of a size no test allocates: byte i holds
// patternByte(i). Reads made once closed is set are counted: the engine
// must not touch the memory any more.
type patternMem struct {
	closed    atomic.Bool
	lateReads atomic.Int64
	reads     atomic.Int64
}

func patternByte(off uint64) byte { return byte(off*7 + off>>9 + 1) }

func (m *patternMem) ReadAt(p []byte, off uint64) error {
	m.reads.Add(1)
	if m.closed.Load() {
		m.lateReads.Add(1)
	}
	for i := range p {
		p[i] = patternByte(off + uint64(i))
	}
	return nil
}

func (m *patternMem) WriteAt(p []byte, off uint64) error { return nil }

// checkMem is a READ's destination of any size: it checks every byte
// written against patternByte and counts the bytes that match.
type checkMem struct {
	good, bad atomic.Int64
}

func (m *checkMem) ReadAt(p []byte, off uint64) error { return nil }

func (m *checkMem) WriteAt(p []byte, off uint64) error {
	bad := 0
	for i := range p {
		if p[i] != patternByte(off+uint64(i)) {
			bad++
		}
	}
	m.good.Add(int64(len(p) - bad))
	m.bad.Add(int64(bad))
	return nil
}

// lossless is a MemLink whose sender waits for room at the receiving end
// instead of overflowing it: the long transfers here measure the
// transport's PSN handling, not a ring's losses.
type lossless struct{ *memlink.Link }

func (l lossless) Send(frames [][]byte) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l.Peer().Queued()+len(frames) <= memlink.QueueCap || time.Now().After(deadline) {
			return l.Link.Send(frames)
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// bigPair connects two nodes on one fake clock at path MTU mtu; b has a
// region of size bytes backed by patternMem (with MW_BIND rights), a one of
// the same size backed by checkMem.
func bigPair(t *testing.T, mtu MTU, size uint64, o connOpts) (a, b *node, src *patternMem, dst *checkMem, bmr, amr *MR, clk *faketime.Clock) {
	t.Helper()
	clk = faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr) *node {
		d, err := NewDevice(l, DeviceConfig{MAC: mac, GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), ip}, ActiveMTU: 4096, Clock: clk})
		must(t, err)
		t.Cleanup(func() { _ = d.Close() })
		registerDevice(t, d)
		return newNode(t, d, 1<<16)
	}
	a, b = mk(lossless{la}, macA, ipA), mk(lossless{lb}, macB, ipB)
	o.mtu = mtu
	connect(t, a, b, ipA, ipB, macA, macB, o)
	src, dst = &patternMem{}, &checkMem{}
	var err error
	bmr, err = b.pd.RegProcMR(src, 0x7f0000000000, size, AccessLocalWrite|AccessRemoteRead|AccessRemoteWrite|AccessMWBind)
	must(t, err)
	amr, err = a.pd.RegProcMR(dst, 0x7e0000000000, size, AccessLocalWrite)
	must(t, err)
	return a, b, src, dst, bmr, amr, clk
}

// TestMWRevokedMidRead: a window invalidated (LOCAL_INV), deallocated or
// rebound elsewhere while a 16 MiB READ through it is being answered stops
// the answer: no response packet reads the memory once the operation has
// returned, and the READ, asked again, fails with REM_ACCESS_ERR (the
// duplicate finds the key dead). rxe's read_reply checks the key for every
// slice of a response.
func TestMWRevokedMidRead(t *testing.T) {
	const size = 16 << 20
	for _, how := range []string{"LOCAL_INV", "dealloc", "rebound elsewhere"} {
		t.Run(how, func(t *testing.T) {
			a, b, src, dst, bmr, amr, clk := bigPair(t, MTU256, size+4096, connOpts{timeout: 14, retry: 7, rnr: 7})
			b.mr = bmr
			mw := mustBind(t, b, 0, size, AccessRemoteRead)
			rkey := mw.RKey()
			postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled,
				SGList: []SGE{{Addr: amr.Addr(), Length: size, LKey: amr.LKey()}}, RemoteAddr: bmr.Addr(), RKey: rkey})
			waitCounter(t, a.dev, "the first responses", func(c Counters) bool { return c.RcvdPkts >= 2000 })
			switch how {
			case "LOCAL_INV":
				postSend(t, b, SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: rkey})
				if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
					t.Fatalf("LOCAL_INV: %+v", wc)
				}
			case "dealloc":
				must(t, mw.Dealloc())
			case "rebound elsewhere":
				postSend(t, b, SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: rkey})
				postSend(t, b, SendWR{ID: 3, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{
					MW: mw, RKey: rkey, MR: bmr, Addr: bmr.Addr() + size, Length: 4096, Access: AccessRemoteRead}})
				for _, wc := range poll(t, b.scq, 2, 5*time.Second) {
					if wc.Status != WCSuccess {
						t.Fatalf("LOCAL_INV and bind: %+v", wc)
					}
				}
				if mw.RKey() != rkey {
					t.Fatalf("rebound with key %#x, want the same %#x", mw.RKey(), rkey)
				}
			}
			settle(t, b.dev) // any step that began before is over
			src.closed.Store(true)
			quiesce(t, a.dev) // the responses sent before are all in
			// The answer stopped; the requester's timer asks again and the
			// duplicate READ finds the key dead.
			for i := 0; i < 50 && pending(a.scq) == 0; i++ {
				clk.Advance(transport.AckTimeout(14) << transport.MaxBackoff)
				time.Sleep(10 * time.Millisecond)
			}
			wc := poll(t, a.scq, 1, 5*time.Second)[0]
			if n := src.lateReads.Load(); n != 0 {
				t.Fatalf("%d reads of the window's memory after it was revoked", n)
			}
			if wc.Status != WCRemAccessErr {
				t.Fatalf("READ through a window revoked under it: %+v, want REM_ACCESS_ERR", wc)
			}
			if dst.bad.Load() != 0 || dst.good.Load() >= size {
				t.Fatalf("READ placed %d right bytes and %d wrong ones of %d", dst.good.Load(), dst.bad.Load(), size)
			}
		})
	}
}

// TestMWRevokedMidWrite: a multi-packet WRITE through a window that is
// invalidated, deallocated or rebound elsewhere between its FIRST and its
// LAST writes nothing more: the rest fails with a remote access error
// (NAK, the responder QP to ERR), as a WRITE naming a dead key. rxe checks
// the key for every packet.
func TestMWRevokedMidWrite(t *testing.T) {
	const n = 8 * 1024 // 8 packets of 1024 bytes
	for _, how := range []string{"LOCAL_INV", "dealloc", "rebound elsewhere"} {
		t.Run(how, func(t *testing.T) {
			a, b, clk := fakePair(t, connOpts{timeout: 14, retry: 7, rnr: 7})
			mr, err := b.pd.AllocMR(1<<16, AccessLocalWrite|AccessMWBind)
			must(t, err)
			b.mr = mr
			mw := mustBind(t, b, 0, n, AccessRemoteWrite)
			rkey := mw.RKey()
			fill(a.mr.Bytes()[:n], 9)
			la := nicOf(a.dev).Link(0).(*memlink.Link)
			hold := dropOpcode(la, wire.RCWriteLast)
			postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr(), RKey: rkey})
			waitCounter(t, b.dev, "FIRST and MIDDLEs", func(c Counters) bool { return c.RcvdPkts >= 7 })
			switch how {
			case "LOCAL_INV":
				postSend(t, b, SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: rkey})
				if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
					t.Fatalf("LOCAL_INV: %+v", wc)
				}
			case "dealloc":
				must(t, mw.Dealloc())
			case "rebound elsewhere":
				postSend(t, b, SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: rkey})
				postSend(t, b, SendWR{ID: 3, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{
					MW: mw, RKey: rkey, MR: b.mr, Addr: b.mr.Addr() + 2*n, Length: n, Access: AccessRemoteWrite}})
				for _, wc := range poll(t, b.scq, 2, 5*time.Second) {
					if wc.Status != WCSuccess {
						t.Fatalf("LOCAL_INV and bind: %+v", wc)
					}
				}
			}
			after := bytes.Clone(b.mr.Bytes())
			hold.Store(false)
			clk.Advance(transport.AckTimeout(14) + time.Microsecond) // the LAST was lost: the timer resends it
			if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
				t.Fatalf("WRITE through a window revoked under it: %+v, want REM_ACCESS_ERR", wc)
			}
			if !bytes.Equal(after, b.mr.Bytes()) {
				t.Fatal("the memory changed after the window was revoked")
			}
			if st := b.qp.State(); st != StateErr {
				t.Fatalf("responder QP in %v, want ERR", st)
			}
		})
	}
}

// TestModifyToErrorDropsQueuedReadReplies: a QP moved to the error state
// while a long READ's answer is queued sends none of it any more, and reads
// none of the memory, once Modify has returned.
func TestModifyToErrorDropsQueuedReadReplies(t *testing.T) {
	const size = 16 << 20
	a, b, src, _, bmr, amr, _ := bigPair(t, MTU256, size, connOpts{timeout: 14, retry: 7, rnr: 7})
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled,
		SGList: []SGE{{Addr: amr.Addr(), Length: size, LKey: amr.LKey()}}, RemoteAddr: bmr.Addr(), RKey: bmr.RKey()})
	waitCounter(t, a.dev, "the first responses", func(c Counters) bool { return c.RcvdPkts >= 2000 })
	must(t, b.qp.Modify(QPAttr{State: StateErr}, AttrState))
	src.closed.Store(true)
	sent := counters(b.dev).SentPkts
	time.Sleep(100 * time.Millisecond)
	settle(t, b.dev)
	if n, now := src.lateReads.Load(), counters(b.dev).SentPkts; n != 0 || now != sent {
		t.Fatalf("after Modify(ERR) returned: %d reads of the memory, %d packets sent", n, now-sent)
	}
}

// TestReadOfHalfThePSNSpace: a 2^31-byte READ at PMTU 256 takes 2^23
// PSNs, exactly half the PSN space, where a 24-bit serial comparison flips
// sign. It completes with every byte, starting just below the PSN wrap;
// before, sentEnd never moved past the READ and its own responses were
// dropped as out of window. The memory on both sides is fake: patterned
// on the responder, checked byte for byte on the requester.
func TestReadOfHalfThePSNSpace(t *testing.T) {
	if testing.Short() || raceDetector {
		// 8 s alone, 135 s under the race detector: the PSN arithmetic
		// it checks is no concurrency matter.
		t.Skip("2^23 packets")
	}
	const size = 1 << 31
	a, _, _, dst, bmr, amr, clk := bigPair(t, MTU256, size, connOpts{timeout: 14, retry: 7, rnr: 7, psnA: 0xffff00})
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled,
		SGList: []SGE{{Addr: amr.Addr(), Length: size, LKey: amr.LKey()}}, RemoteAddr: bmr.Addr(), RKey: bmr.RKey()})
	deadline := time.Now().Add(3 * time.Minute)
	last := uint64(0)
	for pending(a.scq) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("READ not done: %d bytes placed, counters %+v", dst.good.Load(), counters(a.dev))
		}
		time.Sleep(100 * time.Millisecond)
		c := counters(a.dev)
		if c.ResponseOutOfWindow != 0 {
			t.Fatalf("the READ's own responses dropped as out of window: %+v", c)
		}
		if c.RcvdPkts == last {
			// Stalled: only the transport timer can go on (fake time).
			clk.Advance(transport.AckTimeout(14) << transport.MaxBackoff)
		}
		last = c.RcvdPkts
	}
	if wc := poll(t, a.scq, 1, time.Second)[0]; wc.Status != WCSuccess || wc.ByteLen != size {
		t.Fatalf("READ: %+v", wc)
	}
	if good, bad := dst.good.Load(), dst.bad.Load(); bad != 0 || good < size {
		t.Fatalf("READ placed %d right bytes and %d wrong ones of %d", good, bad, size)
	}
}
