package verbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/wire"
)

// mwPair connects two nodes over memory; b's region allows windows.
func mwPair(t *testing.T) (a, b *node) {
	t.Helper()
	a, b, _, _ = pair(t, connOpts{retry: 7, rnr: 7}, 1<<16)
	mr, err := b.pd.AllocMR(1<<16, AccessLocalWrite|AccessMWBind)
	must(t, err)
	b.mr = mr
	return a, b
}

// bind binds a new window of b over [off, off+n) of b.mr through b's QP and
// returns it with the bind's completion.
func bind(t *testing.T, b *node, off, n int, access Access) (*MW, WorkCompletion) {
	t.Helper()
	mw, err := b.pd.AllocMW(MWType2)
	must(t, err)
	postSend(t, b, SendWR{ID: 100, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{
		MW: mw, RKey: IncRKey(mw.RKey()), MR: b.mr, Addr: b.mr.Addr() + uint64(off), Length: uint64(n), Access: access}})
	return mw, poll(t, b.scq, 1, 5*time.Second)[0]
}

func mustBind(t *testing.T, b *node, off, n int, access Access) *MW {
	t.Helper()
	mw, wc := bind(t, b, off, n, access)
	if wc.Status != WCSuccess || wc.Opcode != WCBindMW || wc.WRID != 100 || wc.ByteLen != 0 {
		t.Fatalf("bind: %+v", wc)
	}
	if k := mw.RKey(); k>>8 < transport.MWFirstIndex {
		t.Fatalf("window rkey %#x lies in the region key space", k)
	}
	return mw
}

// asyncEvent waits for the device's next asynchronous event.
func asyncEvent(t *testing.T, d *Device) AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := d.GetAsyncEvent(ctx)
	must(t, err)
	return ev
}

// noAsyncEvent checks that the device has no event queued.
func noAsyncEvent(t *testing.T, d *Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if ev, err := d.GetAsyncEvent(ctx); err == nil {
		t.Fatalf("unexpected async event %v", ev.Type)
	}
}

// TestMWRemoteAccess: a window bound with a new key byte gives WRITE, READ
// and atomics through its rkey inside its range; SEND_WITH_INV naming it
// frees it (the receive reports the key with rxe's wc_flags bit 2) and a
// WRITE through the dead key then gets REM_ACCESS_ERR, writes nothing, and
// moves the responder QP to ERR with EventQPFatal.
func TestMWRemoteAccess(t *testing.T) {
	a, b := mwPair(t)
	if _, err := b.pd.AllocMW(MWType(3)); !isErr(err, ErrInvalid) {
		t.Fatalf("type-3 window: %v, want EINVAL", err)
	}
	mw, err := b.pd.AllocMW(MWType2)
	must(t, err)
	allocKey := mw.RKey()
	postSend(t, b, SendWR{ID: 100, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{MW: mw, RKey: IncRKey(allocKey), MR: b.mr,
		Addr: b.mr.Addr() + 4096, Length: 8192, Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}})
	if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.Opcode != WCBindMW {
		t.Fatalf("bind: %+v", wc)
	}
	rkey := mw.RKey()
	if rkey != IncRKey(allocKey) || rkey>>8 != allocKey>>8 {
		t.Fatalf("bound rkey %#x, want %#x (same index, next key byte)", rkey, IncRKey(allocKey))
	}
	fill(a.mr.Bytes()[:8192], 3)
	base := b.mr.Addr() + 4096
	binary.LittleEndian.PutUint64(b.mr.Bytes()[4096+8000:], 40)
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8000), RemoteAddr: base, RKey: rkey},
		SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 16384, 8000), RemoteAddr: base, RKey: rkey},
		SendWR{ID: 3, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 32768, 8), RemoteAddr: base + 8000, RKey: rkey, CompareAdd: 2})
	for i, wc := range poll(t, a.scq, 3, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("access through the window: %+v", wc)
		}
	}
	equalBytes(t, "written through the window", b.mr.Bytes()[4096:4096+8000], a.mr.Bytes()[:8000])
	equalBytes(t, "read through the window", a.mr.Bytes()[16384:16384+8000], a.mr.Bytes()[:8000])
	if orig, now := binary.LittleEndian.Uint64(a.mr.Bytes()[32768:]), binary.LittleEndian.Uint64(b.mr.Bytes()[4096+8000:]); orig != 40 || now != 42 {
		t.Fatalf("fetch-add through the window: original %d, now %d", orig, now)
	}

	postRecv(t, b, RecvWR{ID: 7, SGList: sge(b.mr, 32768, 64)})
	postSend(t, a, SendWR{ID: 4, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), InvRKey: rkey})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.Opcode != WCSend {
		t.Fatalf("SEND_WITH_INV: %+v", wc)
	}
	wc := poll(t, b.rcq, 1, 5*time.Second)[0]
	if wc.Status != WCSuccess || wc.WRID != 7 || wc.Flags != WCWithGRH|WCWithInvalidate || uint32(wc.Flags) != 5 || wc.InvalidatedKey != rkey || wc.ByteLen != 64 {
		t.Fatalf("receive of SEND_WITH_INV: %+v (want flags 5 and key %#x)", wc, rkey)
	}
	noAsyncEvent(t, b.dev)

	before := append([]byte(nil), b.mr.Bytes()...)
	postSend(t, a, SendWR{ID: 5, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 16), RemoteAddr: base, RKey: rkey})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr || wc.WRID != 5 {
		t.Fatalf("WRITE through an invalidated window: %+v, want REM_ACCESS_ERR", wc)
	}
	if !bytes.Equal(b.mr.Bytes(), before) {
		t.Fatal("a WRITE through an invalidated window changed memory")
	}
	if ev := asyncEvent(t, b.dev); ev.Type != EventQPFatal || ev.QP != b.qp {
		t.Fatalf("responder event %v on %p, want QP_FATAL on %p", ev.Type, ev.QP, b.qp)
	}
	if b.qp.State() != StateErr {
		t.Fatalf("responder QP %v, want ERR", b.qp.State())
	}
	noAsyncEvent(t, a.dev) // the requester learnt of its error through its completion
}

