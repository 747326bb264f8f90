package verbs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// twoQueueDevices starts two devices with two queues each, over two
// in-memory link pairs. Straight, a's queue i reaches b's queue i, as on a
// veth pair; crossed, it reaches b's other queue, as when a peer's RSS hash
// sends a flow to another queue than the one its port picks.
func twoQueueDevices(t *testing.T, crossed bool) (*Device, *Device) {
	t.Helper()
	a0, b0 := memlink.NewPair(4096 + 200)
	a1, b1 := memlink.NewPair(4096 + 200)
	bLinks := []Link{b0, b1}
	if crossed {
		bLinks = []Link{b1, b0}
	}
	start := func(links []Link, mac net.HardwareAddr, ip netip.Addr) *Device {
		d, err := NewMultiQueueDevice(links, DeviceConfig{ActiveMTU: 4096, MAC: mac, GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), ip}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		registerDevice(t, d)
		return d
	}
	return start([]Link{a0, a1}, macA, ipA), start(bLinks, macB, ipB)
}

// sharedNodes makes n connected QP pairs between a and b that share one
// PD, pair of CQs and buffer per device, as perftest's QPs do, and returns
// the a-side and b-side nodes and how many pairs landed on each queue.
func sharedNodes(t *testing.T, a, b *Device, n, bufSize int) ([]*node, []*node, [2]int) {
	t.Helper()
	base := []*node{newNode(t, a, bufSize), newNode(t, b, bufSize)}
	var as, bs []*node
	var onQueue [2]int
	// A negative n asks for at least -n pairs on both queues' flows: QPNs are
	// random, and 8 pairs all land on one queue once in 128 runs; more are
	// added until both have some (at most 64 in all).
	spread := n < 0
	n = max(n, -n)
	for len(as) < n || spread && len(as) < 64 && (onQueue[0] == 0 || onQueue[1] == 0) {
		var side [2]*node
		for i, nd := range base {
			c := *nd
			qp, err := c.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c.scq, RecvCQ: c.rcq,
				Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			must(t, err)
			c.qp = qp
			side[i] = &c
		}
		connect(t, side[0], side[1], ipA, ipB, macA, macB, connOpts{mtu: MTU1024, retry: 7, rnr: 7})
		onQueue[wire.UDPSourcePort(0, side[0].qp.QPN(), side[1].qp.QPN())%2]++
		as, bs = append(as, side[0]), append(bs, side[1])
	}
	return as, bs, onQueue
}

