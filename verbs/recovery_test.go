package verbs

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// TestLossyLinkMovesEveryByte runs SENDs, WRITEs, READs and atomics over a
// link that drops, duplicates, corrupts and reorders 5% of frames each way,
// and checks every byte and that atomics are executed exactly once.
func TestLossyLinkMovesEveryByte(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			a, b, la, lb := pair(t, connOpts{mtu: MTU1024, psnA: 0xffff00, psnB: 0x10, timeout: 8}, 1<<20)
			imp := memlink.Impairment{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: seed}
			la.SetImpairment(imp)
			imp.Seed += 100
			lb.SetImpairment(imp)
			const rounds = 300
			const slot = 3000
			counter := b.mr.Bytes()[0:8]
			binary.LittleEndian.PutUint64(counter, 0)
			for r := range rounds {
				n := (r * 37) % 2900
				src := a.mr.Bytes()[8+r%200*slot/100:]
				fill(src[:n], r)
				switch r % 4 {
				case 0:
					postRecv(t, b, RecvWR{ID: uint64(r), SGList: sge(b.mr, 4096+r%100*slot, n)})
					postSend(t, a, SendWR{ID: uint64(r), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 8+r%200*slot/100, n)})
				case 1:
					postSend(t, a, SendWR{ID: uint64(r), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 8+r%200*slot/100, n),
						RemoteAddr: b.mr.Addr() + 4096 + uint64(r%100*slot), RKey: b.mr.RKey()})
				case 2:
					postSend(t, a, SendWR{ID: uint64(r), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 700000, n),
						RemoteAddr: b.mr.Addr() + 4096 + uint64((r-1)%100*slot), RKey: b.mr.RKey()})
				case 3:
					postSend(t, a, SendWR{ID: uint64(r), Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 900000, 8),
						RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1})
				}
				if got := pollWait(a.scq, 5*time.Second); got == nil {
					t.Fatalf("round %d: no completion; A %s; B %s; counters A %+v B %+v links %+v %+v", r, dumpQP(a.qp), dumpQP(b.qp), counters(a.dev), counters(b.dev), la.Stats(), lb.Stats())
				}
				wc := poll(t, a.scq, 1, 5*time.Second)[0]
				if wc.Status != WCSuccess || wc.WRID != uint64(r) {
					t.Fatalf("round %d: completion %+v", r, wc)
				}
				dst := b.mr.Bytes()[4096+r%100*slot:]
				switch r % 4 {
				case 0:
					rwc := poll(t, b.rcq, 1, 10*time.Second)[0]
					if rwc.Status != WCSuccess || rwc.ByteLen != uint32(n) {
						t.Fatalf("round %d: receive %+v", r, rwc)
					}
					equalBytes(t, fmt.Sprint("SEND ", r), dst[:n], src[:n])
				case 1:
					equalBytes(t, fmt.Sprint("WRITE ", r), dst[:n], src[:n])
				case 2:
					equalBytes(t, fmt.Sprint("READ ", r), a.mr.Bytes()[700000:700000+n], b.mr.Bytes()[4096+(r-1)%100*slot:][:n])
				case 3:
					if got := binary.LittleEndian.Uint64(a.mr.Bytes()[900000:]); got != uint64(r/4) {
						t.Fatalf("round %d: FETCH_ADD returned %d, want %d (executed twice?)", r, got, r/4)
					}
				}
			}
			if got := binary.LittleEndian.Uint64(counter); got != rounds/4 {
				t.Fatalf("counter is %d after %d FETCH_ADDs", got, rounds/4)
			}
			ca, _ := a.dev.Counters()
			cb, _ := b.dev.Counters()
			sa, sb := la.Stats(), lb.Stats()
			if sa.Dropped == 0 || sa.Corrupted == 0 || sa.Duplicated == 0 || sa.Reordered == 0 || ca.CompleterRetryErr == 0 || cb.DuplicateRequest == 0 || ca.DroppedMalformed+cb.DroppedMalformed == 0 {
				t.Errorf("the faults were not exercised: link %+v %+v, counters %+v %+v", sa, sb, ca, cb)
			}
		})
	}
}

