package verbs

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// TestPipelinedMixUnderFaults keeps 64 operations of every kind in flight
// over a lossy link, as real applications do, and checks every byte each
// one moved, with patterns that differ per message: a WRITE's target and a
// SEND's receive buffer once the operation completes, a READ's destination
// against the responder's bytes, and each FETCH_ADD's original value (the
// adds run in order: the k-th returns the counter's start plus k).
func TestPipelinedMixUnderFaults(t *testing.T) {
	a, b, la, lb := pair(t, connOpts{mtu: MTU1024, timeout: 8}, 1<<20)
	la.SetImpairment(memlink.Impairment{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 5})
	lb.SetImpairment(memlink.Impairment{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Seed: 6})
	const messages, depth, size, half = 20000, 64, 64, 1 << 19
	// b: WRITE targets [0, 256 KiB); the counter at half; READ sources
	// (64 slots) from half+64; receive buffers (256 slots) from half+8192.
	// a: message sources [0, 256 KiB); READ destinations (64 slots) at
	// half; FETCH_ADD results (64 slots) at half+8192.
	const counterStart = 0x0123456789abcdef
	const readSrc, recvBuf, readDst, addDst = half + 64, half + 8192, half, half + 8192
	binary.LittleEndian.PutUint64(b.mr.Bytes()[half:], counterStart)
	fill(b.mr.Bytes()[readSrc:readSrc+64*size], 77)
	type op struct {
		kind      int
		slot, buf int // a's source slot; the READ, receive or result slot
		add       uint64
	}
	ops := make([]op, messages)
	countKind := func(ops []op, kind int) int {
		n := 0
		for _, o := range ops {
			if o.kind == kind {
				n++
			}
		}
		return n
	}
	posted, done, recvd, adds := 0, 0, 0, 0
	buf := make([]WorkCompletion, 64)
	deadline := time.Now().Add(60 * time.Second)
	for done < messages {
		// Completions first, checked before anything new is posted, so a
		// buffer is not reused while its data is being checked.
		for _, wc := range buf[:b.rcq.Poll(buf)] {
			for ops[recvd].kind != 1 {
				recvd++
			}
			o := ops[recvd]
			if wc.Status != WCSuccess || wc.ByteLen != size || wc.WRID != uint64(recvd) {
				t.Fatalf("receive %+v, want WR %d", wc, recvd)
			}
			off := recvBuf + o.buf*size
			equalBytes(t, "SEND", b.mr.Bytes()[off:off+size], a.mr.Bytes()[o.slot*size:(o.slot+1)*size])
			recvd++
		}
		k := a.scq.Poll(buf)
		for _, wc := range buf[:k] {
			if wc.Status != WCSuccess || wc.WRID != uint64(done) {
				t.Fatalf("completion %+v, want WR %d successful", wc, done)
			}
			o := ops[done]
			switch o.kind {
			case 0:
				equalBytes(t, "WRITE", b.mr.Bytes()[o.slot*size:(o.slot+1)*size], a.mr.Bytes()[o.slot*size:(o.slot+1)*size])
			case 2:
				src := readSrc + o.buf*size
				equalBytes(t, "READ", a.mr.Bytes()[readDst+o.buf*size:readDst+(o.buf+1)*size], b.mr.Bytes()[src:src+size])
			case 3:
				if got := binary.LittleEndian.Uint64(a.mr.Bytes()[addDst+o.buf*8:]); got != counterStart+o.add {
					t.Fatalf("FETCH_ADD %d returned %#x, want %#x", done, got, counterStart+o.add)
				}
			}
			done++
		}
		var wrs []SendWR
		for posted < messages && posted-done < depth {
			slot := posted % 4096
			fill(a.mr.Bytes()[slot*size:(slot+1)*size], posted*3+1)
			o := op{kind: posted % 4, slot: slot}
			wr := SendWR{ID: uint64(posted), Flags: SendSignaled, SGList: sge(a.mr, slot*size, size), RKey: b.mr.RKey()}
			switch o.kind {
			case 0:
				wr.Opcode, wr.RemoteAddr = WRRDMAWrite, b.mr.Addr()+uint64(slot*size)
			case 1:
				wr.Opcode = WRSend
				o.buf = posted / 4 % 256
				postRecv(t, b, RecvWR{ID: uint64(posted), SGList: sge(b.mr, recvBuf+o.buf*size, size)})
			case 2:
				o.buf = posted / 4 % 64
				wr.Opcode, wr.RemoteAddr = WRRDMARead, b.mr.Addr()+uint64(readSrc+o.buf*size)
				wr.SGList = sge(a.mr, readDst+o.buf*size, size)
				fill(a.mr.Bytes()[readDst+o.buf*size:readDst+(o.buf+1)*size], 0) // not the answer
			case 3:
				o.buf, o.add = posted/4%64, uint64(adds)
				wr.Opcode, wr.RemoteAddr, wr.CompareAdd = WRAtomicFetchAdd, b.mr.Addr()+half, 1
				wr.SGList = sge(a.mr, addDst+o.buf*8, 8)
				adds++
			}
			ops[posted] = o
			wrs = append(wrs, wr)
			posted++
		}
		if len(wrs) > 0 {
			postSend(t, a, wrs...)
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("stalled at %d of %d: A %s\nB %s", done, messages, dumpQP(a.qp), dumpQP(b.qp))
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	// The receives not polled yet: one per SEND, each checked.
	for _, wc := range poll(t, b.rcq, messages/4-countKind(ops[:recvd], 1), 5*time.Second) {
		for ops[recvd].kind != 1 {
			recvd++
		}
		o := ops[recvd]
		off := recvBuf + o.buf*size
		if wc.Status != WCSuccess || wc.WRID != uint64(recvd) {
			t.Fatalf("receive %+v, want WR %d", wc, recvd)
		}
		equalBytes(t, "SEND", b.mr.Bytes()[off:off+size], a.mr.Bytes()[o.slot*size:(o.slot+1)*size])
		recvd++
	}
	if got := binary.LittleEndian.Uint64(b.mr.Bytes()[half:]); got != counterStart+uint64(adds) {
		t.Fatalf("counter %#x after %d FETCH_ADDs from %#x", got, adds, uint64(counterStart))
	}
}
