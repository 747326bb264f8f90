package verbs

import (
	"bytes"
	"testing"
	"time"
)

// TestInlineLimits: INLINE data over the QP's max_inline_data fails the
// post with EINVAL at that WR, the WRs before it are posted and complete;
// INLINE READ and atomics are refused as ibverbs (rxe) does.
func TestInlineLimits(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16) // max_inline_data 64
	fill(a.mr.Bytes()[:128], 8)
	wrs := []SendWR{
		{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled | SendInline, SGList: sge(a.mr, 0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 64, 64), RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()},
		{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled | SendInline, SGList: append(sge(a.mr, 0, 60), sge(a.mr, 60, 5)...), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{ID: 4, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	}
	if i, err := a.qp.PostSend(wrs); i != 2 || !isErr(err, ErrInvalid) {
		t.Fatalf("65 inline bytes on a QP with max_inline_data 64: bad WR %d, %v; want 2, EINVAL", i, err)
	}
	wcs := poll(t, a.scq, 2, 5*time.Second)
	if wcs[0].WRID != 1 || wcs[1].WRID != 2 || wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess {
		t.Fatalf("completions of the WRs before the bad one: %+v", wcs)
	}
	equalBytes(t, "inline WRITE", b.mr.Bytes()[:128], a.mr.Bytes()[:128])
	for _, wr := range []SendWR{
		{ID: 5, Opcode: WRRDMARead, Flags: SendInline, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{ID: 6, Opcode: WRAtomicFetchAdd, Flags: SendInline, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{ID: 7, Opcode: WRAtomicCmpAndSwp, Flags: SendInline, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	} {
		if i, err := a.qp.PostSend([]SendWR{wr}); i != 0 || !isErr(err, ErrInvalid) {
			t.Errorf("INLINE opcode %d: bad WR %d, %v; want 0, EINVAL", wr.Opcode, i, err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	if n := pending(a.scq); n != 0 || a.qp.State() != StateRTS {
		t.Fatalf("refused posts left %d completions, QP %v", n, a.qp.State())
	}
}

// TestPostSendBadWR: the index PostSend returns is the first WR not queued
// (ibv_post_send's bad_wr): the first WR past a full send queue (ENOMEM), or
// a bad WR at index 0, in which case nothing is queued.
func TestPostSendBadWR(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	qa, qb := *a, *b
	for _, q := range []*node{&qa, &qb} {
		var err error
		q.qp, err = q.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: q.scq, RecvCQ: q.rcq, Cap: QPCap{MaxSendWR: 4}})
		must(t, err)
	}
	connect(t, &qa, &qb, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
	write := func(id uint64) SendWR {
		return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}
	// A bad WR first: nothing is queued.
	if i, err := qa.qp.PostSend([]SendWR{{ID: 100, Opcode: WROpcode(42)}, write(101)}); i != 0 || !isErr(err, ErrInvalid) {
		t.Fatalf("bad WR at index 0: bad WR %d, %v; want 0, EINVAL", i, err)
	}
	// SQD holds the WRs queued, so the queue fills.
	must(t, qa.qp.Modify(QPAttr{State: StateSQD}, AttrState))
	if i, err := qa.qp.PostSend([]SendWR{write(1), write(2), write(3), write(4), write(5), write(6)}); i != 4 || !isErr(err, ErrNoMem) {
		t.Fatalf("6 WRs on a 4-WR send queue: bad WR %d, %v; want 4, ENOMEM", i, err)
	}
	if i, err := qa.qp.PostSend([]SendWR{write(7)}); i != 0 || !isErr(err, ErrNoMem) {
		t.Fatalf("a WR on a full send queue: bad WR %d, %v; want 0, ENOMEM", i, err)
	}
	must(t, qa.qp.Modify(QPAttr{State: StateRTS}, AttrState))
	wcs := poll(t, qa.scq, 4, 5*time.Second)
	for i, wc := range wcs {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completions %+v, want WRs 1-4", wcs)
		}
	}
	time.Sleep(10 * time.Millisecond)
	if n := pending(qa.scq); n != 0 {
		t.Fatalf("%d completions for WRs that were not queued", n)
	}
}

// TestRemoteOperationalError: a receive WR whose SGE names a bad lkey (or
// lies outside its region) is a malformed WQE: as rxe, the receive completes
// with LOC_QP_OP_ERR, the requester's SEND with REM_OP_ERR (NAK remote
// operational error), nothing is written and both QPs end in ERR.
func TestRemoteOperationalError(t *testing.T) {
	for _, tc := range []struct {
		name string
		sge  func(b *node) []SGE
	}{
		{"bad lkey", func(b *node) []SGE { return []SGE{{Addr: b.mr.Addr(), Length: 256, LKey: b.mr.LKey() ^ 1}} }},
		{"outside the region", func(b *node) []SGE { return sge(b.mr, b.mr.Len()-100, 256) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _, _ := pair(t, connOpts{}, 1<<16)
			fill(a.mr.Bytes()[:256], 12)
			before := bytes.Clone(b.mr.Bytes())
			postRecv(t, b, RecvWR{ID: 9, SGList: tc.sge(b)})
			postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 256)})
			if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCLocQPOpErr || wc.WRID != 9 {
				t.Fatalf("receive completion %+v, want LOC_QP_OP_ERR", wc)
			}
			if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemOpErr || wc.WRID != 1 {
				t.Fatalf("send completion %+v, want REM_OP_ERR", wc)
			}
			if !bytes.Equal(before, b.mr.Bytes()) {
				t.Fatal("the responder's memory changed")
			}
			deadline := time.Now().Add(time.Second)
			for b.qp.State() != StateErr && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if a.qp.State() != StateErr || b.qp.State() != StateErr {
				t.Fatalf("states: requester %v, responder %v; want ERR, ERR", a.qp.State(), b.qp.State())
			}
		})
	}
}