func TestRNRThenSuccess(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{minRNR: 1, rnr: 7}, 1<<16)
	fill(a.mr.Bytes()[:100], 3)
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 100)})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, _ := b.dev.Counters()
		if c.SendRNRErr > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK sent while no receive was posted")
		}
		time.Sleep(time.Millisecond)
	}
	postRecv(t, b, RecvWR{ID: 9, SGList: sge(b.mr, 0, 200)})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("send after RNR: %+v", wc)
	}
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.ByteLen != 100 {
		t.Fatalf("receive after RNR: %+v", wc)
	}
	ca, _ := a.dev.Counters()
	if ca.RcvdRNRErr == 0 {
		t.Error("requester counted no RNR NAK")
	}
}

func TestRNRRetryExhausted(t *testing.T) {
	a, _, _, _ := pair(t, connOpts{minRNR: 1, rnr: 2}, 1<<16)
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRSend, SGList: sge(a.mr, 0, 10)},
		SendWR{ID: 2, Opcode: WRRDMAWrite, SGList: sge(a.mr, 0, 10)})
	wcs := poll(t, a.scq, 2, 5*time.Second)
	if wcs[0].WRID != 1 || wcs[0].Status != WCRNRRetryExcErr || wcs[1].WRID != 2 || wcs[1].Status != WCWRFlushErr {
		t.Fatalf("completions %+v, want RNR_RETRY_EXC_ERR then WR_FLUSH_ERR", wcs)
	}
	if a.qp.State() != StateErr {
		t.Fatalf("QP in %v after RNR retries ran out", a.qp.State())
	}
}

func TestRetryExhaustedWhenPeerIsGone(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{timeout: 1, retry: 3}, 1<<16)
	must(t, b.dev.Close())
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 2, Opcode: WRSend, SGList: sge(a.mr, 0, 10)})
	postRecv(t, a, RecvWR{ID: 7, SGList: sge(a.mr, 100, 10)})
	wcs := poll(t, a.scq, 2, 5*time.Second)
	if wcs[0].Status != WCRetryExcErr || wcs[1].Status != WCWRFlushErr {
		t.Fatalf("completions %+v, want RETRY_EXC_ERR then WR_FLUSH_ERR", wcs)
	}
	if r := poll(t, a.rcq, 1, time.Second)[0]; r.Status != WCWRFlushErr || r.WRID != 7 {
		t.Fatalf("receive after the error: %+v", r)
	}
	c, _ := a.dev.Counters()
	if c.RetryExceededErr != 1 || c.CompleterRetryErr != 4 {
		t.Errorf("counters %+v: want 3 retries plus the one that exceeded", c)
	}
}

func TestModifyToErrorFlushes(t *testing.T) {
	a, _, _, _ := pair(t, connOpts{}, 1<<16)
	postRecv(t, a, RecvWR{ID: 1, SGList: sge(a.mr, 0, 10)}, RecvWR{ID: 2, SGList: sge(a.mr, 0, 10)})
	must(t, a.qp.Modify(QPAttr{State: StateErr}, AttrState))
	wcs := poll(t, a.rcq, 2, time.Second)
	for i, wc := range wcs {
		if wc.Status != WCWRFlushErr || wc.WRID != uint64(i+1) {
			t.Fatalf("flushed receive %d: %+v", i, wc)
		}
	}
	// Posting in ERR is allowed and completes with WR_FLUSH_ERR, signaled or not.
	postSend(t, a, SendWR{ID: 5, Opcode: WRSend, SGList: sge(a.mr, 0, 1)})
	if wc := poll(t, a.scq, 1, time.Second)[0]; wc.Status != WCWRFlushErr || wc.WRID != 5 {
		t.Fatalf("send posted in ERR: %+v", wc)
	}
}

func TestUnsignaledCompleteSilentlyInOrder(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	for i := range 10 {
		flags := SendFlags(0)
		if i%3 == 2 {
			flags = SendSignaled
		}
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: flags, SGList: sge(a.mr, 0, 100), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	wcs := poll(t, a.scq, 3, 5*time.Second)
	for i, wc := range wcs {
		if wc.WRID != uint64(3*i+2) || wc.Status != WCSuccess {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	// All ten slots are free again: the queue accepts max_send_wr more.
	deadline := time.Now().Add(time.Second)
	for sendOutstanding(tqp(a.qp)) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := sendOutstanding(tqp(a.qp)); n != 0 {
		t.Fatalf("%d send slots still held after all completed", n)
	}
}
