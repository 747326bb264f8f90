package verbs

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// TestEveryOpAtEveryMTU: WRITE and READ of sizes around the path MTU, and
// both atomics, at every path MTU from 256 to 4096, checked byte for byte.
func TestEveryOpAtEveryMTU(t *testing.T) {
	for _, mtu := range []MTU{MTU256, MTU512, MTU1024, MTU2048, MTU4096} {
		n := mtu.Bytes()
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			a, b, _, _ := pair(t, connOpts{mtu: mtu}, 1<<17)
			const half = 1 << 16
			id := uint64(0)
			for _, size := range []int{1, n - 1, n, n + 1, 5*n + 3, half - 8} {
				id++
				src := a.mr.Bytes()[:size]
				fill(src, int(id))
				postSend(t, a, SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()})
				if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != id || wc.ByteLen != uint32(size) {
					t.Fatalf("WRITE of %d: %+v", size, wc)
				}
				equalBytes(t, fmt.Sprint("WRITE of ", size), b.mr.Bytes()[8:8+size], src)
				id++
				fill(b.mr.Bytes()[half:half+size], int(id))
				postSend(t, a, SendWR{ID: id, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, half+8, size), RemoteAddr: b.mr.Addr() + half, RKey: b.mr.RKey()})
				if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != id || wc.ByteLen != uint32(size) {
					t.Fatalf("READ of %d: %+v", size, wc)
				}
				equalBytes(t, fmt.Sprint("READ of ", size), a.mr.Bytes()[half+8:half+8+size], b.mr.Bytes()[half:half+size])
			}
			target := b.mr.Bytes()[8:16]
			binary.LittleEndian.PutUint64(target, 0x1111)
			for i, op := range []struct {
				wr         SendWR
				orig, want uint64
			}{
				{SendWR{Opcode: WRAtomicCmpAndSwp, CompareAdd: 0x1111, Swap: 0x2222}, 0x1111, 0x2222},      // swaps
				{SendWR{Opcode: WRAtomicCmpAndSwp, CompareAdd: 0x1111, Swap: 0x3333}, 0x2222, 0x2222},      // compare fails
				{SendWR{Opcode: WRAtomicFetchAdd, CompareAdd: 0xffff_0000_0000}, 0x2222, 0xffff_0000_2222}, // adds
				{SendWR{Opcode: WRAtomicFetchAdd, CompareAdd: ^uint64(0)}, 0xffff_0000_2222, 0xffff_0000_2221},
			} {
				wr := op.wr
				wr.ID, wr.Flags, wr.SGList, wr.RemoteAddr, wr.RKey = uint64(100+i), SendSignaled, sge(a.mr, 4096, 8), b.mr.Addr()+8, b.mr.RKey()
				postSend(t, a, wr)
				if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != wr.ID {
					t.Fatalf("atomic %d: %+v", i, wc)
				}
				if got := binary.LittleEndian.Uint64(a.mr.Bytes()[4096:]); got != op.orig {
					t.Fatalf("atomic %d returned %#x, want %#x", i, got, op.orig)
				}
				if got := binary.LittleEndian.Uint64(target); got != op.want {
					t.Fatalf("atomic %d left %#x, want %#x", i, got, op.want)
				}
			}
		})
	}
}

// faults is the impairment of the fault tests: 5% each of drop,
// duplication, reordering and corruption.
func faults(seed uint64) memlink.Impairment {
	return memlink.Impairment{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: seed}
}

