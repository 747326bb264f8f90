package verbs

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// ucPair connects two UC QPs over an in-memory link.
func ucPair(t *testing.T) (*node, *node, *memlink.Link) {
	t.Helper()
	la, lb := memlink.NewPair(4096 + 200)
	mk := func(l Link, mac []byte, ip string) *node {
		n := newNode(t, newDevice(t, l, mac, mustAddr(ip), 4096), 1<<20)
		qp, err := n.pd.CreateQP(QPInitAttr{Type: QPTypeUC, SendCQ: n.scq, RecvCQ: n.rcq, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64}})
		must(t, err)
		n.qp = qp
		return n
	}
	a, b := mk(la, macA, "198.18.0.1"), mk(lb, macB, "198.18.0.2")
	for _, s := range []struct {
		me, peer *node
		ip       string
		mac      []byte
	}{{a, b, "198.18.0.2", macB}, {b, a, "198.18.0.1", macA}} {
		must(t, s.me.qp.Connect(Peer{Access: AccessRemoteWrite, AH: AH{DGID: mustAddr(s.ip), SGIDIndex: 1, DMAC: s.mac},
			PathMTU: MTU1024, DestQPN: s.peer.qp.QPN(), RQPSN: 5, SQPSN: 5}))
	}
	return a, b, la
}

// TestUCSendWriteAndLoss: UC moves SENDs and WRITEs without ACKs, completes
// the sender when the last packet leaves, and a lost packet loses its whole
// message (the receive stays posted for the next one) instead of stalling.
func TestUCSendWriteAndLoss(t *testing.T) {
	a, b, la := ucPair(t)
	if _, err := a.qp.PostSend([]SendWR{{Opcode: WRRDMARead}}); !isErr(err, ErrInvalid) {
		t.Fatalf("READ on UC: %v, want EINVAL", err)
	}
	const n = 3000
	fill(a.mr.Bytes()[:n], 4)
	postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, 0, n)})
	postSend(t, a,
		SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n)},
		SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	poll(t, a.scq, 2, 5*time.Second)
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.ByteLen != n {
		t.Fatalf("UC receive %+v", wc)
	}
	equalBytes(t, "UC SEND", b.mr.Bytes()[:n], a.mr.Bytes()[:n])
	// UC WRITEs complete nothing at the responder: wait until the engine
	// has taken all 2×3 packets (PMTU 1024), which also orders its writes
	// before this goroutine's reads.
	waitCounter(t, b.dev, "the WRITE's packets", func(c Counters) bool { return c.RcvdPkts >= 6 })
	equalBytes(t, "UC WRITE", b.mr.Bytes()[8192:8192+n], a.mr.Bytes()[:n])

	// Drop every frame of the next SEND: it is lost, and the receive WQE serves the one after.
	la.SetImpairment(memlink.Impairment{Drop: 1})
	postRecv(t, b, RecvWR{ID: 2, SGList: sge(b.mr, 0, n)})
	postSend(t, a, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n)})
	poll(t, a.scq, 1, 5*time.Second)
	la.SetImpairment(memlink.Impairment{})
	postSend(t, a, SendWR{ID: 4, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 100)})
	poll(t, a.scq, 1, 5*time.Second)
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 2 || wc.ByteLen != 100 {
		t.Fatalf("receive after a lost UC message: %+v", wc)
	}
}

// TestUCLostPacketReturnsReceive: UC messages of three packets lose their
// middle packet, every other one. The receive WQE each lost message had
// taken goes back to the head of the queue (rxe rewinds it), so with only
// four receives posted, 16 messages of which 8 are lost deliver exactly the
// 8 others, into the four WQEs first and then, reposted, again. Before, each
// loss leaked a receive slot until PostRecv failed with ENOMEM.
func TestUCLostPacketReturnsReceive(t *testing.T) {
	a, b, la := ucPair(t)
	const n = 2500 // three packets at PMTU 1024
	fill(a.mr.Bytes()[:n], 6)
	sent := 0
	watchSent(la, func(p *wire.Packet, _ int) bool {
		middle := p.BTH.Opcode == wire.UCSendMiddle
		if middle {
			sent++
		}
		return middle && sent%2 == 1
	})
	received := 0
	for round := range 4 {
		for i := range 4 {
			postRecv(t, b, RecvWR{ID: uint64(round*4 + i), SGList: sge(b.mr, i*4096, n)})
		}
		for range 8 {
			postSend(t, a, SendWR{Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n)})
		}
		poll(t, a.scq, 8, 5*time.Second)
		for _, wc := range poll(t, b.rcq, 4, 5*time.Second) {
			if wc.Status != WCSuccess || wc.ByteLen != n {
				t.Fatalf("round %d: receive %+v", round, wc)
			}
			received++
		}
		if k := pending(b.rcq); k != 0 {
			t.Fatalf("round %d: %d receive completions more than the 4 posted", round, k)
		}
	}
	if recvOutstanding(tqp(b.qp)) != 0 || received != 16 {
		t.Fatalf("%d received, %d receive slots still taken", received, recvOutstanding(tqp(b.qp)))
	}
	equalBytes(t, "UC SEND", b.mr.Bytes()[:n], a.mr.Bytes()[:n])
}
