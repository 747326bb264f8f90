package verbs

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// loopDevice is a device with the given number of queues, each on an
// in-memory link, whose neighbour resolver answers for nobody and counts
// the questions about the device's own address (ipA). It returns the
// device's link ends, whose peers would receive anything sent.
func loopDevice(t *testing.T, queues int) (*Device, []*memlink.Link, *atomic.Int64) {
	t.Helper()
	var asked atomic.Int64
	resolve := func(_ context.Context, ip netip.Addr) (net.HardwareAddr, error) {
		if ip == ipA {
			asked.Add(1)
		}
		return nil, context.DeadlineExceeded
	}
	var ends []*memlink.Link
	var links []Link
	for range queues {
		l, _ := memlink.NewPair(4096 + 200)
		ends, links = append(ends, l), append(links, l)
	}
	d, err := NewMultiQueueDevice(links, DeviceConfig{ActiveMTU: 4096, MAC: macA,
		GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), ipA}, Resolve: resolve})
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	registerDevice(t, d)
	return d, ends, &asked
}

// counterOf is the device's counter of that name.
func counterOf(t *testing.T, d *Device, name string) uint64 {
	t.Helper()
	c, err := d.Counters()
	must(t, err)
	for _, f := range c.Named() {
		if f.Name == name {
			return f.Value
		}
	}
	t.Fatalf("no counter %q", name)
	return 0
}

// checkStayedInside fails unless nothing the device sent reached its
// links, the resolver was never asked for the device's own address, and
// at least min frames looped back.
func checkStayedInside(t *testing.T, d *Device, ends []*memlink.Link, asked *atomic.Int64, min uint64) {
	t.Helper()
	for i, l := range ends {
		if s := l.Stats().Sent; s != 0 || l.Peer().Queued() != 0 {
			t.Errorf("queue %d: %d frames went to the link, %d wait at its peer", i, s, l.Peer().Queued())
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the resolver was asked %d times for the device's own address", n)
	}
	if n := counterOf(t, d, "loopback_pkts"); n < min {
		t.Errorf("loopback_pkts %d, want at least %d", n, min)
	}
}

// TestLoopbackRC: two RC QPs of one device, each with the device's own GID
// as its destination and no DMAC, reach RTR without neighbour resolution
// and carry WRITE, SEND, READ and both atomics, byte for byte, without a
// frame on the wire. On two queues the QPs are served by different engines,
// and the frames cross between them.
func TestLoopbackRC(t *testing.T) {
	for _, queues := range []int{1, 2} {
		t.Run(map[int]string{1: "one queue", 2: "two queues"}[queues], func(t *testing.T) {
			d, ends, asked := loopDevice(t, queues)
			a, b := newNode(t, d, 1<<16), newNode(t, d, 1<<16)
			// Flow labels 1 and 2 give the QPs source ports of different
			// parity: on two queues, different engines serve them.
			access := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
			for i, s := range [][2]*node{{a, b}, {b, a}} {
				must(t, s[0].qp.Connect(Peer{Access: access, AH: AH{DGID: ipA, SGIDIndex: 1, HopLimit: 64, FlowLabel: uint32(i + 1)},
					PathMTU: MTU1024, DestQPN: s[1].qp.QPN(), MaxDestRdAtomic: 16, MinRNRTimer: 1,
					Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}))
			}
			if queues == 2 && a.qp.c.Queue() == b.qp.c.Queue() {
				t.Fatalf("both QPs on queue %d", a.qp.c.Queue())
			}

			const n = 5000 // five packets at MTU 1024
			fill(a.mr.Bytes()[:n], 1)
			fill(b.mr.Bytes()[8192:8192+n], 2)
			binary.LittleEndian.PutUint64(b.mr.Bytes()[16384:], 40)
			binary.LittleEndian.PutUint64(b.mr.Bytes()[16392:], 7)
			postRecv(t, b, RecvWR{ID: 9, SGList: sge(b.mr, 32768, n)})
			postSend(t, a,
				SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
				SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n)},
				SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 8192, n), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()},
				SendWR{ID: 4, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 16384, 8), RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey(), CompareAdd: 2},
				SendWR{ID: 5, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGList: sge(a.mr, 16392, 8), RemoteAddr: b.mr.Addr() + 16392, RKey: b.mr.RKey(), CompareAdd: 7, Swap: 99})
			for i, wc := range poll(t, a.scq, 5, 10*time.Second) {
				if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
					t.Fatalf("send completion %d: %+v", i, wc)
				}
			}
			if wc := poll(t, b.rcq, 1, 10*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 9 || wc.ByteLen != n {
				t.Fatalf("receive completion %+v", wc)
			}
			equalBytes(t, "WRITE", b.mr.Bytes()[:n], a.mr.Bytes()[:n])
			equalBytes(t, "SEND", b.mr.Bytes()[32768:32768+n], a.mr.Bytes()[:n])
			equalBytes(t, "READ", a.mr.Bytes()[8192:8192+n], b.mr.Bytes()[8192:8192+n])
			if got, mem := binary.LittleEndian.Uint64(a.mr.Bytes()[16384:]), binary.LittleEndian.Uint64(b.mr.Bytes()[16384:]); got != 40 || mem != 42 {
				t.Errorf("FETCH_ADD returned %d, left %d; want 40, 42", got, mem)
			}
			if got, mem := binary.LittleEndian.Uint64(a.mr.Bytes()[16392:]), binary.LittleEndian.Uint64(b.mr.Bytes()[16392:]); got != 7 || mem != 99 {
				t.Errorf("CMP_AND_SWP returned %d, left %d; want 7, 99", got, mem)
			}
			// Requests: 5+5 packets, 1 READ, 2 atomics; READ responses 5, atomic ACKs 2.
			checkStayedInside(t, d, ends, asked, 13+5+2)
			if queues == 2 && counterOf(t, d, "handed_off") == 0 {
				t.Errorf("QPs on two engines, but no frame was handed from one to the other")
			}
			if s, r := counterOf(t, d, "sent_pkts"), counterOf(t, d, "rcvd_pkts"); s != r || s != counterOf(t, d, "loopback_pkts") {
				t.Errorf("sent_pkts %d, rcvd_pkts %d, loopback_pkts %d: want all equal", s, r, counterOf(t, d, "loopback_pkts"))
			}
		})
	}
}

