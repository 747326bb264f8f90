package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
	"github.com/xdproce/xdproce/wire"
)

// rnic is one host's xdproce device with a connected RC QP.
type rnic struct {
	host     *netns.Host
	dev      *verbs.Device
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	mr       *verbs.MR
}

func openRNIC(t testing.TB, h *netns.Host, bufSize int) *rnic {
	t.Helper()
	return openRNICWith(t, h, bufSize, verbs.Options{})
}

func openRNICWith(t testing.TB, h *netns.Host, bufSize int, opts verbs.Options) *rnic {
	t.Helper()
	r := &rnic{host: h}
	err := h.Do(func() error {
		var err error
		r.dev, err = verbs.Open(t.Context(), h.Link, opts)
		return err
	})
	if err != nil {
		t.Fatalf("open %s: %v", h.Link, err)
	}
	t.Cleanup(func() {
		if err := r.dev.Close(); err != nil {
			t.Errorf("close %s: %v", h.Link, err)
		}
	})
	if r.dev.BusyPolling() != opts.BusyPoll {
		t.Fatalf("open %s with BusyPoll %v: the device's is %v", h.Link, opts.BusyPoll, r.dev.BusyPolling())
	}
	var e error
	check := func(err error) {
		if err != nil && e == nil {
			e = err
		}
	}
	r.pd, e = r.dev.AllocPD()
	r.scq, _ = r.dev.CreateCQ(8192)
	r.rcq, _ = r.dev.CreateCQ(8192)
	var err2 error
	r.qp, err2 = r.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: r.scq, RecvCQ: r.rcq,
		Cap: verbs.QPCap{MaxSendWR: 4096, MaxRecvWR: 4096, MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(err2)
	r.mr, err2 = r.pd.AllocMR(bufSize, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	check(err2)
	if e != nil {
		t.Fatal(e)
	}
	return r
}

// connectRC takes both QPs to RTS; the MAC comes from ARP through the device's resolver.
func connectRC(t testing.TB, a, b *rnic, mtu verbs.MTU, timeout uint8) {
	t.Helper()
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	for _, s := range []struct{ me, peer *rnic }{{a, b}, {b, a}} {
		err := s.me.qp.Connect(verbs.Peer{Access: access, AH: verbs.AH{DGID: s.peer.host.Addr, SGIDIndex: 1, HopLimit: 64},
			PathMTU: mtu, DestQPN: s.peer.qp.QPN(), RQPSN: 0x100, SQPSN: 0x100, MaxDestRdAtomic: 16, MinRNRTimer: 12,
			Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16})
		if err != nil {
			t.Fatalf("%s: %v", s.me.host.Name, err)
		}
	}
}

func waitWC(t *testing.T, cq *verbs.CQ, n int, d time.Duration) []verbs.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]verbs.WorkCompletion, 0, n)
	buf := make([]verbs.WorkCompletion, 256)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		for _, wc := range buf[:k] {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if ctx.Err() != nil {
				t.Fatalf("%d of %d completions before the deadline", len(out), n)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

func sgl(mr *verbs.MR, off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}}
}

