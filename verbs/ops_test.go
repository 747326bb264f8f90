package verbs

import (
	"testing"
	"time"
)

// TestImmediateInlineAndFence covers SEND_WITH_IMM, RDMA_WRITE_WITH_IMM
// (consumes a receive; byte_len is the WRITE's length, as rxe), INLINE data
// (the caller's buffer may change once PostSend returns) and a FENCEd WR
// behind a READ, with multi-SGE gather on the requester.
func TestImmediateInlineAndFence(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{mtu: MTU512}, 1<<16)
	postRecv(t, b,
		RecvWR{ID: 10, SGList: sge(b.mr, 0, 2000)},
		RecvWR{ID: 11, SGList: sge(b.mr, 0, 0)},
		RecvWR{ID: 12, SGList: sge(b.mr, 4096, 64)})
	src := a.mr.Bytes()
	fill(src[:1500], 3)
	// SEND_WITH_IMM gathering three SGEs.
	sgl := []SGE{sge(a.mr, 0, 500)[0], sge(a.mr, 500, 700)[0], sge(a.mr, 1200, 300)[0]}
	postSend(t, a, SendWR{ID: 1, Opcode: WRSendWithImm, Flags: SendSignaled | SendSolicited, SGList: sgl, ImmData: 0x01020304})
	// RDMA_WRITE_WITH_IMM of 1000 bytes to offset 8192.
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGList: sge(a.mr, 0, 1000),
		RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), ImmData: 0xa0b0c0d0})
	// INLINE: the source changes right after the post; the old bytes must arrive.
	fill(src[2048:2048+40], 7)
	want := append([]byte(nil), src[2048:2048+40]...)
	postSend(t, a, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled | SendInline, SGList: sge(a.mr, 2048, 40)})
	fill(src[2048:2048+40], 99)
	// A READ, then a FENCEd WRITE that waits for it.
	fill(b.mr.Bytes()[12288:12288+300], 5)
	postSend(t, a,
		SendWR{ID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 4096, 300), RemoteAddr: b.mr.Addr() + 12288, RKey: b.mr.RKey()},
		SendWR{ID: 5, Opcode: WRRDMAWrite, Flags: SendSignaled | SendFence, SGList: sge(a.mr, 0, 100), RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey()})

	for i, wc := range poll(t, a.scq, 5, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("send completion %d: %+v", i, wc)
		}
	}
	r := poll(t, b.rcq, 3, 5*time.Second)
	if r[0].WRID != 10 || r[0].Opcode != WCRecv || r[0].ByteLen != 1500 || r[0].Flags != WCWithGRH|WCWithImm || r[0].ImmData != 0x01020304 {
		t.Fatalf("SEND_WITH_IMM receive %+v", r[0])
	}
	if r[1].WRID != 11 || r[1].Opcode != WCRecvRDMAWithImm || r[1].ByteLen != 1000 || r[1].Flags != WCWithGRH|WCWithImm || r[1].ImmData != 0xa0b0c0d0 {
		t.Fatalf("RDMA_WRITE_WITH_IMM receive %+v", r[1])
	}
	if r[2].WRID != 12 || r[2].ByteLen != 40 || r[2].Flags != WCWithGRH {
		t.Fatalf("inline SEND receive %+v", r[2])
	}
	equalBytes(t, "inline data", b.mr.Bytes()[4096:4096+40], want)
	equalBytes(t, "WRITE_WITH_IMM data", b.mr.Bytes()[8192:8192+1000], src[:1000])
	equalBytes(t, "READ data", src[4096:4096+300], b.mr.Bytes()[12288:12288+300])
	equalBytes(t, "fenced WRITE data", b.mr.Bytes()[16384:16384+100], src[:100])
}

// TestSendWithInvalidateOfPlainMR: xdproce has no memory windows, so as rxe
// for an IETH naming a plain MR, the SEND is acknowledged (the requester
// sees success), the receive completes with REM_INV_REQ_ERR and the
// responder QP goes to the error state without a NAK.
func TestSendWithInvalidateOfPlainMR(t *testing.T) {
	a, b, _, _ := pair(t, connOpts{}, 1<<16)
	postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, 0, 64)}, RecvWR{ID: 2, SGList: sge(b.mr, 64, 64)})
	postSend(t, a, SendWR{ID: 9, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a.mr, 0, 16), InvRKey: b.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 9 {
		t.Fatalf("requester: %+v, want success (rxe ACKs the SEND)", wc)
	}
	r := poll(t, b.rcq, 2, 5*time.Second)
	if r[0].WRID != 1 || r[0].Status != WCRemInvReqErr || r[1].WRID != 2 || r[1].Status != WCWRFlushErr {
		t.Fatalf("receives %+v, want REM_INV_REQ_ERR then WR_FLUSH_ERR", r)
	}
	if b.qp.State() != StateErr {
		t.Fatalf("responder QP in %v", b.qp.State())
	}
}
