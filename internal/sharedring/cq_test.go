package sharedring

import (
	"errors"
	"testing"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/uverbs"
)

func newCQRing(t *testing.T, slots uint32) *uverbs.Ring {
	t.Helper()
	r, err := uverbs.NewRing(make([]byte, uverbs.RingBytes(slots, uverbs.CQESize)), slots, uverbs.CQESize)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMoveTo: a resize moves the unread completions (from the client's
// consumer index to the producer's) to the same indices of the new ring, in
// order, with the client's consumer index and notification request; a new
// depth below them, or a consumer index the ring cannot hold (a hostile
// client's), is EINVAL.
func TestMoveTo(t *testing.T) {
	old := NewCQ(newCQRing(t, 8), nil)
	const tail = 13 // the ring has wrapped: slots 5..12 written, 10..12 unread
	for i := uint32(5); i < tail; i++ {
		old.Put(i, ibv.WorkCompletion{WRID: uint64(i), ByteLen: i})
	}
	old.ring.SetConsumer(10)
	old.ring.Aux().Store(uverbs.NotifyAny)

	if _, err := old.MoveTo(newCQRing(t, 4), 2, tail); !errors.Is(err, ibv.ErrInvalid) {
		t.Fatalf("3 unread into depth 2: %v, want EINVAL", err)
	}
	dst, err := old.MoveTo(newCQRing(t, 16), 16, tail)
	if err != nil {
		t.Fatal(err)
	}
	if p, c := dst.ring.Producer(), dst.ring.Consumer(); p != tail || c != 10 {
		t.Fatalf("new ring producer %d consumer %d, want %d and 10", p, c, tail)
	}
	for i := uint32(10); i < tail; i++ {
		var e uverbs.CQE
		uverbs.CQEOf(dst.ring.Slot(i), &e)
		if e.WRID != uint64(i) || e.ByteLen != i {
			t.Fatalf("slot %d: %+v, want completion %d", i, e, i)
		}
	}
	if dst.ring.Aux().Load() != uverbs.NotifyAny {
		t.Fatal("the client's notification request was lost")
	}
	old.ring.SetConsumer(tail + 100) // ahead of the producer: 2^32-100 unread
	if _, err := old.MoveTo(newCQRing(t, 16), 16, tail); !errors.Is(err, ibv.ErrInvalid) {
		t.Fatalf("a consumer index past the producer: %v, want EINVAL", err)
	}
}