// TestEnginesPerQueue runs RC QPs on devices with two queues, so two
// engines each: every QP's WRITE, READ, SEND and FETCH_ADD complete with
// their bytes intact on shared CQs, each QP is served by the engine of its
// flow's queue, and both engines of each device carry traffic. Straight
// links hand nothing over; crossed ones deliver every frame to the other
// engine, which hands it to the QP's own, also under loss, duplication and
// reordering.
func TestEnginesPerQueue(t *testing.T) {
	for _, tc := range []struct {
		crossed, lossy bool
	}{{false, false}, {true, false}, {true, true}} {
		crossed := tc.crossed
		t.Run(fmt.Sprintf("crossed=%v/lossy=%v", tc.crossed, tc.lossy), func(t *testing.T) {
			a, b := twoQueueDevices(t, crossed)
			if tc.lossy {
				// Lost, duplicated and reordered frames on every link:
				// retransmissions go through the hand-off too.
				for i, d := range []*Device{a, b} {
					for q := range d.Engines() {
						nicOf(d).Link(q).(*memlink.Link).SetImpairment(memlink.Impairment{Drop: 0.02, Duplicate: 0.02, Reorder: 0.02, Seed: uint64(10*i + q + 1)})
					}
				}
			}
			const size = 3000 // three packets at PMTU 1024
			as, bs, onQueue := sharedNodes(t, a, b, -8, 1<<20)
			if onQueue[0] == 0 || onQueue[1] == 0 {
				t.Fatalf("QP pairs per queue %v: the flows did not spread", onQueue)
			}
			pairs := len(as)
			for i := range pairs {
				for _, nd := range []*node{as[i], bs[i]} {
					if tqp(nd.qp).Queue() != int(tqp(nd.qp).SourcePort())%2 {
						t.Fatalf("QP %#x is not served by its flow's engine", nd.qp.QPN())
					}
					st, err := nd.dev.QPStatus()
					must(t, err)
					for _, s := range st {
						if s.QPN == nd.qp.QPN() && s.Queue != int(tqp(nd.qp).SourcePort())%2 {
							t.Fatalf("QP %#x: status says queue %d, its flow's is %d", s.QPN, s.Queue, tqp(nd.qp).SourcePort()%2)
						}
					}
				}
			}
			src, dst := as[0].mr.Bytes(), bs[0].mr.Bytes()
			for i := range pairs {
				off := i * 4 * size
				fill(src[off:off+size], i)
				postRecv(t, bs[i], RecvWR{ID: uint64(i), SGList: sge(bs[0].mr, off+2*size, size)})
				postSend(t, as[i],
					SendWR{Opcode: WRRDMAWrite, SGList: sge(as[0].mr, off, size), RemoteAddr: bs[0].mr.Addr() + uint64(off), RKey: bs[0].mr.RKey()},
					SendWR{Opcode: WRRDMARead, SGList: sge(as[0].mr, off+size, size), RemoteAddr: bs[0].mr.Addr() + uint64(off), RKey: bs[0].mr.RKey()},
					SendWR{Opcode: WRSend, SGList: sge(as[0].mr, off, size)},
					SendWR{ID: uint64(i), Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(as[0].mr, off+3*size, 8),
						RemoteAddr: bs[0].mr.Addr() + uint64(off+3*size), RKey: bs[0].mr.RKey(), CompareAdd: uint64(i + 1)})
			}
			for _, wc := range poll(t, as[0].scq, pairs, 10*time.Second) {
				if wc.Status != WCSuccess {
					t.Fatalf("send completion %+v", wc)
				}
			}
			for _, wc := range poll(t, bs[0].rcq, pairs, 5*time.Second) {
				if wc.Status != WCSuccess || wc.ByteLen != size {
					t.Fatalf("receive completion %+v", wc)
				}
			}
			for i := range pairs {
				off := i * 4 * size
				want := src[off : off+size]
				equalBytes(t, fmt.Sprintf("pair %d WRITE", i), dst[off:off+size], want)
				equalBytes(t, fmt.Sprintf("pair %d READ", i), src[off+size:off+2*size], want)
				equalBytes(t, fmt.Sprintf("pair %d SEND", i), dst[off+2*size:off+3*size], want)
				if got := binary.LittleEndian.Uint64(dst[off+3*size:]); got != uint64(i+1) {
					t.Fatalf("pair %d FETCH_ADD left %d, want %d", i, got, i+1)
				}
			}
			if tc.lossy {
				var st memlink.Stats
				for _, d := range []*Device{a, b} {
					for q := range d.Engines() {
						s := nicOf(d).Link(q).(*memlink.Link).Stats()
						st.Dropped += s.Dropped
						st.Duplicated += s.Duplicated
					}
				}
				if st.Dropped == 0 || st.Duplicated == 0 {
					t.Fatalf("the faults were not exercised: %+v", st)
				}
			}
			for _, d := range []*Device{a, b} {
				per, err := d.QueueCounters()
				must(t, err)
				for q, c := range per {
					if c.RcvdPkts == 0 || c.SentPkts == 0 {
						t.Errorf("queue %d's engine carried nothing: %+v", q, c)
					}
					if !crossed && c.HandedOff != 0 {
						t.Errorf("straight links: queue %d handed %d frames over", q, c.HandedOff)
					}
					if crossed && c.HandedOff == 0 {
						t.Errorf("crossed links: queue %d handed no frames over", q)
					}
					if c.HandOffDrops != 0 {
						t.Errorf("queue %d dropped %d frames handing them over", q, c.HandOffDrops)
					}
				}
			}
		})
	}
}

