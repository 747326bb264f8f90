package verbs

import (
	"fmt"
	"testing"
	"time"
)

func TestSendRecvAllSizesAndMTUs(t *testing.T) {
	for _, mtu := range []MTU{MTU256, MTU512, MTU1024, MTU2048, MTU4096} {
		t.Run(fmt.Sprint(mtu.Bytes()), func(t *testing.T) {
			a, b, _, _ := pair(t, connOpts{mtu: mtu, psnA: 0xfffff0, psnB: 0x123}, 1<<20)
			sizes := []int{0, 1, 3, mtu.Bytes() - 1, mtu.Bytes(), mtu.Bytes() + 1, 3*mtu.Bytes() + 5, 100000}
			off := 0
			for i, n := range sizes {
				fill(a.mr.Bytes()[off:off+n], i)
				postRecv(t, b, RecvWR{ID: uint64(i), SGList: sge(b.mr, off, n+8)})
				postSend(t, a, SendWR{ID: uint64(100 + i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, off, n)})
				off += n + 8
			}
			rwc := poll(t, b.rcq, len(sizes), 10*time.Second)
			swc := poll(t, a.scq, len(sizes), 10*time.Second)
			off = 0
			for i, n := range sizes {
				if rwc[i].Status != WCSuccess || rwc[i].WRID != uint64(i) || rwc[i].ByteLen != uint32(n) || rwc[i].Opcode != WCRecv || rwc[i].Flags&WCWithGRH == 0 {
					t.Fatalf("receive %d: %+v", i, rwc[i])
				}
				if swc[i].Status != WCSuccess || swc[i].WRID != uint64(100+i) || swc[i].Opcode != WCSend {
					t.Fatalf("send %d: %+v", i, swc[i])
				}
				equalBytes(t, fmt.Sprintf("message %d", i), b.mr.Bytes()[off:off+n], a.mr.Bytes()[off:off+n])
				off += n + 8
			}
		})
	}
}

func TestWriteReadAtomics(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{mtu: MTU1024, psnA: 0xfffffe, psnB: 7}, 4<<20)
	const n = 3<<20 + 77
	fill(a.mr.Bytes()[:n], 1)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr() + 5, RKey: b.mr.RKey()})
	wc := poll(t, a.scq, 1, 20*time.Second)[0]
	if wc.Status != WCSuccess || wc.Opcode != WCRDMAWrite || wc.ByteLen != n {
		t.Fatalf("WRITE completion %+v", wc)
	}
	equalBytes(t, "written region", b.mr.Bytes()[5:5+n], a.mr.Bytes()[:n])

	fill(b.mr.Bytes()[:n], 9)
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 1, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	wc = poll(t, a.scq, 1, 20*time.Second)[0]
	if wc.Status != WCSuccess || wc.Opcode != WCRDMARead || wc.ByteLen != n {
		t.Fatalf("READ completion %+v", wc)
	}
	equalBytes(t, "read data", a.mr.Bytes()[1:1+n], b.mr.Bytes()[:n])

	// FETCH_ADD then CMP_AND_SWP on the 8 bytes at offset 64 of B.
	target := b.mr.Bytes()[64:72]
	for i := range target {
		target[i] = 0
	}
	target[0] = 40
	postSend(t, a,
		SendWR{ID: 3, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 2},
		SendWR{ID: 4, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGList: sge(a.mr, 8, 8), RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 7})
	wcs := poll(t, a.scq, 2, 5*time.Second)
	for _, wc := range wcs {
		if wc.Status != WCSuccess {
			t.Fatalf("atomic completion %+v", wc)
		}
	}
	if a.mr.Bytes()[0] != 40 || a.mr.Bytes()[8] != 42 || target[0] != 7 {
		t.Fatalf("atomics: fetched %d and %d, target now %d; want 40, 42, 7", a.mr.Bytes()[0], a.mr.Bytes()[8], target[0])
	}
}
