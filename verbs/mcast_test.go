package verbs

import (
	"bytes"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// group is a RoCEv2 multicast GID as rdma_cm makes it from 239.1.2.3.
var group = netip.MustParseAddr("::ffff:239.1.2.3")

// expectNone fails if cq holds a completion after the others had time to
// arrive.
func expectNone(t *testing.T, what string, cq *CQ) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	var wc [1]WorkCompletion
	if cq.Poll(wc[:]) != 0 {
		t.Fatalf("%s received %+v", what, wc[0])
	}
}

// mcastSend sends one datagram of n bytes from s to the group through ah
// and waits for its completion.
func mcastSend(t *testing.T, s *node, ah *AddressHandle, id uint64, n int) {
	t.Helper()
	postSend(t, s, SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGList: sge(s.mr, 0, n), AH: ah,
		RemoteQPN: McastQPN, RemoteQKey: testQKey})
	if wc := poll(t, s.scq, 1, 5*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("send: %+v", wc[0])
	}
}

// rxAt is where the tests' receives land in their buffers, away from the
// data sent from the start of them.
const rxAt = 8192

// expectDatagram polls r for the datagram s sent (n bytes of s's buffer).
func expectDatagram(t *testing.T, what string, r, s *node, n int) {
	t.Helper()
	wc := poll(t, r.rcq, 1, 5*time.Second)[0]
	if wc.Status != WCSuccess || wc.SrcQP != s.qp.QPN() || wc.QPNum != r.qp.QPN() || wc.ByteLen != uint32(wire.GRHLen+n) || wc.Flags&WCWithGRH == 0 {
		t.Fatalf("%s: %+v", what, wc)
	}
	got := r.mr.Bytes()[rxAt : rxAt+wire.GRHLen+n]
	// The GRH area holds the IPv4 header: its destination is the group.
	if !bytes.Equal(got[36:40], []byte{239, 1, 2, 3}) {
		t.Fatalf("%s: GRH area %x", what, got[:wire.GRHLen])
	}
	equalBytes(t, what, got[wire.GRHLen:], s.mr.Bytes()[:n])
}

// TestMcastDeliversToAttached: a datagram to the multicast QPN and a
// group's address reaches every QP attached to the group — two on the
// other device, and one on the sender's own device, which is a member of
// the group and loops it back as the kernel loops a group's datagrams back
// to rxe — and no QP that is not (or no longer) attached; the sender's own
// QP, once attached, receives its own datagram, as on rxe. The devices run
// two queues each, crossed: the frames arrive on the queue whose engine
// does not serve the QPs and are handed over once.
func TestMcastDeliversToAttached(t *testing.T) {
	a, b := twoQueueDevices(t, true)
	a1, a2, a3 := newUDNode(t, a, testQKey, 0, 1<<14), newUDNode(t, a, testQKey, 0, 1<<14), newUDNode(t, a, testQKey, 0, 1<<14)
	b1, sender := newUDNode(t, b, testQKey, 0, 1<<14), newUDNode(t, b, testQKey, 0x100, 1<<14)
	for _, n := range []*node{a1, a2, b1} {
		must(t, n.qp.AttachMcast(group, 0))
	}
	ah, err := sender.pd.CreateAH(AH{DGID: group, SGIDIndex: 1, HopLimit: 64})
	must(t, err)
	if got := ah.Attr().DMAC.String(); got != "01:00:5e:01:02:03" {
		t.Fatalf("the group's AH resolved MAC %s, want 01:00:5e:01:02:03", got)
	}
	all := []*node{a1, a2, a3, b1, sender}
	repost := func() {
		for i, n := range all {
			postRecv(t, n, RecvWR{ID: uint64(i), SGList: sge(n.mr, rxAt, wire.GRHLen+512)})
		}
	}
	repost()
	fill(sender.mr.Bytes()[:512], 1)
	mcastSend(t, sender, ah, 1, 512)
	expectDatagram(t, "a's first QP", a1, sender, 512)
	expectDatagram(t, "a's second QP", a2, sender, 512)
	expectDatagram(t, "b's attached QP (loopback)", b1, sender, 512)
	expectNone(t, "a's QP that is not attached", a3.rcq)
	expectNone(t, "the sender, not attached", sender.rcq)

	must(t, a2.qp.DetachMcast(group, 0))
	postRecv(t, a1, RecvWR{ID: 9, SGList: sge(a1.mr, rxAt, wire.GRHLen+512)})
	postRecv(t, b1, RecvWR{ID: 9, SGList: sge(b1.mr, rxAt, wire.GRHLen+512)})
	fill(sender.mr.Bytes()[:300], 2)
	mcastSend(t, sender, ah, 2, 300)
	expectDatagram(t, "a's first QP, again", a1, sender, 300)
	expectDatagram(t, "b's attached QP, again", b1, sender, 300)
	expectNone(t, "a's detached QP", a2.rcq)

	must(t, sender.qp.AttachMcast(group, 0))
	postRecv(t, a1, RecvWR{ID: 10, SGList: sge(a1.mr, rxAt, wire.GRHLen+512)})
	postRecv(t, b1, RecvWR{ID: 10, SGList: sge(b1.mr, rxAt, wire.GRHLen+512)})
	fill(sender.mr.Bytes()[:100], 3)
	mcastSend(t, sender, ah, 3, 100)
	expectDatagram(t, "the sender, attached", sender, sender, 100)
	expectDatagram(t, "a's first QP, a third time", a1, sender, 100)
	expectDatagram(t, "b's attached QP, a third time", b1, sender, 100)
	if n := counterOf(t, a, "mcast_pkts"); n != 3 {
		t.Errorf("a: mcast_pkts %d, want 3", n)
	}
}