// TestVerbsEveryOperationOverXDP runs every RC operation between two xdproce
// devices in two namespaces, through XDP steering and AF_XDP, at path MTU
// 1024 on a 1500 link, 4096 on a 4200 link (two-descriptor frames), and
// 2048 on a 4200 link whose ports keep each frame in one chunk, as on a
// kernel without AF_XDP multi-buffer (6.1): their active MTU is 2048.
func TestVerbsEveryOperationOverXDP(t *testing.T) {
	for _, tc := range []struct {
		linkMTU  int
		mtu      verbs.MTU
		oneChunk bool
	}{{1500, verbs.MTU1024, false}, {4200, verbs.MTU4096, false}, {4200, verbs.MTU2048, true}} {
		t.Run(fmt.Sprintf("link%d/pmtu%d", tc.linkMTU, tc.mtu.Bytes()), func(t *testing.T) {
			topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: tc.linkMTU, Queues: 1})
			opts := verbs.Options{OneChunk: tc.oneChunk}
			a, b := openRNICWith(t, topo.Hosts[0], 4<<20, opts), openRNICWith(t, topo.Hosts[1], 4<<20, opts)
			if got := a.dev.QueryPort().ActiveMTU; got < tc.mtu || tc.oneChunk && got != verbs.MTU2048 {
				t.Fatalf("active MTU %v (%s)", got, a.dev.QueryPort().DataPath)
			}
			connectRC(t, a, b, tc.mtu, 12)
			const n = 1<<20 + 3
			src, dst := a.mr.Bytes(), b.mr.Bytes()
			for i := range n {
				src[i] = byte(i*7 + i>>9)
			}
			// SEND/RECV, WRITE, READ, SEND_WITH_IMM, WRITE_WITH_IMM, atomics.
			post := func(wr verbs.SendWR) {
				t.Helper()
				wr.Flags |= verbs.SendSignaled
				if _, err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				waitWC(t, a.scq, 1, 20*time.Second)
			}
			if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGList: sgl(b.mr, 0, n)}, {ID: 2, SGList: sgl(b.mr, 0, 64)}, {ID: 3, SGList: sgl(b.mr, 0, 64)}}); err != nil {
				t.Fatal(err)
			}
			post(verbs.SendWR{Opcode: verbs.WRSend, SGList: sgl(a.mr, 0, n)})
			if wc := waitWC(t, b.rcq, 1, 5*time.Second)[0]; wc.ByteLen != n || !bytes.Equal(dst[:n], src[:n]) {
				t.Fatalf("SEND of %d bytes arrived as %+v / different bytes", n, wc)
			}
			clear(dst)
			post(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(a.mr, 0, n), RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()})
			if !bytes.Equal(dst[1000:1000+n], src[:n]) {
				t.Fatal("RDMA WRITE data differs")
			}
			post(verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: sgl(a.mr, 2<<20, n), RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()})
			if !bytes.Equal(src[2<<20:2<<20+n], src[:n]) {
				t.Fatal("RDMA READ data differs")
			}
			post(verbs.SendWR{Opcode: verbs.WRSendWithImm, SGList: sgl(a.mr, 0, 10), ImmData: 0x12345678})
			if wc := waitWC(t, b.rcq, 1, 5*time.Second)[0]; wc.ImmData != 0x12345678 || wc.Flags&verbs.WCWithImm == 0 {
				t.Fatalf("SEND_WITH_IMM completion %+v", wc)
			}
			post(verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, SGList: sgl(a.mr, 0, 5000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), ImmData: 7})
			if wc := waitWC(t, b.rcq, 1, 5*time.Second)[0]; wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ByteLen != 5000 || wc.ImmData != 7 {
				t.Fatalf("WRITE_WITH_IMM completion %+v", wc)
			}
			binary.LittleEndian.PutUint64(dst[64:], 100)
			post(verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, SGList: sgl(a.mr, 0, 8), RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 5})
			post(verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: sgl(a.mr, 8, 8), RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 105, Swap: 1})
			if binary.LittleEndian.Uint64(src) != 100 || binary.LittleEndian.Uint64(src[8:]) != 105 || binary.LittleEndian.Uint64(dst[64:]) != 1 {
				t.Fatal("atomics returned or left the wrong values")
			}
			// SEND_WITH_INV: B binds a type-2 window, A's SEND invalidates it.
			wmr, err := b.pd.AllocMR(1<<16, verbs.AccessLocalWrite|verbs.AccessMWBind)
			if err != nil {
				t.Fatal(err)
			}
			mw, err := b.pd.AllocMW(verbs.MWType2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.qp.PostSend([]verbs.SendWR{{ID: 50, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBind{
				MW: mw, RKey: verbs.IncRKey(mw.RKey()), MR: wmr, Addr: wmr.Addr(), Length: 4096, Access: verbs.AccessRemoteWrite}}}); err != nil {
				t.Fatal(err)
			}
			waitWC(t, b.scq, 1, 5*time.Second)
			post(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(a.mr, 0, 100), RemoteAddr: wmr.Addr(), RKey: mw.RKey()})
			if !bytes.Equal(wmr.Bytes()[:100], src[:100]) {
				t.Fatal("WRITE through the window: data differs")
			}
			if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: 4, SGList: sgl(b.mr, 0, 64)}}); err != nil {
				t.Fatal(err)
			}
			post(verbs.SendWR{Opcode: verbs.WRSendWithInv, SGList: sgl(a.mr, 3, 40), InvRKey: mw.RKey()})
			if wc := waitWC(t, b.rcq, 1, 5*time.Second)[0]; wc.WRID != 4 || wc.ByteLen != 40 || wc.Flags&verbs.WCWithInvalidate == 0 || wc.InvalidatedKey != mw.RKey() || !bytes.Equal(dst[:40], src[3:43]) {
				t.Fatalf("SEND_WITH_INV completion %+v", wc)
			}
		})
	}
}

