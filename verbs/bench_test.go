package verbs

import (
	"fmt"
	"testing"

	"github.com/xdproce/xdproce/link/memlink"
)

// benchPair connects two devices over an in-memory link with busy-polling engines.
func benchPair(b *testing.B, size int) (*node, *node) {
	return benchPairWith(b, size, DeviceConfig{ActiveMTU: 4096})
}

// benchPairWith is benchPair with both devices configured as cfg.
func benchPairWith(b *testing.B, size int, cfg DeviceConfig) (*node, *node) {
	b.Helper()
	la, lb := memlink.NewPair(4096 + 200)
	a := newNode(b, newDeviceWith(b, la, macA, ipA, cfg), size)
	p := newNode(b, newDeviceWith(b, lb, macB, ipB, cfg), size)
	connect(b, a, p, ipA, ipB, macA, macB, connOpts{mtu: MTU4096, retry: 7, rnr: 7, timeout: 14})
	return a, p
}

// benchWrite keeps 64 WRITEs of size bytes in flight.
func benchWrite(b *testing.B, size int) {
	a, peer := benchPair(b, size)
	b.ReportAllocs()
	wr := SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}
	benchStream(b, a, wr, size, 64, nil)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
	// Payload throughput in network units, next to SetBytes' MB/s.
	b.ReportMetric(float64(b.N)*float64(size)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// benchStream posts b.N copies of wr from a, depth in flight, until all
// have completed successfully; between polls it calls each (if set).
func benchStream(b *testing.B, a *node, wr SendWR, size, depth int, each func()) {
	b.SetBytes(int64(size))
	wrs := []SendWR{wr}
	buf := make([]WorkCompletion, 64)
	posted, done := 0, 0
	b.ResetTimer()
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if _, err := a.qp.PostSend(wrs); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		k := a.scq.Poll(buf)
		for _, wc := range buf[:k] {
			if wc.Status != WCSuccess {
				b.Fatalf("completion %+v", wc)
			}
		}
		done += k
		if each != nil {
			each()
		}
	}
	b.StopTimer()
}

func BenchmarkWrite64(b *testing.B)  { benchWrite(b, 64) }
func BenchmarkWrite64K(b *testing.B) { benchWrite(b, 64<<10) }

// BenchmarkWriteRoundTrip8 is ib_write_lat's exchange over the in-memory link.
func BenchmarkWriteRoundTrip8(b *testing.B) {
	a, p := benchPair(b, 4096)
	buf := make([]WorkCompletion, 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range [2][2]*node{{a, p}, {p, a}} {
			if _, err := s[0].qp.PostSend([]SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(s[0].mr, 0, 8), RemoteAddr: s[1].mr.Addr(), RKey: s[1].mr.RKey()}}); err != nil {
				b.Fatal(err)
			}
			for s[0].scq.Poll(buf) == 0 {
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/rtt")
}

// BenchmarkSend64 keeps 64 SENDs of 64 bytes in flight, the receiver
// reposting a receive for each one it completes.
func BenchmarkSend64(b *testing.B) {
	const size, depth = 64, 64
	a, peer := benchPair(b, 1<<16)
	recv := []RecvWR{{SGList: sge(peer.mr, 0, size)}}
	for range 2 * depth {
		if _, err := peer.qp.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(size)
	b.ReportAllocs()
	buf := make([]WorkCompletion, 64)
	wr := []SendWR{{Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, size)}}
	posted, done := 0, 0
	b.ResetTimer()
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if _, err := a.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		for range peer.rcq.Poll(buf) {
			if _, err := peer.qp.PostRecv(recv); err != nil {
				b.Fatal(err)
			}
		}
		done += a.scq.Poll(buf)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
}

// BenchmarkLoss streams each operation with 32 in flight over an in-memory
// link that drops 1% or 5% of the packets both ways (perftest's timeout 14
// and retry_cnt 7), reporting Gbit/s, the packets resent per packet lost
// and the retries that needed the timer; compare with rate 0 in the same
// run. The recovery variants turn pieces of selective recovery off
// (docs/recovery.md): gobackn is rxe's recovery, all three off.
func BenchmarkLoss(b *testing.B) {
	variants := []struct {
		name string
		r    Recovery
	}{{"selective", 0}, {"noholes", NoReadHoles}, {"nohold", NoHold}, {"noprobe", NoProbe}, {"gobackn", NoReadHoles | NoHold | NoProbe}}
	for _, rate := range []float64{0, 0.01, 0.05} {
		for _, op := range []WROpcode{WRRDMAWrite, WRSend, WRRDMARead, WRAtomicFetchAdd} {
			size := 64 << 10
			if op == WRAtomicFetchAdd {
				size = 8
			}
			for _, v := range variants {
				if rate == 0 && v.r != 0 {
					continue // the same without loss
				}
				b.Run(fmt.Sprintf("%v/%gpct/%s", op, rate*100, v.name), func(b *testing.B) { benchLoss(b, op, size, rate, v.r) })
			}
		}
	}
}

func benchLoss(b *testing.B, op WROpcode, size int, rate float64, r Recovery) {
	a, peer := benchPairWith(b, 2*size, DeviceConfig{ActiveMTU: 4096, Recovery: r})
	a.dev.nic.Link(0).(*memlink.Link).SetImpairment(memlink.Impairment{Drop: rate, Seed: 1})
	peer.dev.nic.Link(0).(*memlink.Link).SetImpairment(memlink.Impairment{Drop: rate, Seed: 2})
	var each func()
	if op == WRSend {
		for range 512 {
			postRecvB(b, peer, size)
		}
		buf := make([]WorkCompletion, 64)
		each = func() {
			for range peer.rcq.Poll(buf) {
				postRecvB(b, peer, size)
			}
		}
	}
	wr := SendWR{Opcode: op, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey(), CompareAdd: 1}
	benchStream(b, a, wr, size, 32, each)
	c, cp := counters(a.dev), counters(peer.dev)
	b.ReportMetric(float64(c.TransportTimeouts), "timeouts")
	b.ReportMetric(float64(c.CompleterRetryErr), "retries")
	b.ReportMetric(float64(c.LostResponseRetry), "rerequests")
	la, lp := a.dev.nic.Link(0).(*memlink.Link).Stats(), peer.dev.nic.Link(0).(*memlink.Link).Stats()
	if lost := la.Dropped + lp.Dropped; lost > 0 {
		b.ReportMetric(float64(c.RetransmittedPkts+cp.RetransmittedPkts)/float64(lost), "resent/lost")
	}
	b.ReportMetric(float64(b.N)*float64(size)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

func postRecvB(b *testing.B, n *node, size int) {
	if _, err := n.qp.PostRecv([]RecvWR{{SGList: sge(n.mr, 0, size)}}); err != nil {
		b.Fatal(err)
	}
}