// TestMcastAttachErrnos: the errnos of ibv_attach_mcast and
// ibv_detach_mcast on rxe (through the kernel's ib_attach_mcast): EINVAL
// for a QP that is not UD, a GID that is not multicast, a detach of a QP
// not attached; a second attach is no error; ENOMEM past rxe's limits of
// QPs per group and groups per device. The port joins a group with its
// first member and leaves it with its last, destroyed QPs included.
func TestMcastAttachErrnos(t *testing.T) {
	var mu sync.Mutex
	var joins []string
	cfg := DeviceConfig{ActiveMTU: 4096, Groups: func(addr netip.Addr, join bool) error {
		mu.Lock()
		defer mu.Unlock()
		op := "leave "
		if join {
			op = "join "
		}
		joins = append(joins, op+addr.String())
		return nil
	}}
	la, _ := memlink.NewPair(9000)
	d := newDeviceWith(t, la, macA, ipA, cfg)
	ud := newUDNode(t, d, testQKey, 0, 4096)
	rc := newNode(t, d, 4096)
	if err := rc.qp.AttachMcast(group, 0); !isErr(err, ErrInvalid) {
		t.Errorf("attach of an RC QP: %v, want EINVAL", err)
	}
	if err := ud.qp.AttachMcast(ipB, 0); !isErr(err, ErrInvalid) {
		t.Errorf("attach to a unicast GID: %v, want EINVAL", err)
	}
	if err := ud.qp.DetachMcast(group, 0); !isErr(err, ErrInvalid) {
		t.Errorf("detach of a QP not attached: %v, want EINVAL", err)
	}
	must(t, ud.qp.AttachMcast(group, 0))
	must(t, ud.qp.AttachMcast(group, 7)) // again: no error, one membership
	must(t, ud.qp.DetachMcast(group, 0))
	if err := ud.qp.DetachMcast(group, 0); !isErr(err, ErrInvalid) {
		t.Errorf("second detach: %v, want EINVAL", err)
	}

	// 56 QPs in a group (RXE_MAX_MCAST_QP_ATTACH), not 57.
	var qps []*QP
	for range 57 {
		qp, err := ud.pd.CreateQP(QPInitAttr{Type: QPTypeUD, SendCQ: ud.scq, RecvCQ: ud.rcq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		qps = append(qps, qp)
	}
	for i, qp := range qps {
		err := qp.AttachMcast(group, 0)
		if i < 56 && err != nil || i == 56 && !isErr(err, ErrNoMem) {
			t.Fatalf("attach of QP %d to a group: %v", i+1, err)
		}
	}
	for _, qp := range qps {
		must(t, qp.Destroy()) // detaches them: the port leaves the group
	}
	// 8192 groups on the device (RXE_MAX_MCAST_GRP), not 8193.
	for i := range 8193 {
		g := netip.AddrFrom4([4]byte{239, 2, byte(i >> 8), byte(i)})
		err := ud.qp.AttachMcast(g, 0)
		if i < 8192 && err != nil || i == 8192 && !isErr(err, ErrNoMem) {
			t.Fatalf("attach to group %d: %v", i+1, err)
		}
	}
	must(t, ud.qp.Destroy())
	mu.Lock()
	defer mu.Unlock()
	want := []string{"join 239.1.2.3", "leave 239.1.2.3", "join 239.1.2.3", "leave 239.1.2.3"}
	if len(joins) != 4+2*8192 || !slices.Equal(joins[:4], want) || joins[4] != "join 239.2.0.0" || joins[len(joins)-1] != "leave 239.2.31.255" {
		t.Fatalf("the port's joins and leaves: %d, first %q, last %q", len(joins), joins[:min(6, len(joins))], joins[len(joins)-1])
	}
}

// forgeDatagram builds a UD SEND from b's address to dst and QPN qpn with
// Q_Key qkey, as anyone on the link may send one.
func forgeDatagram(t *testing.T, dst netip.Addr, qpn, qkey uint32) []byte {
	t.Helper()
	var p wire.Packet
	p.Eth = wire.Ethernet{Dst: [6]byte(wire.MulticastMAC(dst)), Src: [6]byte(macB)}
	p.IP = wire.IP{Src: ipB, Dst: dst.Unmap(), TTL: 64, DF: true}
	p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: qpn}
	p.DETH = wire.DETH{QKey: qkey, SrcQP: 0x99}
	p.Payload = []byte("forged")
	buf := make([]byte, 256)
	n, err := wire.Encode(buf, &p)
	must(t, err)
	return buf[:max(n, wire.MinFrameLen)]
}

// TestMcastForged: datagrams to the multicast QPN for a group nobody on the
// device joined are dropped and counted (dropped_no_mcast_group), as rxe
// drops them; one to a joined group with another Q_Key is dropped and
// counted as a Q_Key violation; the attached QP receives neither, and then
// still receives a proper one.
func TestMcastForged(t *testing.T) {
	la, lb := memlink.NewPair(9000)
	d := newDevice(t, la, macA, ipA, 4096)
	n := newUDNode(t, d, testQKey, 0, 4096)
	must(t, n.qp.AttachMcast(group, 0))
	postRecv(t, n, RecvWR{ID: 1, SGList: sge(n.mr, 0, 256)})
	for i := range 10 {
		_ = lb.Send([][]byte{forgeDatagram(t, netip.AddrFrom4([4]byte{239, 9, 9, byte(i)}), McastQPN, testQKey)})
	}
	_ = lb.Send([][]byte{forgeDatagram(t, group, McastQPN, testQKey+1)})
	for deadline := time.Now().Add(5 * time.Second); counterOf(t, d, "dropped_no_mcast_group") < 10 || counterOf(t, d, "dropped_bad_qkey") < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("dropped_no_mcast_group %d, dropped_bad_qkey %d: want 10 and 1",
				counterOf(t, d, "dropped_no_mcast_group"), counterOf(t, d, "dropped_bad_qkey"))
		}
		time.Sleep(time.Millisecond)
	}
	expectNone(t, "the attached QP", n.rcq)
	_ = lb.Send([][]byte{forgeDatagram(t, group, McastQPN, testQKey)})
	if wc := poll(t, n.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.SrcQP != 0x99 {
		t.Fatalf("the proper datagram: %+v", wc)
	}
	if got := counterOf(t, d, "mcast_pkts"); got != 1 {
		t.Fatalf("mcast_pkts %d, want 1", got)
	}
}
