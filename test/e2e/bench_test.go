package e2e

import (
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// benchTopology is a direct veth pair at MTU 4200 (RoCE path MTU 4096).
func benchTopology(b *testing.B) *netns.Topology {
	return netns.New(b, netns.Config{Kind: netns.Direct, MTU: 4200, Queues: 1})
}

func benchRNICs(b *testing.B, size int, opts verbs.Options) (*rnic, *rnic) {
	topo := benchTopology(b)
	a, p := openRNICWith(b, topo.Hosts[0], size, opts), openRNICWith(b, topo.Hosts[1], size, opts)
	connectRC(b, a, p, verbs.MTU4096, 14)
	return a, p
}

// BenchmarkXDPWrite64K streams 64 KiB RDMA WRITEs, 16 in flight, between two
// namespaces through XDP and AF_XDP; compare with BenchmarkTCPStream64K.
func BenchmarkXDPWrite64K(b *testing.B) { benchXDPWrite(b, 64<<10, 16, false) }

// BenchmarkXDPWrite64KEvents is BenchmarkXDPWrite64K with the application
// sleeping on the completion channel instead of spinning on the CQ.
func BenchmarkXDPWrite64KEvents(b *testing.B) { benchXDPWrite(b, 64<<10, 16, true) }

// BenchmarkXDPWrite64 is the 64-byte WRITE message rate, 64 in flight.
func BenchmarkXDPWrite64(b *testing.B) { benchXDPWrite(b, 64, 64, false) }

// BenchmarkXDPWrite64Events is BenchmarkXDPWrite64 on the completion channel.
func BenchmarkXDPWrite64Events(b *testing.B) { benchXDPWrite(b, 64, 64, true) }

func benchXDPWrite(b *testing.B, size, depth int, events bool) {
	a, p := benchRNICs(b, size, verbs.Options{})
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: sgl(a.mr, 0, size), RemoteAddr: p.mr.Addr(), RKey: p.mr.RKey()}}
	buf := make([]verbs.WorkCompletion, 64)
	b.SetBytes(int64(size))
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if _, err := a.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		k := a.scq.Poll(buf)
		if k == 0 && events {
			a.scq.ReqNotify(false)
			if k = a.scq.Poll(buf); k == 0 {
				if err := a.scq.Wait(b.Context()); err != nil {
					b.Fatal(err)
				}
				continue
			}
		}
		for _, wc := range buf[:k] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("completion %+v", wc)
			}
		}
		done += k
	}
	b.ReportMetric(float64(b.N)*float64(size)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
}

// BenchmarkTCPStream64K streams 64 KiB writes over kernel TCP on the same kind of pair.
func BenchmarkTCPStream64K(b *testing.B) {
	const size = 64 << 10
	topo := benchTopology(b)
	client, server := tcpPair(b, topo)
	go func() { _, _ = io.Copy(io.Discard, server) }()
	msg := make([]byte, size)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*size*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// BenchmarkXDPWriteRoundTrip8 is ib_write_lat's exchange: 8-byte WRITEs back
// and forth, each side polling for its completion.
func BenchmarkXDPWriteRoundTrip8(b *testing.B) { benchXDPWriteRoundTrip8(b, verbs.Options{}) }

// BenchmarkXDPWriteRoundTrip8BusyPoll is the same with busy-polling engines.
func BenchmarkXDPWriteRoundTrip8BusyPoll(b *testing.B) {
	benchXDPWriteRoundTrip8(b, verbs.Options{BusyPoll: true})
}

func benchXDPWriteRoundTrip8(b *testing.B, opts verbs.Options) {
	a, p := benchRNICs(b, 4096, opts)
	buf := make([]verbs.WorkCompletion, 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range [2][2]*rnic{{a, p}, {p, a}} {
			if _, err := s[0].qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: sgl(s[0].mr, 0, 8), RemoteAddr: s[1].mr.Addr(), RKey: s[1].mr.RKey()}}); err != nil {
				b.Fatal(err)
			}
			for s[0].scq.Poll(buf) == 0 {
				if opts.BusyPoll {
					// Poll runs this side's engine; the other side's
					// needs a processor too. (A yielding spin would keep
					// a sleeping engine's wake-up in the netpoller.)
					runtime.Gosched()
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/rtt")
}

// BenchmarkTCPPingPong8 is the kernel TCP (TCP_NODELAY) ping-pong of 8 bytes.
func BenchmarkTCPPingPong8(b *testing.B) {
	topo := benchTopology(b)
	client, server := tcpPair(b, topo)
	go func() {
		m := make([]byte, 8)
		for {
			if _, err := io.ReadFull(server, m); err != nil {
				return
			}
			if _, err := server.Write(m); err != nil {
				return
			}
		}
	}()
	m := make([]byte, 8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Write(m); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/rtt")
}

// tcpPair connects host 0 to host 1 over TCP.
func tcpPair(b *testing.B, topo *netns.Topology) (net.Conn, net.Conn) {
	c, s, err := netns.TCPPair(b.Context(), topo.Hosts[0], topo.Hosts[1], topo.Hosts[1].Addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}
