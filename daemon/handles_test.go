package daemon

import (
	"math"
	"testing"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// After 2^32 allocations the handle counter wraps: the handles it comes
// back to that are still live (and 0) are skipped, so a new object never
// takes a live one's place (issue 30 item 9).
func TestHandlesSkipLiveAfterWrap(t *testing.T) {
	tb := newTestbed(t)
	ss := newSession(tb.srv, nil, ipc.Peer{PID: 1})
	defer ss.release()
	call := func(op uverbs.Op, body func(*uverbs.Encoder)) *uverbs.Decoder {
		t.Helper()
		reply, out, err := ss.handle(msg(op, body), nil)
		ipc.CloseAll(out)
		if err != nil {
			t.Fatal(err)
		}
		h, d, err := uverbs.Decode(reply)
		if err != nil || h.Errno != 0 {
			t.Fatalf("%v: %v errno %d", op, err, h.Errno)
		}
		return d
	}
	call(uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
	pd := func() uint32 { t.Helper(); return call(uverbs.OpAllocPD, nil).U32() }
	cq := func() uint32 { t.Helper(); return call(uverbs.OpCreateCQ, func(e *uverbs.Encoder) { e.U32(4) }).U32() }
	live := map[uint32]bool{}
	for _, h := range []uint32{pd(), cq(), pd()} { // 1, 2, 3
		live[h] = true
	}
	ss.next = math.MaxUint32 - 1
	for _, h := range []uint32{pd(), cq(), pd()} { // 2^32-1, then past 0 and the three live ones
		if h == 0 || live[h] {
			t.Fatalf("handle %d allocated, live: %v", h, live)
		}
		live[h] = true
	}
	if len(ss.pds) != 4 || len(ss.cqs) != 2 {
		t.Fatalf("%d PDs and %d CQs, want 4 and 2", len(ss.pds), len(ss.cqs))
	}
}