// TestAtomicsAcrossEngines has QPs of both engines add to one 64-bit word
// at once: atomics are atomic across all QPs of the device (IBV_ATOMIC_HCA),
// so no addition is lost, whichever engines run them.
func TestAtomicsAcrossEngines(t *testing.T) {
	a, b := twoQueueDevices(t, true)
	const pairs, rounds = 8, 200
	as, bs, _ := sharedNodes(t, a, b, pairs, 1<<16)
	target := bs[0].mr.Addr() + 4096
	for r := range rounds {
		for i := range pairs {
			postSend(t, as[i], SendWR{ID: uint64(r), Opcode: WRAtomicFetchAdd, Flags: SendSignaled,
				SGList: sge(as[0].mr, 8*i, 8), RemoteAddr: target, RKey: bs[0].mr.RKey(), CompareAdd: 1})
		}
		for _, wc := range poll(t, as[0].scq, pairs, 10*time.Second) {
			if wc.Status != WCSuccess {
				t.Fatalf("round %d: %+v", r, wc)
			}
		}
	}
	if got := binary.LittleEndian.Uint64(bs[0].mr.Bytes()[4096:]); got != pairs*rounds {
		t.Fatalf("the word holds %d after %d additions of 1", got, pairs*rounds)
	}
	// Each fetched value is one of the word's successive values: all distinct.
	seen := map[uint64]bool{}
	for i := range pairs {
		v := binary.LittleEndian.Uint64(as[0].mr.Bytes()[8*i:])
		if seen[v] {
			t.Fatalf("two QPs fetched the same value %d in the last round", v)
		}
		seen[v] = true
	}
	if !bytes.Equal(bs[0].mr.Bytes()[:4096], make([]byte, 4096)) {
		t.Fatal("bytes outside the target word changed")
	}
}

// TestForgedFramesNotHandedOff: a frame arriving on another queue than its
// QP's is handed to the QP's engine only once it passes the checks any
// engine can make (transport, addresses): one from a third party's
// address is dropped where it arrived, costing the QP's engine nothing,
// and one from the peer's address that answers nothing is handed over and
// dropped there as out of window. The QP stays in RTS.
func TestForgedFramesNotHandedOff(t *testing.T) {
	a, b := twoQueueDevices(t, false)
	as, _, _ := sharedNodes(t, a, b, -8, 1<<16) // at least one on each queue
	var target *node
	for _, nd := range as {
		if tqp(nd.qp).Queue() == 1 {
			target = nd
			break
		}
	}
	if target == nil {
		t.Fatal("no QP on a's second queue")
	}
	// The frames go out on b's queue 0 link, so they arrive on a's queue 0.
	forge := func(src netip.Addr) []byte {
		var p wire.Packet
		p.Eth = wire.Ethernet{Dst: [6]byte(macA), Src: [6]byte(macB)}
		p.IP = wire.IP{Src: src, Dst: ipA, TTL: 64, DF: true}
		p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
		p.BTH = wire.BTH{Opcode: wire.RCAck, PKey: 0xffff, DestQP: target.qp.QPN(), PSN: 0x123456}
		p.AETH = wire.AETH{Syndrome: wire.NAKSyndrome(wire.NAKRemoteAccessError)}
		buf := make([]byte, 256)
		n, err := wire.Encode(buf, &p)
		must(t, err)
		return buf[:max(n, wire.MinFrameLen)]
	}
	third := netip.MustParseAddr("198.18.0.99")
	must(t, nicOf(b).Link(0).Send([][]byte{forge(third), forge(third), forge(ipB)}))
	c := waitCounter(t, a, "the forged frames", func(c Counters) bool { return c.DroppedNoQP+c.ResponseOutOfWindow == 3 })
	per, err := a.QueueCounters()
	must(t, err)
	if per[0].DroppedNoQP != 2 || per[0].HandedOff != 1 || per[1].ResponseOutOfWindow != 1 || per[1].DroppedNoQP != 0 {
		t.Fatalf("per queue %+v / %+v; total %+v", per[0], per[1], c)
	}
	if target.qp.State() != StateRTS {
		t.Fatalf("QP in %v after forged frames", target.qp.State())
	}
}