// bindType1 binds the type-1 window mw over [off, off+n) of b.mr (no region
// when n is 0) with a new key byte, as ibv_bind_mw does, and returns the
// bind's completion.
func bindType1(t *testing.T, b *node, mw *MW, off, n int, access Access) WorkCompletion {
	t.Helper()
	bind := &MWBind{MW: mw, RKey: IncRKey(mw.RKey()), Access: access}
	if n > 0 {
		bind.MR, bind.Addr, bind.Length = b.mr, b.mr.Addr()+uint64(off), uint64(n)
	}
	postSend(t, b, SendWR{ID: 200, Opcode: WRBindMW, Flags: SendSignaled, Bind: bind})
	return poll(t, b.scq, 1, 5*time.Second)[0]
}

// TestMWType1: a type-1 window (rxe supports them; ibv_bind_mw) is bound
// through a BIND_MW work request and gives WRITE and READ through its rkey;
// unlike a type-2 window it may be bound again while bound, which moves its
// range and kills its old key; a bind of length 0 leaves it bound to
// nothing; Dealloc frees it.
func TestMWType1(t *testing.T) {
	a, b := mwPair(t)
	mw, err := b.pd.AllocMW(MWType1)
	must(t, err)
	if mw.Type() != MWType1 {
		t.Fatalf("window type %d, want 1", mw.Type())
	}
	const rw = AccessRemoteWrite | AccessRemoteRead
	if wc := bindType1(t, b, mw, 4096, 4096, rw); wc.Status != WCSuccess || wc.Opcode != WCBindMW || wc.WRID != 200 {
		t.Fatalf("bind: %+v", wc)
	}
	first := mw.RKey()
	fill(a.mr.Bytes()[:256], 5)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 256), RemoteAddr: b.mr.Addr() + 4096, RKey: first})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("WRITE through a type-1 window: %+v", wc)
	}
	equalBytes(t, "written through the type-1 window", b.mr.Bytes()[4096:4096+256], a.mr.Bytes()[:256])

	// Bound again while bound: a new range and key byte.
	if wc := bindType1(t, b, mw, 16384, 4096, AccessRemoteRead); wc.Status != WCSuccess {
		t.Fatalf("second bind of a bound type-1 window: %+v", wc)
	}
	second := mw.RKey()
	if second == first || second>>8 != first>>8 {
		t.Fatalf("rebound rkey %#x, want a new key byte on %#x's index", second, first)
	}
	fill(b.mr.Bytes()[16384:16384+128], 9)
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 8192, 128), RemoteAddr: b.mr.Addr() + 16384, RKey: second})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("READ through the rebound window: %+v", wc)
	}
	equalBytes(t, "read through the rebound window", a.mr.Bytes()[8192:8192+128], b.mr.Bytes()[16384:16384+128])

	// A bind of length 0 binds nothing: the window's key reaches nothing.
	if wc := bindType1(t, b, mw, 0, 0, 0); wc.Status != WCSuccess {
		t.Fatalf("zero-length bind of a type-1 window: %+v", wc)
	}
	third := mw.RKey()
	before := append([]byte(nil), b.mr.Bytes()...)
	postSend(t, a, SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 16), RemoteAddr: b.mr.Addr() + 16384, RKey: third})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("WRITE through an unbound type-1 window: %+v, want REM_ACCESS_ERR", wc)
	}
	if !bytes.Equal(b.mr.Bytes(), before) {
		t.Fatal("a WRITE through an unbound window changed memory")
	}
	must(t, mw.Dealloc())
}