// TestSendSeveralMiB: one 3 MiB SEND, gathered from three SGEs and
// scattered into three, lossless and under faults.
func TestSendSeveralMiB(t *testing.T) {
	const size = 3 << 20
	for _, lossy := range []bool{false, true} {
		t.Run(fmt.Sprint("faults=", lossy), func(t *testing.T) {
			a, b, la, lb := pair(t, connOpts{mtu: MTU4096, timeout: 8}, size+4096)
			if lossy {
				la.SetImpairment(faults(11))
				lb.SetImpairment(faults(12))
			}
			src := a.mr.Bytes()[:size]
			fill(src, 9)
			third := size / 3
			postRecv(t, b, RecvWR{ID: 7, SGList: []SGE{sge(b.mr, 0, third)[0], sge(b.mr, third, third)[0], sge(b.mr, 2*third, size-2*third+100)[0]}})
			postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: []SGE{sge(a.mr, 0, 1000)[0], sge(a.mr, 1000, third)[0], sge(a.mr, 1000+third, size-1000-third)[0]}})
			if wc := poll(t, a.scq, 1, 20*time.Second)[0]; wc.Status != WCSuccess || wc.ByteLen != size {
				t.Fatalf("SEND: %+v", wc)
			}
			if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 7 || wc.ByteLen != size {
				t.Fatalf("receive: %+v", wc)
			}
			equalBytes(t, "3 MiB SEND", b.mr.Bytes()[:size], src)
			if lossy {
				if s := la.Stats(); s.Dropped == 0 || s.Corrupted == 0 || s.Reordered == 0 || s.Duplicated == 0 {
					t.Errorf("faults not exercised: %+v", s)
				}
			}
		})
	}
}

// opTap watches a requester's link (and its peer's) for what the fault
// tests must exercise: an AckReq before a message's last packet, a READ
// resumed from the middle, and a full window of unacknowledged PSNs.
type opTap struct {
	mu          sync.Mutex
	midAckReq   int    // non-last packets that ask for an ACK
	readResumed int    // READ requests for the rest of a READ
	readStart   uint64 // the READ's remote address
	base, span  uint32 // the first message's PSNs
	maxReqPSN   uint32 // its highest PSN sent (relative to base)
	ackPSN      uint32 // its PSNs acknowledged (relative to base)
	maxUnacked  uint32 // most of its PSNs sent and not acknowledged
	any         bool
}

func (o *opTap) install(req, resp *memlink.Link, base, span uint32) {
	o.base, o.span = base, span
	req.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) != nil {
			return false
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		info, _ := p.BTH.Opcode.Info()
		if p.BTH.AckReq && info.Flags&wire.FlagEnd == 0 {
			o.midAckReq++
		}
		if p.BTH.Opcode == wire.RCReadRequest && p.RETH.VA != o.readStart && o.readStart != 0 {
			o.readResumed++
		}
		// The window, measured on the first message (a WRITE from PSN base):
		// how far its packets run ahead of the last ACK within it.
		if rel := (p.BTH.PSN - o.base) & 0xffffff; rel < o.span && (!o.any || rel > o.maxReqPSN) {
			o.maxReqPSN, o.any = rel, true
		}
		if o.any && o.maxReqPSN+1-o.ackPSN > o.maxUnacked {
			o.maxUnacked = o.maxReqPSN + 1 - o.ackPSN
		}
		return false
	})
	resp.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) != nil || p.BTH.Opcode != wire.RCAck || p.AETH.IsRNRNAK() {
			return false
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		acked := (p.BTH.PSN - o.base + 1) & 0xffffff // an ACK acknowledges its PSN,
		if !p.AETH.IsACK() {
			acked = (p.BTH.PSN - o.base) & 0xffffff // a NAK those before it
		}
		if acked <= o.span && acked > o.ackPSN {
			o.ackPSN = acked
		}
		return false
	})
}

