package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/test/netns"
	"github.com/xdproce/xdproce/verbs"
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
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.StateInit, Port: 1, AccessFlags: access},
				verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AH{DGID: s.peer.host.Addr, SGIDIndex: 1, HopLimit: 64},
				PathMTU: mtu, DestQPN: s.peer.qp.QPN(), RQPSN: 0x100, MaxDestRdAtomic: 16, MinRNRTimer: 12},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.StateRTS, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, SQPSN: 0x100, MaxRdAtomic: 16},
				verbs.AttrState | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrSQPSN | verbs.AttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if err := s.me.qp.Modify(st.attr, st.mask); err != nil {
				t.Fatalf("%s: modify to %v: %v", s.me.host.Name, st.attr.State, err)
			}
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
// 1024 on a 1500 link and 4096 on a 4200 link (two-descriptor frames).
func TestVerbsEveryOperationOverXDP(t *testing.T) {
	for _, tc := range []struct {
		linkMTU int
		mtu     verbs.MTU
	}{{1500, verbs.MTU1024}, {4200, verbs.MTU4096}} {
		t.Run(fmt.Sprint(tc.linkMTU), func(t *testing.T) {
			topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: tc.linkMTU, Queues: 1})
			a, b := openRNIC(t, topo.Hosts[0], 4<<20), openRNIC(t, topo.Hosts[1], 4<<20)
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
		})
	}
}

// TestVerbsUnderLinkFaults moves 10^5 messages (WRITE, SEND, READ and
// FETCH_ADD in turn) between two devices through a bridge that drops,
// duplicates, corrupts and reorders 5% of RoCEv2 packets each, and checks
// the bytes and that no atomic ran twice.
func TestVerbsUnderLinkFaults(t *testing.T) {
	faults := &impair.Config{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 42}
	topo := netns.New(t, netns.Config{Kind: netns.Bridge, Queues: 1, Faults: faults})
	a, b := openRNIC(t, topo.Hosts[0], 1<<20), openRNIC(t, topo.Hosts[1], 1<<20)
	connectRC(t, a, b, verbs.MTU1024, 8)
	const messages = 100000
	const depth = 64
	const size = 64
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	for i := range src {
		src[i] = byte(i*31 + i>>8)
	}
	// B's second half is what A reads back; its counter at offset 0 of the
	// second half takes the FETCH_ADDs.
	const half = 1 << 19
	for i := half; i < len(dst); i++ {
		dst[i] = byte(i * 3)
	}
	binary.LittleEndian.PutUint64(dst[half:], 0)
	start := time.Now()
	posted, done, sends, recvd, adds := 0, 0, 0, 0, 0
	rbuf := make([]verbs.WorkCompletion, 256)
	for done < messages {
		// Drain B's receive completions as an application would; a full CQ
		// would (rightly) put B's QP in the error state.
		for _, wc := range rbuf[:b.rcq.Poll(rbuf)] {
			if wc.Status != verbs.WCSuccess || wc.ByteLen != size {
				t.Fatalf("receive %+v", wc)
			}
			recvd++
		}
		var wrs []verbs.SendWR
		for posted < messages && posted-done < depth {
			slot := posted % 4096
			wr := verbs.SendWR{ID: uint64(posted), Flags: verbs.SendSignaled, SGList: sgl(a.mr, slot*size, size), RKey: b.mr.RKey()}
			switch posted % 4 {
			case 0:
				wr.Opcode, wr.RemoteAddr = verbs.WRRDMAWrite, b.mr.Addr()+uint64(slot*size)
			case 1:
				wr.Opcode = verbs.WRSend
				if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(posted), SGList: sgl(b.mr, half+4096+slot%64*size, size)}}); err != nil {
					t.Fatal(err)
				}
				sends++
			case 2:
				wr.Opcode, wr.RemoteAddr = verbs.WRRDMARead, b.mr.Addr()+half+8+uint64(slot%64*size)
				wr.SGList = sgl(a.mr, half+slot%64*size, size)
			case 3:
				wr.Opcode, wr.RemoteAddr, wr.CompareAdd = verbs.WRAtomicFetchAdd, b.mr.Addr()+half, 1
				wr.SGList = sgl(a.mr, half+8192+slot%64*8, 8)
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
		wcs := waitWC(t, a.scq, 1, 30*time.Second)
		done += len(wcs)
		if time.Since(start) > 240*time.Second {
			t.Fatalf("only %d of %d messages after 4 minutes", done, messages)
		}
	}
	for slot := 0; slot < 4096; slot += 4 { // the WRITEs' slots
		if o := slot * size; !bytes.Equal(dst[o:o+size], src[o:o+size]) {
			t.Fatalf("written slot %d differs after the lossy run", slot)
		}
	}
	for slot := 2; slot < 64; slot += 4 { // the READs' slots
		if o := slot * size; !bytes.Equal(src[half+o:half+o+size], dst[half+8+o:half+8+o+size]) {
			t.Fatalf("read slot %d differs after the lossy run", slot)
		}
	}
	if got := binary.LittleEndian.Uint64(dst[half:]); got != uint64(adds) {
		t.Fatalf("the counter is %d after %d FETCH_ADDs: an atomic ran twice or never", got, adds)
	}
	for _, wc := range waitWC(t, b.rcq, sends-recvd, 10*time.Second) {
		if wc.ByteLen != size {
			t.Fatalf("receive %+v", wc)
		}
	}
	inj := topo.Injector(topo.Hosts[0]).Counters()
	c, _ := a.dev.Counters()
	t.Logf("%d WRITE/SEND/READ/FETCH_ADD in %v; injector %+v; requester retries %d", messages, time.Since(start), inj, c.CompleterRetryErr)
	if inj.Dropped == 0 || inj.Duplicate == 0 || inj.Corrupted == 0 || inj.Reordered == 0 {
		t.Errorf("the injector did not exercise every fault: %+v", inj)
	}
}