// TestMWType1NotInvalidated: LOCAL_INV cannot free a type-1 window (rxe's
// rxe_invalidate_mw refuses it): the WR completes with LOC_QP_OP_ERR, and
// Dealloc frees the window.
func TestMWType1NotInvalidated(t *testing.T) {
	a, b := mwPair(t)
	mw, err := b.pd.AllocMW(MWType1)
	must(t, err)
	if wc := bindType1(t, b, mw, 0, 4096, AccessRemoteWrite); wc.Status != WCSuccess {
		t.Fatalf("bind: %+v", wc)
	}
	rkey := mw.RKey()
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), RemoteAddr: b.mr.Addr(), RKey: rkey})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("WRITE through the window: %+v", wc)
	}
	postSend(t, b, SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: rkey})
	if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCLocQPOpErr || wc.WRID != 2 {
		t.Fatalf("LOCAL_INV of a type-1 window: %+v, want LOC_QP_OP_ERR", wc)
	}
	must(t, mw.Dealloc())
	if _, err := b.pd.AllocMW(MWType1); err != nil {
		t.Fatalf("a new type-1 window after Dealloc: %v", err)
	}
}

// TestMWRangeAndRights: the window's range and rights bound what its rkey
// reaches, even where the region beneath would allow more.
func TestMWRangeAndRights(t *testing.T) {
	cases := []struct {
		name   string
		access Access
		wr     func(a *node, base uint64, rkey uint32) SendWR
	}{
		{"write past the window's end", AccessRemoteWrite, func(a *node, base uint64, rkey uint32) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGList: sge(a.mr, 0, 16), RemoteAddr: base + 1024 - 8, RKey: rkey}
		}},
		{"write before the window", AccessRemoteWrite, func(a *node, base uint64, rkey uint32) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGList: sge(a.mr, 0, 16), RemoteAddr: base - 8, RKey: rkey}
		}},
		{"write through a read-only window", AccessRemoteRead, func(a *node, base uint64, rkey uint32) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGList: sge(a.mr, 0, 16), RemoteAddr: base, RKey: rkey}
		}},
		{"atomic through a write-only window", AccessRemoteWrite, func(a *node, base uint64, rkey uint32) SendWR {
			return SendWR{Opcode: WRAtomicCmpAndSwp, SGList: sge(a.mr, 0, 8), RemoteAddr: base, RKey: rkey}
		}},
		{"read through a write-only window", AccessRemoteWrite, func(a *node, base uint64, rkey uint32) SendWR {
			return SendWR{Opcode: WRRDMARead, SGList: sge(a.mr, 0, 16), RemoteAddr: base, RKey: rkey}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := mwPair(t)
			mw := mustBind(t, b, 8192, 1024, c.access)
			fill(a.mr.Bytes()[:64], 9)
			before := append([]byte(nil), b.mr.Bytes()...)
			wr := c.wr(a, b.mr.Addr()+8192, mw.RKey())
			wr.ID, wr.Flags = 1, SendSignaled
			postSend(t, a, wr)
			if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
				t.Fatalf("%s: %+v, want REM_ACCESS_ERR", c.name, wc)
			}
			if !bytes.Equal(b.mr.Bytes(), before) {
				t.Fatalf("%s changed memory", c.name)
			}
			if ev := asyncEvent(t, b.dev); ev.Type != EventQPFatal || ev.QP != b.qp {
				t.Fatalf("event %v, want QP_FATAL on the responder", ev.Type)
			}
		})
	}
}

