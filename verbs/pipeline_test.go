package verbs

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestPipelinedMixUnderFaults keeps 64 operations of every kind in flight
// over a lossy link, as real applications do.
func TestPipelinedMixUnderFaults(t *testing.T) {
	a, b, la, lb := pair(t, connOpts{mtu: MTU1024, timeout: 8}, 1<<20)
	la.SetImpairment(Impairment{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 5})
	lb.SetImpairment(Impairment{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 6})
	const messages, depth, size, half = 20000, 64, 64, 1 << 19
	binary.LittleEndian.PutUint64(b.mr.Bytes()[half:], 0)
	posted, done, adds := 0, 0, 0
	buf := make([]WorkCompletion, 64)
	deadline := time.Now().Add(60 * time.Second)
	for done < messages {
		var wrs []SendWR
		for posted < messages && posted-done < depth {
			slot := posted % 4096
			wr := SendWR{ID: uint64(posted), Flags: SendSignaled, SGList: sge(a.mr, slot*size, size), RKey: b.mr.RKey()}
			switch posted % 4 {
			case 0:
				wr.Opcode, wr.RemoteAddr = WRRDMAWrite, b.mr.Addr()+uint64(slot*size)
			case 1:
				wr.Opcode = WRSend
				postRecv(t, b, RecvWR{ID: uint64(posted), SGList: sge(b.mr, half+4096+slot%64*size, size)})
			case 2:
				wr.Opcode, wr.RemoteAddr = WRRDMARead, b.mr.Addr()+half+8+uint64(slot%64*size)
				wr.SGList = sge(a.mr, half+slot%64*size, size)
			case 3:
				wr.Opcode, wr.RemoteAddr, wr.CompareAdd = WRAtomicFetchAdd, b.mr.Addr()+half, 1
				wr.SGList = sge(a.mr, half+8192+slot%64*8, 8)
				adds++
			}
			wrs = append(wrs, wr)
			posted++
		}
		if len(wrs) > 0 {
			postSend(t, a, wrs...)
		}
		for _, wc := range buf[:b.rcq.Poll(buf)] {
			if wc.Status != WCSuccess || wc.ByteLen != size {
				t.Fatalf("receive %+v", wc)
			}
		}
		k := a.scq.Poll(buf)
		for _, wc := range buf[:k] {
			if wc.Status != WCSuccess || wc.WRID != uint64(done) {
				t.Fatalf("completion %+v, want WR %d successful", wc, done)
			}
			done++
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("stalled at %d of %d: A %s\nB %s", done, messages, dumpQP(a.qp), dumpQP(b.qp))
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	if got := binary.LittleEndian.Uint64(b.mr.Bytes()[half:]); got != uint64(adds) {
		t.Fatalf("counter %d after %d FETCH_ADDs", got, adds)
	}
}
