package verbs

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/wire"
)

// TestRequesterExceedsMaxDestRdAtomic: a requester with 16 READs/atomics in
// flight against a responder whose max_dest_rd_atomic is 1. As rxe's
// check_resource ("it is the requester's job not to send too many"), the
// responder NAKs nothing: it executes every one, recycling its single
// responder resource, and all complete successfully with the right data.
func TestRequesterExceedsMaxDestRdAtomic(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{destRd: 1, initRd: 16}, 1<<16)
	binary.LittleEndian.PutUint64(b.mr.Bytes()[0:], 100)
	fill(b.mr.Bytes()[4096:8192], 7)
	var wrs []SendWR
	for i := range 16 {
		if i%2 == 0 {
			wrs = append(wrs, SendWR{ID: uint64(i), Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 8*i, 8),
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1})
		} else {
			wrs = append(wrs, SendWR{ID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 4096+i*256, 256),
				RemoteAddr: b.mr.Addr() + 4096 + uint64(i*256), RKey: b.mr.RKey()})
		}
	}
	postSend(t, a, wrs...)
	for i, wc := range poll(t, a.scq, 16, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	for i := 0; i < 16; i += 2 {
		if got := binary.LittleEndian.Uint64(a.mr.Bytes()[8*i:]); got != uint64(100+i/2) {
			t.Fatalf("FETCH_ADD %d returned %d, want %d", i, got, 100+i/2)
		}
	}
	if got := binary.LittleEndian.Uint64(b.mr.Bytes()); got != 108 {
		t.Fatalf("counter %d after 8 FETCH_ADDs from 100", got)
	}
	for i := 1; i < 16; i += 2 {
		equalBytes(t, fmt.Sprint("READ ", i), a.mr.Bytes()[4096+i*256:][:256], b.mr.Bytes()[4096+i*256:][:256])
	}
	if s := a.qp.State(); s != StateRTS {
		t.Fatalf("requester QP in %v", s)
	}
}

// TestDuplicateOfEvictedAtomic: two FETCH_ADDs, the first one's ATOMIC_ACK
// lost, so the requester resends both. With max_dest_rd_atomic 2 the
// responder still has the first in its resources and answers the duplicate
// from the saved result. With max_dest_rd_atomic 1 the second has evicted
// it: as rxe (a class D error) the duplicate is dropped without a reply and
// never executed again, so the requester's retries run out
// (RETRY_EXC_ERR). Either way each atomic ran exactly once.
func TestDuplicateOfEvictedAtomic(t *testing.T) {
	for _, destRd := range []uint8{2, 1} {
		t.Run(fmt.Sprint("max_dest_rd_atomic", destRd), func(t *testing.T) {
			a, b, _, lb := pair(t, connOpts{destRd: destRd, timeout: 8, retry: 2, psnA: 0x40}, 1<<16)
			binary.LittleEndian.PutUint64(b.mr.Bytes(), 1000)
			var dropped atomic.Bool
			lb.SetDropFilter(func(f []byte) bool {
				var p wire.Packet
				if wire.Decode(f, &p) == nil && p.BTH.Opcode == wire.RCAtomicAck && p.BTH.PSN == 0x40 && !dropped.Load() {
					dropped.Store(true)
					return true
				}
				return false
			})
			postSend(t, a,
				SendWR{ID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1},
				SendWR{ID: 2, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 8, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 10})
			wcs := poll(t, a.scq, 2, 5*time.Second)
			if !dropped.Load() {
				t.Fatal("the first ATOMIC_ACK was never sent")
			}
			if got := binary.LittleEndian.Uint64(b.mr.Bytes()); got != 1011 {
				t.Fatalf("counter %d, want 1011: an atomic ran twice or not at all", got)
			}
			if cb := counters(b.dev); cb.DuplicateRequest == 0 {
				t.Fatalf("the responder saw no duplicate: %+v", cb)
			}
			if destRd == 2 {
				if wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess {
					t.Fatalf("completions %+v, want both successful", wcs)
				}
				if o1, o2 := binary.LittleEndian.Uint64(a.mr.Bytes()), binary.LittleEndian.Uint64(a.mr.Bytes()[8:]); o1 != 1000 || o2 != 1001 {
					t.Fatalf("original values %d, %d; want 1000, 1001", o1, o2)
				}
				return
			}
			if wcs[0].WRID != 1 || wcs[0].Status != WCRetryExcErr || wcs[1].WRID != 2 || wcs[1].Status != WCWRFlushErr {
				t.Fatalf("completions %+v, want RETRY_EXC_ERR then WR_FLUSH_ERR", wcs)
			}
		})
	}
}