// TestMWBoundToItsQP: a type-2 window serves only the QP that bound it.
func TestMWBoundToItsQP(t *testing.T) {
	a, b := mwPair(t)
	// A second connection between the same devices, in the same PDs.
	a2, b2 := *a, *b
	var err error
	for _, n := range []*node{&a2, &b2} {
		n.qp, err = n.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: n.scq, RecvCQ: n.rcq, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
		must(t, err)
	}
	connect(t, &a2, &b2, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
	mw := mustBind(t, b, 0, 4096, AccessRemoteWrite)
	postSend(t, &a2, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: mw.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("WRITE through another QP's window: %+v, want REM_ACCESS_ERR", wc)
	}
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: mw.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("WRITE through the binding QP: %+v", wc)
	}
}

// TestMWLocalInvalidateAndDealloc: LOCAL_INV frees a window (later remote
// access fails), a freed window can be bound again with a new key byte, a
// region with a bound window cannot be deregistered (EBUSY) until the
// window goes, and Dealloc unbinds.
func TestMWLocalInvalidateAndDealloc(t *testing.T) {
	a, b := mwPair(t)
	mw := mustBind(t, b, 0, 4096, AccessRemoteWrite)
	if err := b.mr.Dereg(); !isErr(err, ErrBusy) {
		t.Fatalf("Dereg of a region with a bound window: %v, want EBUSY", err)
	}
	old := mw.RKey()
	postSend(t, b, SendWR{ID: 5, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: old})
	if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.Opcode != WCLocalInv || wc.WRID != 5 {
		t.Fatalf("LOCAL_INV: %+v", wc)
	}
	// Bound again with the next key byte: the old rkey stays dead.
	postSend(t, b, SendWR{ID: 6, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{MW: mw, RKey: IncRKey(old), MR: b.mr, Addr: b.mr.Addr(), Length: 4096, Access: AccessRemoteWrite}})
	if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("second bind: %+v", wc)
	}
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: mw.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("WRITE through the rebound window: %+v", wc)
	}
	must(t, mw.Dealloc())
	if err := mw.Dealloc(); !isErr(err, ErrInvalid) {
		t.Fatalf("second Dealloc: %v, want EINVAL", err)
	}
	must(t, b.mr.Dereg())
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: IncRKey(old)})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("WRITE through a deallocated window: %+v, want REM_ACCESS_ERR", wc)
	}
}