// TestLoopbackUC: a UC WRITE between two QPs of one device lands byte for
// byte, and nothing leaves the device.
func TestLoopbackUC(t *testing.T) {
	d, ends, asked := loopDevice(t, 1)
	var a, b *node
	for _, p := range []**node{&a, &b} {
		n := newNode(t, d, 1<<16)
		qp, err := n.pd.CreateQP(QPInitAttr{Type: QPTypeUC, SendCQ: n.scq, RecvCQ: n.rcq,
			Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		n.qp = qp
		*p = n
	}
	connect(t, a, b, ipA, ipA, nil, nil, connOpts{mtu: MTU1024})
	const n = 3000
	fill(a.mr.Bytes()[:n], 5)
	// UC drops a WRITE_WITH_IMM that finds no receive: post it first.
	postRecv(t, b, RecvWR{ID: 2})
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGList: sge(a.mr, 0, n),
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey(), ImmData: 0x01020304})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.ImmData != 0x01020304 || wc.ByteLen != n {
		t.Fatalf("receive completion %+v", wc)
	}
	equalBytes(t, "UC WRITE", b.mr.Bytes()[100:100+n], a.mr.Bytes()[:n])
	checkStayedInside(t, d, ends, asked, 3)
}

// TestLoopbackUD: an address handle to the device's own GID needs no
// neighbour resolution, and a datagram through it reaches another UD QP of
// the device with the GRH area rxe fills (both addresses the device's).
func TestLoopbackUD(t *testing.T) {
	d, ends, asked := loopDevice(t, 1)
	a := newUDNode(t, d, testQKey, 0x100, 1<<16)
	b := newUDNode(t, d, testQKey, 0, 1<<16)
	ah, err := a.pd.CreateAH(AH{DGID: ipA, SGIDIndex: 1, HopLimit: 64})
	must(t, err)
	const n = 2000
	fill(a.mr.Bytes()[:n], 7)
	postRecv(t, b, RecvWR{ID: 3, SGList: sge(b.mr, 0, wire.GRHLen+n)})
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	wc := poll(t, b.rcq, 1, 5*time.Second)[0]
	if wc.Status != WCSuccess || wc.ByteLen != wire.GRHLen+n || wc.SrcQP != a.qp.QPN() {
		t.Fatalf("receive completion %+v", wc)
	}
	grh := b.mr.Bytes()[:wire.GRHLen]
	if src, dst := netip.AddrFrom4([4]byte(grh[32:36])), netip.AddrFrom4([4]byte(grh[36:40])); src != ipA || dst != ipA {
		t.Errorf("GRH area addresses %v -> %v, want %v -> %v", src, dst, ipA, ipA)
	}
	equalBytes(t, "datagram", b.mr.Bytes()[wire.GRHLen:wire.GRHLen+n], a.mr.Bytes()[:n])
	checkStayedInside(t, d, ends, asked, 1)
}
