package verbs

import (
	"encoding/binary"
	"testing"
	"time"
)

// staleKey registers a region in pd, deregisters it and registers a new one
// that takes over its key index with a different key byte; it returns the
// dead key and the new region (filled, so a stray write would show).
func staleKey(t *testing.T, pd *PD, access Access) (uint32, *MR) {
	t.Helper()
	for range 100 {
		old, err := pd.AllocMR(4096, access)
		must(t, err)
		key := old.RKey()
		must(t, old.Dereg())
		fresh, err := pd.AllocMR(4096, access)
		must(t, err)
		if fresh.RKey()>>8 != key>>8 {
			t.Fatalf("new region's key %#x does not reuse the index of %#x", fresh.RKey(), key)
		}
		if fresh.RKey() != key {
			fill(fresh.Bytes(), 11)
			return key, fresh
		}
		must(t, fresh.Dereg()) // the same key byte by chance (1 in 256): again
	}
	t.Fatal("no different key byte in 100 registrations")
	return 0, nil
}

// TestRemoteReadAtomicFaults: READ, FETCH_ADD and CMP_AND_SWP naming a bad,
// stale, out-of-range, wrong-rights or other-PD rkey complete with
// REM_ACCESS_ERR, a misaligned atomic with REM_INV_REQ_ERR (rxe's NAK codes),
// and neither side's memory changes.
func TestRemoteReadAtomicFaults(t *testing.T) {
	all := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	read := func(a *node, addr uint64, rkey uint32) SendWR {
		return SendWR{Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 256), RemoteAddr: addr, RKey: rkey}
	}
	fetchAdd := func(a *node, addr uint64, rkey uint32) SendWR {
		return SendWR{Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 64, 8), RemoteAddr: addr, RKey: rkey, CompareAdd: 5}
	}
	cmpSwap := func(a *node, addr uint64, rkey uint32) SendWR {
		return SendWR{Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGList: sge(a.mr, 64, 8), RemoteAddr: addr, RKey: rkey, Swap: 0xdead}
	}
	ops := []struct {
		name   string
		wr     func(a *node, addr uint64, rkey uint32) SendWR
		need   Access // the right the target region lacks in "no rights"
		length uint64
	}{
		{"READ", read, AccessRemoteRead, 256},
		{"FETCH_ADD", fetchAdd, AccessRemoteAtomic, 8},
		{"CMP_AND_SWP", cmpSwap, AccessRemoteAtomic, 8},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			setup := func(t *testing.T) (*node, *node) {
				a, b, _, _ := pair(t, connOpts{}, 1<<16)
				fill(a.mr.Bytes(), 3)
				fill(b.mr.Bytes(), 4)
				return a, b
			}
			t.Run("bad rkey index", func(t *testing.T) {
				a, b := setup(t)
				remoteFault(t, a, b, op.wr(a, b.mr.Addr(), b.mr.RKey()^0x100), WCRemAccessErr)
			})
			t.Run("bad key byte", func(t *testing.T) {
				a, b := setup(t)
				remoteFault(t, a, b, op.wr(a, b.mr.Addr(), b.mr.RKey()^0x01), WCRemAccessErr)
			})
			t.Run("stale rkey", func(t *testing.T) {
				a, b := setup(t)
				key, fresh := staleKey(t, b.pd, all)
				remoteFault(t, a, b, op.wr(a, fresh.Addr(), key), WCRemAccessErr, fresh)
			})
			t.Run("past the end", func(t *testing.T) {
				a, b := setup(t)
				end := b.mr.Addr() + uint64(b.mr.Len())
				remoteFault(t, a, b, op.wr(a, end-op.length+8, b.mr.RKey()), WCRemAccessErr)
			})
			t.Run("before the start", func(t *testing.T) {
				a, b := setup(t)
				remoteFault(t, a, b, op.wr(a, b.mr.Addr()-8, b.mr.RKey()), WCRemAccessErr)
			})
			t.Run("no rights", func(t *testing.T) {
				a, b := setup(t)
				r, err := b.pd.AllocMR(4096, all&^op.need)
				must(t, err)
				fill(r.Bytes(), 5)
				remoteFault(t, a, b, op.wr(a, r.Addr(), r.RKey()), WCRemAccessErr, r)
			})
			t.Run("other PD", func(t *testing.T) {
				a, b := setup(t)
				pd2, err := b.dev.AllocPD()
				must(t, err)
				r, err := pd2.AllocMR(4096, all)
				must(t, err)
				fill(r.Bytes(), 6)
				remoteFault(t, a, b, op.wr(a, r.Addr(), r.RKey()), WCRemAccessErr, r)
			})
			if op.need != AccessRemoteAtomic {
				return
			}
			t.Run("misaligned", func(t *testing.T) {
				// PostSend refuses a misaligned atomic (as rxe's post
				// checks), so the WR is posted aligned in SQD and moved by
				// 4 bytes before it starts, to see the responder's answer.
				a, b := setup(t)
				checkFault(t, a, b, func() {
					must(t, a.qp.Modify(QPAttr{State: StateSQD}, AttrState))
					postSend(t, a, op.wr(a, b.mr.Addr()+64, b.mr.RKey()))
					must(t, a.dev.do(func() error {
						nicOf(a.dev).ShiftHeadRemoteAddr(tqp(a.qp), 4)
						return nil
					}))
					must(t, a.qp.Modify(QPAttr{State: StateRTS}, AttrState))
				}, WCRemInvReqErr)
			})
		})
	}
	// The same regions work for a valid request: the faults above are the keys'.
	t.Run("valid", func(t *testing.T) {
		a, b, _, _ := pair(t, connOpts{}, 1<<16)
		binary.LittleEndian.PutUint64(b.mr.Bytes()[64:], 40)
		postSend(t, a, fetchAdd(a, b.mr.Addr()+64, b.mr.RKey()))
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("FETCH_ADD: %+v", wc)
		}
		if got := binary.LittleEndian.Uint64(b.mr.Bytes()[64:]); got != 45 {
			t.Fatalf("after FETCH_ADD 5 to 40: %d", got)
		}
	})
}
