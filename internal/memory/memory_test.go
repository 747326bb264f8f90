package memory

import (
	"testing"

	"github.com/xdproce/xdproce/internal/ibv"
)

// TestWindowOwnedByItsBinder: a type-2 window serves only the owner it was
// bound through, of its PD; a type-1 window any owner of its PD; neither
// after it is unbound. The owner is an identity, so a window bound through
// a QP that is gone serves no later QP, whatever QPN that one gets.
func TestWindowOwnedByItsBinder(t *testing.T) {
	var tb Table
	pd, otherPD := NewPD(1), NewPD(2)
	const rw = ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead | ibv.AccessMWBind
	mr := NewMR(pd, make([]byte, 4096), 0x10000, rw)
	if err := tb.AddMR(mr, 7); err != nil {
		t.Fatal(err)
	}
	if got := tb.LookupMR(mr.LKey()); got != mr || tb.LookupMR(mr.LKey()^1) != nil {
		t.Fatalf("lookup of key %#x: %v; of another key byte: %v", mr.LKey(), got, tb.LookupMR(mr.LKey()^1))
	}
	for _, typ1 := range []bool{false, true} {
		mw := NewMW(pd, typ1)
		if err := tb.AddMW(mw, 3); err != nil {
			t.Fatal(err)
		}
		if !IsMWKey(mw.RKey()) || IsMWKey(mr.RKey()) {
			t.Fatalf("window key %#x or region key %#x in the wrong range", mw.RKey(), mr.RKey())
		}
		const binder, other Owner = 1, 2 // two QPs
		args := BindArgs{RKey: 0x42, Addr: 0x10100, Length: 256, Access: ibv.AccessRemoteRead}
		if !typ1 && tb.Bind(binder, otherPD, mw, mr, args) {
			t.Fatalf("type-2 window bound through a QP of another PD")
		}
		if !tb.Bind(binder, pd, mw, mr, args) {
			t.Fatalf("type-1 %v: bind refused", typ1)
		}
		if !typ1 && tb.Bind(binder, pd, mw, mr, args) {
			t.Fatalf("type-2 window bound twice")
		}
		key := mw.RKey()
		if key&0xff != 0x42 || mr.BoundMWs() != 1 {
			t.Fatalf("type-1 %v: key %#x after a bind of key byte 0x42, %d windows on the region", typ1, key, mr.BoundMWs())
		}
		check := func(o Owner, p *PD, va uint64, n uint32, need ibv.Access) bool {
			got, ok := tb.CheckMWAccess(o, p, key, va, n, need)
			return ok && got == mr
		}
		if !check(binder, pd, 0x10100, 256, ibv.AccessRemoteRead) {
			t.Fatalf("type-1 %v: the binder's read refused", typ1)
		}
		if check(other, pd, 0x10100, 256, ibv.AccessRemoteRead) != typ1 {
			t.Fatalf("type-1 %v: another owner's read allowed %v", typ1, !typ1)
		}
		if check(binder, otherPD, 0x10100, 8, ibv.AccessRemoteRead) || check(binder, pd, 0x10100, 8, ibv.AccessRemoteWrite) ||
			check(binder, pd, 0x100ff, 8, ibv.AccessRemoteRead) || check(binder, pd, 0x101f9, 8, ibv.AccessRemoteRead) {
			t.Fatalf("type-1 %v: another PD, a right not granted or bytes outside the window allowed", typ1)
		}
		if tb.Invalidate(pd, key) == typ1 {
			t.Fatalf("type-1 %v: invalidate returned %v", typ1, typ1)
		}
		if typ1 {
			tb.RemoveMW(mw)
		}
		if check(binder, pd, 0x10100, 8, ibv.AccessRemoteRead) || mr.BoundMWs() != 0 {
			t.Fatalf("type-1 %v: the window serves after it was unbound (%d on the region)", typ1, mr.BoundMWs())
		}
	}
	if dead := NewMW(pd, false); tb.Bind(1, pd, dead, mr, BindArgs{Addr: 0x10000, Length: 8, Access: ibv.AccessRemoteRead}) {
		t.Fatal("a window never allocated was bound")
	}
	tb.RemoveMR(mr)
	if tb.LookupMR(mr.LKey()) != nil || mr.Valid() || pd.Users() != 1 {
		t.Fatalf("region still found after removal, or PD users %d (the type-2 window's 1)", pd.Users())
	}
}