// TestMWBindErrors: binds rxe refuses complete with MW_BIND_ERR and move the
// QP to the error state (flushing what follows); LOCAL_INV of a region key
// or a free window completes with LOC_QP_OP_ERR.
func TestMWBindErrors(t *testing.T) {
	cases := []struct {
		name   string
		status WCStatus
		wr     func(t *testing.T, b *node) SendWR
	}{
		{"region without MW_BIND", WCMWBindErr, func(t *testing.T, b *node) SendWR {
			mr, err := b.pd.AllocMR(4096, AccessLocalWrite|AccessRemoteWrite)
			must(t, err)
			mw, err := b.pd.AllocMW(MWType2)
			must(t, err)
			return SendWR{Opcode: WRBindMW, Bind: &MWBind{MW: mw, MR: mr, Addr: mr.Addr(), Length: 64, Access: AccessRemoteRead}}
		}},
		{"range past the region", WCMWBindErr, func(t *testing.T, b *node) SendWR {
			mw, err := b.pd.AllocMW(MWType2)
			must(t, err)
			return SendWR{Opcode: WRBindMW, Bind: &MWBind{MW: mw, MR: b.mr, Addr: b.mr.Addr() + 1<<16 - 8, Length: 64, Access: AccessRemoteRead}}
		}},
		{"zero length", WCMWBindErr, func(t *testing.T, b *node) SendWR {
			mw, err := b.pd.AllocMW(MWType2)
			must(t, err)
			return SendWR{Opcode: WRBindMW, Bind: &MWBind{MW: mw, MR: b.mr, Addr: b.mr.Addr(), Access: AccessRemoteRead}}
		}},
		{"window of another PD", WCMWBindErr, func(t *testing.T, b *node) SendWR {
			pd, err := b.dev.AllocPD()
			must(t, err)
			mw, err := pd.AllocMW(MWType2)
			must(t, err)
			return SendWR{Opcode: WRBindMW, Bind: &MWBind{MW: mw, MR: b.mr, Addr: b.mr.Addr(), Length: 64, Access: AccessRemoteRead}}
		}},
		{"writable window over a region without local write", WCMWBindErr, func(t *testing.T, b *node) SendWR {
			mr, err := b.pd.AllocMR(4096, AccessMWBind)
			must(t, err)
			mw, err := b.pd.AllocMW(MWType2)
			must(t, err)
			return SendWR{Opcode: WRBindMW, Bind: &MWBind{MW: mw, MR: mr, Addr: mr.Addr(), Length: 64, Access: AccessRemoteWrite}}
		}},
		{"window already bound", WCMWBindErr, func(t *testing.T, b *node) SendWR {
			mw := mustBind(t, b, 0, 64, AccessRemoteRead)
			return SendWR{Opcode: WRBindMW, Bind: &MWBind{MW: mw, MR: b.mr, Addr: b.mr.Addr(), Length: 64, Access: AccessRemoteRead}}
		}},
		{"local invalidate of a region key", WCLocQPOpErr, func(t *testing.T, b *node) SendWR {
			return SendWR{Opcode: WRLocalInv, InvRKey: b.mr.RKey()}
		}},
		{"local invalidate of a free window", WCLocQPOpErr, func(t *testing.T, b *node) SendWR {
			mw, err := b.pd.AllocMW(MWType2)
			must(t, err)
			return SendWR{Opcode: WRLocalInv, InvRKey: mw.RKey()}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, b := mwPair(t)
			wr := c.wr(t, b)
			wr.ID = 9 // unsignaled: an error completes anyway
			postSend(t, b, wr, SendWR{ID: 10, Opcode: WRSend, SGList: sge(b.mr, 0, 8)})
			wcs := poll(t, b.scq, 2, 5*time.Second)
			if wcs[0].WRID != 9 || wcs[0].Status != c.status || wcs[1].WRID != 10 || wcs[1].Status != WCWRFlushErr {
				t.Fatalf("%s: completions %+v, want %v then a flush", c.name, wcs, c.status)
			}
			if b.qp.State() != StateErr {
				t.Fatalf("QP %v after a failed local operation, want ERR", b.qp.State())
			}
		})
	}
	_, b := mwPair(t)
	if _, err := b.qp.PostSend([]SendWR{{Opcode: WRBindMW}}); !isErr(err, ErrInvalid) {
		t.Fatalf("BIND_MW without a window: %v, want EINVAL", err)
	}
}

// TestSendWithInvalidateOfARegion: SEND_WITH_INV naming a region's rkey (or a
// key that names nothing) is acknowledged, then fails the receive with
// REM_INV_REQ_ERR and moves the responder QP to ERR without a NAK, as rxe.
func TestSendWithInvalidateOfARegion(t *testing.T) {
	for _, name := range []string{"region rkey", "unknown key"} {
		t.Run(name, func(t *testing.T) {
			a, b := mwPair(t)
			key := b.mr.RKey()
			if name == "unknown key" {
				key = 0x08abcd01
			}
			postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, 0, 64)}, RecvWR{ID: 2, SGList: sge(b.mr, 0, 64)})
			postSend(t, a, SendWR{ID: 1, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a.mr, 0, 16), InvRKey: key})
			if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
				t.Fatalf("requester: %+v, want success (rxe ACKs the SEND)", wc)
			}
			wcs := poll(t, b.rcq, 2, 5*time.Second)
			if wcs[0].WRID != 1 || wcs[0].Status != WCRemInvReqErr || wcs[1].WRID != 2 || wcs[1].Status != WCWRFlushErr {
				t.Fatalf("receives %+v, want REM_INV_REQ_ERR then a flush", wcs)
			}
			if b.qp.State() != StateErr {
				t.Fatalf("responder QP %v, want ERR", b.qp.State())
			}
			if ev := asyncEvent(t, b.dev); ev.Type != EventQPFatal || ev.QP != b.qp {
				t.Fatalf("event %v, want QP_FATAL", ev.Type)
			}
			c, err := b.dev.Counters()
			must(t, err)
			if c.SentPkts != 1 {
				t.Fatalf("responder sent %d packets, want the single ACK", c.SentPkts)
			}
		})
	}
}