// TestLargeOpsUnderFaults: over a link with 5% drop, duplication,
// reordering and corruption each way, multi-packet WRITE, READ, SEND and
// WRITE_WITH_IMM of 200-300 KiB (so AckReq every 64 packets, the 128-PSN
// window and READ resumption from the middle all happen), CMP_SWP, and
// SEND_WITH_INV of a bound type-2 window, each checked byte for byte.
func TestLargeOpsUnderFaults(t *testing.T) {
	const psnA = 0xfffe00 // the PSNs wrap during the test
	a, b, la, lb := pair(t, connOpts{mtu: MTU1024, timeout: 8, psnA: psnA}, 1<<20)
	wmr, err := b.pd.AllocMR(1<<16, AccessLocalWrite|AccessMWBind)
	must(t, err)
	bw := *b
	bw.mr = wmr
	mw := mustBind(t, &bw, 0, 4096, AccessRemoteWrite)
	var tap opTap
	tap.install(la, lb, psnA, 256)
	la.SetImpairment(faults(21))
	lb.SetImpairment(faults(22))

	const wsize, rsize, ssize, isize = 256 << 10, 300 << 10, 200 << 10, 220 << 10
	const immAt = wsize + rsize + ssize + 1024 // B: WRITE, READ source, SEND, SEND_WITH_INV, WRITE_WITH_IMM
	srcA := a.mr.Bytes()
	fill(srcA[:wsize], 1)
	fill(b.mr.Bytes()[wsize:wsize+rsize], 2)
	tap.mu.Lock()
	tap.readStart = b.mr.Addr() + wsize
	tap.mu.Unlock()
	binary.LittleEndian.PutUint64(b.mr.Bytes()[1<<20-8:], 42)
	postRecv(t, b,
		RecvWR{ID: 1, SGList: sge(b.mr, wsize+rsize, ssize)},
		RecvWR{ID: 2, SGList: sge(b.mr, 0, 0)},
		RecvWR{ID: 3, SGList: sge(b.mr, wsize+rsize+ssize, 64)})
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, wsize), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, wsize, rsize), RemoteAddr: b.mr.Addr() + wsize, RKey: b.mr.RKey()},
		SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, ssize)},
		SendWR{ID: 4, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGList: sge(a.mr, 1000, isize), RemoteAddr: b.mr.Addr() + immAt, RKey: b.mr.RKey(), ImmData: 0xfeed},
		SendWR{ID: 5, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGList: sge(a.mr, 1<<20-8, 8), RemoteAddr: b.mr.Addr() + 1<<20 - 8, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 43},
		SendWR{ID: 6, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a.mr, 5, 50), InvRKey: mw.RKey()})
	for i, wc := range poll(t, a.scq, 6, 30*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v; A %s", i, wc, dumpQP(a.qp))
		}
	}
	r := poll(t, b.rcq, 3, 5*time.Second)
	if r[0].WRID != 1 || r[0].Status != WCSuccess || r[0].ByteLen != ssize {
		t.Fatalf("SEND receive %+v", r[0])
	}
	if r[1].WRID != 2 || r[1].Status != WCSuccess || r[1].Opcode != WCRecvRDMAWithImm || r[1].ImmData != 0xfeed || r[1].ByteLen != isize {
		t.Fatalf("WRITE_WITH_IMM receive %+v", r[1])
	}
	if r[2].WRID != 3 || r[2].Status != WCSuccess || r[2].ByteLen != 50 || r[2].Flags&WCWithInvalidate == 0 || r[2].InvalidatedKey != mw.RKey() {
		t.Fatalf("SEND_WITH_INV receive %+v", r[2])
	}
	bm := b.mr.Bytes()
	equalBytes(t, "WRITE", bm[:wsize], srcA[:wsize])
	equalBytes(t, "READ", srcA[wsize:wsize+rsize], bm[wsize:wsize+rsize])
	equalBytes(t, "SEND", bm[wsize+rsize:wsize+rsize+ssize], srcA[:ssize])
	equalBytes(t, "WRITE_WITH_IMM", bm[immAt:immAt+isize], srcA[1000:1000+isize])
	equalBytes(t, "SEND_WITH_INV", bm[wsize+rsize+ssize:][:50], srcA[5:55])
	if got, orig := binary.LittleEndian.Uint64(bm[1<<20-8:]), binary.LittleEndian.Uint64(srcA[1<<20-8:]); got != 43 || orig != 42 {
		t.Fatalf("CMP_SWP left %d and returned %d, want 43 and 42", got, orig)
	}
	// The window is free: a WRITE through the invalidated key is refused.
	la.SetImpairment(memlink.Impairment{})
	lb.SetImpairment(memlink.Impairment{})
	postSend(t, a, SendWR{ID: 7, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: wmr.Addr(), RKey: mw.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("WRITE through the invalidated window: %+v", wc)
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	s := la.Stats()
	t.Logf("AckReq mid-message %d, READ resumed %d, most WRITE PSNs unacknowledged %d, link %+v", tap.midAckReq, tap.readResumed, tap.maxUnacked, s)
	if tap.midAckReq == 0 || tap.readResumed == 0 || tap.maxUnacked != MaxUnackedPSNs || s.Dropped == 0 || s.Duplicated == 0 || s.Reordered == 0 || s.Corrupted == 0 {
		t.Errorf("not exercised: AckReq mid-message %d, READ resumed %d, most WRITE PSNs unacknowledged %d, link %+v", tap.midAckReq, tap.readResumed, tap.maxUnacked, s)
	}
}