// msgPattern fills b with message id's bytes: the id, then a sequence that
// depends on it, so every message's content is its own.
func msgPattern(b []byte, id int) {
	binary.LittleEndian.PutUint64(b, uint64(id))
	for i := 8; i < len(b); i++ {
		b[i] = byte(id*7 + i*13 + id>>8)
	}
}

// TestVerbsUnderLinkFaults moves 10^5 messages (WRITE, SEND, READ and
// FETCH_ADD in turn) between two devices through a bridge that drops,
// duplicates, corrupts and reorders 5% of RoCEv2 packets each. Every
// message carries its own sequence-numbered bytes and each is checked as it
// completes: a WRITE's target, a SEND's receive buffer, a READ's result
// (it reads back the WRITE two messages before it), and each FETCH_ADD's
// original value (the number of FETCH_ADDs before it: none ran twice).
func TestVerbsUnderLinkFaults(t *testing.T) {
	verbsUnderLinkFaults(t, verbs.Options{}, 100000)
}

// TestVerbsUnderLinkFaultsCoalesced is the same (fewer messages) with
// engines that never spin and coalesce their receive wakeups, as on one
// CPU: whatever the faults do to a stream arrives in the batches a sleep
// gathered, and the NAKs and resends they call for may wait out a sleep.
func TestVerbsUnderLinkFaultsCoalesced(t *testing.T) {
	verbsUnderLinkFaults(t, verbs.Options{SpinMax: -1, RxCoalesce: 2 * time.Millisecond}, 20000)
}