// TestDuplicateReadRechecksKey: a READ whose responses were lost is replayed
// from the responder's resources only if its rkey still works (as rxe's
// rxe_recheck_mr); after the window is invalidated or the region
// deregistered the duplicate gets NAK remote-access-error instead of the
// memory.
func TestDuplicateReadRechecksKey(t *testing.T) {
	for _, how := range []string{"window invalidated", "region deregistered"} {
		t.Run(how, func(t *testing.T) {
			a, b, _, lb := pair(t, connOpts{timeout: 10, retry: 7, rnr: 7}, 1<<16)
			rkey := b.mr.RKey()
			var mw *MW
			if how == "window invalidated" {
				mr, err := b.pd.AllocMR(1<<16, AccessLocalWrite|AccessMWBind)
				must(t, err)
				b.mr = mr
				mw = mustBind(t, b, 0, 4096, AccessRemoteRead)
				rkey = mw.RKey()
			}
			fill(b.mr.Bytes()[:4096], 5)
			// The READ responses are lost; the NAK that answers the
			// duplicate must not be (a QP that sent it is in ERR and
			// answers nothing more).
			hold := dropWhile(lb, func(p *wire.Packet) bool {
				switch p.BTH.Opcode {
				case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
					return true
				}
				return false
			})
			postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 4096), RemoteAddr: b.mr.Addr(), RKey: rkey})
			waitCounter(t, b.dev, "the READ response", func(c Counters) bool { return c.SentPkts >= 1 })
			if mw != nil {
				postSend(t, b, SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: rkey})
				if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
					t.Fatalf("LOCAL_INV: %+v", wc)
				}
			} else {
				must(t, b.mr.Dereg())
			}
			hold.Store(false)
			if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
				t.Fatalf("duplicate READ after the key died: %+v, want REM_ACCESS_ERR", wc)
			}
			if bytes.Equal(a.mr.Bytes()[:4096], b.mr.Bytes()[:4096]) {
				t.Fatal("the duplicate READ returned the memory")
			}
		})
	}
}

// TestMWBindLocalRightsAccepted: a bind whose access also names local
// rights (pyverbs' MWTest binds with LOCAL_WRITE|REMOTE_WRITE) succeeds, as
// on rxe, whose rxe_check_bind_mw looks only at the remote rights it grants;
// the window then grants the remote write it names, for both types.
func TestMWBindLocalRightsAccepted(t *testing.T) {
	const access = AccessLocalWrite | AccessRemoteWrite
	a, b := mwPair(t)
	mw2, wc := bind(t, b, 0, 4096, access)
	if wc.Status != WCSuccess {
		t.Fatalf("type-2 bind with local rights: %+v", wc)
	}
	mw1, err := b.pd.AllocMW(MWType1)
	must(t, err)
	if wc := bindType1(t, b, mw1, 8192, 4096, access); wc.Status != WCSuccess {
		t.Fatalf("type-1 bind with local rights: %+v", wc)
	}
	for i, w := range []struct {
		key uint32
		off int
	}{{mw2.RKey(), 0}, {mw1.RKey(), 8192}} {
		fill(a.mr.Bytes()[:512], i+3)
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 512), RemoteAddr: b.mr.Addr() + uint64(w.off), RKey: w.key})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("WRITE through window %d: %+v", i, wc)
		}
		equalBytes(t, "written through the window", b.mr.Bytes()[w.off:w.off+512], a.mr.Bytes()[:512])
	}
}
