package verbs

import (
	"testing"
	"time"
)

// ucPair connects two UC QPs over an in-memory link.
func ucPair(t *testing.T) (*node, *node, *MemLink) {
	t.Helper()
	la, lb := NewMemLinkPair(4096 + 200)
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
		must(t, s.me.qp.Modify(QPAttr{State: StateInit, Port: 1, AccessFlags: AccessRemoteWrite}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		must(t, s.me.qp.Modify(QPAttr{State: StateRTR, AH: AH{DGID: mustAddr(s.ip), SGIDIndex: 1, DMAC: s.mac}, PathMTU: MTU1024, DestQPN: s.peer.qp.QPN(), RQPSN: 5},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN))
		must(t, s.me.qp.Modify(QPAttr{State: StateRTS, SQPSN: 5}, AttrState|AttrSQPSN))
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
	la.SetImpairment(Impairment{Drop: 1})
	postRecv(t, b, RecvWR{ID: 2, SGList: sge(b.mr, 0, n)})
	postSend(t, a, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n)})
	poll(t, a.scq, 1, 5*time.Second)
	la.SetImpairment(Impairment{})
	postSend(t, a, SendWR{ID: 4, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 100)})
	poll(t, a.scq, 1, 5*time.Second)
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 2 || wc.ByteLen != 100 {
		t.Fatalf("receive after a lost UC message: %+v", wc)
	}
}