func verbsUnderLinkFaults(t *testing.T, opts verbs.Options, messages int) {
	faults := &impair.Config{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 42}
	topo := netns.New(t, netns.Config{Kind: netns.Bridge, Queues: 1, Faults: faults})
	a, b := openRNICWith(t, topo.Hosts[0], 1<<20, opts), openRNICWith(t, topo.Hosts[1], 1<<20, opts)
	if opts.RxCoalesce > 0 && !strings.Contains(a.dev.QueryPort().DataPath, "coalesced") {
		t.Fatalf("receive coalescing asked for, the data path is %q", a.dev.QueryPort().DataPath)
	}
	connectRC(t, a, b, verbs.MTU1024, 8)
	const depth = 64
	const size = 64
	const slots = 4096 // WRITE/SEND source slots at A, WRITE target slots at B
	const bufs = 256   // receive buffers at B, READ targets at A
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	// Layout: A [0, slots*size) sources, [half, ...) FETCH_ADD results, then
	// READ targets; B [0, slots*size) WRITE targets, the counter at half,
	// then receive buffers.
	const half = 1 << 19
	const fetchAt, readAt, recvAt = half, half + 8192, half + 4096
	binary.LittleEndian.PutUint64(dst[half:], 0)
	want := make([]byte, size)
	check := func(what string, id int, got []byte) {
		t.Helper()
		msgPattern(want, id)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s %d: the bytes differ after the lossy link", what, id)
		}
	}
	start := time.Now()
	posted, done, sends, recvd, adds := 0, 0, 0, 0, 0
	rbuf := make([]verbs.WorkCompletion, 256)
	// Drain B's receive completions as an application would (a full CQ
	// would, rightly, put B's QP in the error state), checking each SEND's
	// bytes before its buffer is reposted: a receive completes before its
	// SEND's ACK, so before A can post the SEND that reuses the buffer.
	drain := func() {
		for _, wc := range rbuf[:b.rcq.Poll(rbuf)] {
			if wc.Status != verbs.WCSuccess || wc.ByteLen != size {
				t.Fatalf("receive %+v", wc)
			}
			id := int(wc.WRID)
			o := recvAt + id/4%bufs*size
			check("SEND", id, dst[o:o+size])
			recvd++
		}
	}
	for done < messages {
		drain()
		var wrs []verbs.SendWR
		for posted < messages && posted-done < depth {
			id := posted
			slot := id % slots
			msgPattern(src[slot*size:slot*size+size], id)
			wr := verbs.SendWR{ID: uint64(id), Flags: verbs.SendSignaled, SGList: sgl(a.mr, slot*size, size), RKey: b.mr.RKey()}
			switch id % 4 {
			case 0:
				wr.Opcode, wr.RemoteAddr = verbs.WRRDMAWrite, b.mr.Addr()+uint64(slot*size)
			case 1:
				wr.Opcode = verbs.WRSend
				if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(id), SGList: sgl(b.mr, recvAt+id/4%bufs*size, size)}}); err != nil {
					t.Fatal(err)
				}
				sends++
			case 2:
				// Read back what the WRITE two messages before wrote.
				wr.Opcode, wr.RemoteAddr = verbs.WRRDMARead, b.mr.Addr()+uint64((id-2)%slots*size)
				wr.SGList = sgl(a.mr, readAt+id/4%bufs*size, size)
			case 3:
				wr.Opcode, wr.RemoteAddr, wr.CompareAdd = verbs.WRAtomicFetchAdd, b.mr.Addr()+half, 1
				wr.SGList = sgl(a.mr, fetchAt+id/4%bufs*8, 8)
				adds++
			}
			wrs = append(wrs, wr)
			posted++
		}
		if len(wrs) > 0 {
			if _, err := a.qp.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
		}
		// Completions come in order; each message's memory is not reused
		// before the next round posts (depth < slots, bufs).
		for _, wc := range waitWC(t, a.scq, 1, 30*time.Second) {
			id := int(wc.WRID)
			if id != done {
				t.Fatalf("completion of message %d, want %d", id, done)
			}
			switch id % 4 {
			case 0:
				o := id % slots * size
				check("WRITE", id, dst[o:o+size])
			case 2:
				o := readAt + id/4%bufs*size
				check("READ of the WRITE", id-2, src[o:o+size])
			case 3:
				if got := binary.LittleEndian.Uint64(src[fetchAt+id/4%bufs*8:]); got != uint64(id/4) {
					t.Fatalf("FETCH_ADD %d returned %d, want %d: an atomic ran twice or never", id, got, id/4)
				}
			}
			done++
		}
		if time.Since(start) > 240*time.Second {
			t.Fatalf("only %d of %d messages after 4 minutes", done, messages)
		}
	}
	if got := binary.LittleEndian.Uint64(dst[half:]); got != uint64(adds) {
		t.Fatalf("the counter is %d after %d FETCH_ADDs: an atomic ran twice or never", got, adds)
	}
	deadline := time.Now().Add(10 * time.Second)
	for recvd < sends {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d receives completed", recvd, sends)
		}
		drain()
		time.Sleep(100 * time.Microsecond)
	}
	inj := topo.Injector(topo.Hosts[0]).Counters()
	c, _ := a.dev.Counters()
	t.Logf("%d WRITE/SEND/READ/FETCH_ADD in %v, each checked; injector %+v; requester retries %d", messages, time.Since(start), inj, c.CompleterRetryErr)
	if inj.Dropped == 0 || inj.Duplicate == 0 || inj.Corrupted == 0 || inj.Reordered == 0 {
		t.Errorf("the injector did not exercise every fault: %+v", inj)
	}
}

// TestVerbsOverTwoQueues runs RC QPs between two devices on a two-queue
// veth pair, with QPs on both queues (each is served by the engine of the
// queue of its UDP source port, so both ends' frames for a QP stay on one
// queue): every QP's WRITE, READ and SEND move their bytes intact, whichever
// queue it is on, and each queue's engine carries its own QPs' traffic.
func TestVerbsOverTwoQueues(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 2, MTU: 4200})
	a, b := openRNIC(t, topo.Hosts[0], 1<<20), openRNIC(t, topo.Hosts[1], 1<<20)
	if qa, qb := a.dev.QueryPort().DataPath, b.dev.QueryPort().DataPath; !strings.Contains(qa, "2 queue(s)") || !strings.Contains(qb, "2 queue(s)") {
		t.Fatalf("devices not on two queues: %q, %q", qa, qb)
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	type qpPair struct{ qa, qb *verbs.QP }
	var pairs []qpPair
	onQueue := [2]int{}
	for len(pairs) < 32 && (len(pairs) < 4 || onQueue[0] == 0 || onQueue[1] == 0) {
		var p qpPair
		for _, s := range []struct {
			r  *rnic
			qp **verbs.QP
		}{{a, &p.qa}, {b, &p.qb}} {
			qp, err := s.r.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.r.scq, RecvCQ: s.r.rcq,
				Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			*s.qp = qp
		}
		for _, s := range []struct {
			me, peer *verbs.QP
			host     *netns.Host
		}{{p.qa, p.qb, b.host}, {p.qb, p.qa, a.host}} {
			if err := s.me.Connect(verbs.Peer{Access: access, AH: verbs.AH{DGID: s.host.Addr, SGIDIndex: 1, HopLimit: 64},
				PathMTU: verbs.MTU4096, DestQPN: s.peer.QPN(), RQPSN: 1, SQPSN: 1, MaxDestRdAtomic: 16, MinRNRTimer: 12,
				Timeout: 12, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}); err != nil {
				t.Fatal(err)
			}
		}
		onQueue[wire.UDPSourcePort(0, p.qa.QPN(), p.qb.QPN())%2]++
		pairs = append(pairs, p)
	}
	if onQueue[0] == 0 || onQueue[1] == 0 {
		t.Fatalf("%d QP pairs, none on one of the queues: %v", len(pairs), onQueue)
	}
	const size = 3 * 4096 // three packets each way
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	for i, p := range pairs {
		off := i * size
		msgPattern(src[off:off+size], i)
		if _, err := p.qb.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGList: sgl(b.mr, 512<<10+off, size)}}); err != nil {
			t.Fatal(err)
		}
		wrs := []verbs.SendWR{
			{Opcode: verbs.WRRDMAWrite, SGList: sgl(a.mr, off, size), RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()},
			{Opcode: verbs.WRRDMARead, SGList: sgl(a.mr, 512<<10+off, size), RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()},
			{Opcode: verbs.WRSend, SGList: sgl(a.mr, off, size), Flags: verbs.SendSignaled},
		}
		if _, err := p.qa.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
	}
	waitWC(t, a.scq, len(pairs), 20*time.Second)
	waitWC(t, b.rcq, len(pairs), 5*time.Second)
	for i := range pairs {
		off := i * size
		want := src[off : off+size]
		if !bytes.Equal(dst[off:off+size], want) || !bytes.Equal(src[512<<10+off:512<<10+off+size], want) ||
			!bytes.Equal(dst[512<<10+off:512<<10+off+size], want) {
			t.Fatalf("QP pair %d (queue %d): WRITE, READ or SEND bytes differ", i, wire.UDPSourcePort(0, pairs[i].qa.QPN(), pairs[i].qb.QPN())%2)
		}
	}
	// Each queue has its own engine, and on veth a QP's frames arrive on
	// the queue it sends on: both engines carry traffic, none is handed over.
	for _, r := range []*rnic{a, b} {
		per, err := r.dev.QueueCounters()
		if err != nil {
			t.Fatal(err)
		}
		for q, c := range per {
			if c.RcvdPkts == 0 || c.SentPkts == 0 || c.HandedOff != 0 {
				t.Errorf("%s queue %d: received %d, sent %d, handed over %d", r.host.Name, q, c.RcvdPkts, c.SentPkts, c.HandedOff)
			}
		}
	}
	t.Logf("%d QP pairs, %v per queue", len(pairs), onQueue)
}

// TestBusyPollOverXDP: a device opened with Options.BusyPoll spins (the
// option reaches the engines), and an 8 B WRITE ping-pong runs on it.
func TestBusyPollOverXDP(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1, MTU: 1500})
	a := openRNICWith(t, topo.Hosts[0], 1<<16, verbs.Options{BusyPoll: true})
	b := openRNICWith(t, topo.Hosts[1], 1<<16, verbs.Options{BusyPoll: true})
	connectRC(t, a, b, verbs.MTU1024, 14)
	for i := range 100 {
		from, to := a, b
		if i%2 == 1 {
			from, to = b, a
		}
		if _, err := from.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(from.mr, 0, 8), RemoteAddr: to.mr.Addr() + 64, RKey: to.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, from.scq, 1, 5*time.Second)
	}
}
