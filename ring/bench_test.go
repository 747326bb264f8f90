package ring

import (
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkThroughput sends frames a->b over the veth pair as fast as the
// sender goes: one goroutine per socket, each busy-polling its socket, the
// sender never more than half the receiver's RX frames ahead (so nothing is
// dropped for want of fill entries) and kicking once per 128 frames.
// b.N is the number of frames.
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(byteSize(size), func(b *testing.B) { benchThroughput(b, size) })
	}
}

func byteSize(n int) string {
	if n%1024 == 0 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

func benchThroughput(b *testing.B, size int) {
	mtu, multi := 1500, false
	if size > 1514 {
		mtu, multi = 4200, true // 4096-byte frames arrive as 3840+256
	}
	n := newVethNet(b, 1, mtu)
	cfg := Config{MultiBuffer: multi, RXFrames: 4096, TXFrames: 2048}
	tx := n.open(n.a, 0, cfg)
	rx := n.open(n.b, 0, cfg)
	deadline := time.Now().Add(5 * time.Minute)

	var got atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the receiver owns rx until done is closed
		defer close(done)
		pkts := make([]Packet, 64)
		for spins := 0; ; spins++ {
			k := rx.Receive(pkts)
			if k > 0 {
				got.Add(int64(k))
				_ = rx.Release(pkts[:k])
				_, _ = rx.Refill()
				continue
			}
			if spins%1024 == 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
		}
	}()

	frames := make([]TXFrame, 128) // half of veth's 256-entry ptr_ring: a bigger burst overflows it
	// Keep at most half the receiver's RX frames in flight (a 4 KiB frame
	// takes two), so the fill ring never runs dry.
	segs := (size + rx.RXSegmentSize() - 1) / rx.RXSegmentSize()
	window := int64(cfg.RXFrames / (2 * segs))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		tx.Complete()
		for int64(sent)-got.Load() > window {
			if err := tx.Kick(); err != nil {
				b.Fatal(err)
			}
			tx.Complete()
			if time.Now().After(deadline) {
				b.Fatal("receiver stalled")
			}
		}
		k := tx.AllocTX(frames[:min(len(frames), b.N-sent)])
		for i := range frames[:k] {
			frames[i].Len = size
			writeTestFrame(frames[i].Buf()[:19], n.bMAC, n.aMAC, 0, uint32(sent+i))
		}
		if m, err := tx.Submit(frames[:k]); err != nil || m != k {
			b.Fatalf("submit %d: %d, %v", k, m, err)
		}
		sent += k
		if err := tx.Kick(); err != nil {
			b.Fatal(err)
		}
	}
	// Wait for the tail; frames that do not arrive within 2 s of the last
	// progress are reported as lost.
	last, progress := got.Load(), time.Now()
	for got.Load() < int64(b.N) && time.Since(progress) < 2*time.Second {
		if err := tx.Kick(); err != nil {
			b.Fatal(err)
		}
		tx.Complete()
		if g := got.Load(); g != last {
			last, progress = g, time.Now()
		}
	}
	b.StopTimer()
	close(stop)
	<-done
	recv := got.Load()
	b.ReportMetric(float64(recv)/b.Elapsed().Seconds(), "pkts/s")
	b.ReportMetric(float64(int64(b.N)-recv), "lost")
	b.ReportMetric(float64(tx.Counters().TXKicks)/float64(b.N), "kicks/pkt")
	if st, err := rx.Statistics(); err == nil {
		b.ReportMetric(float64(st.RXDropped+st.RXRingFull), "rx_dropped")
	}
}

// BenchmarkPingPong measures the round trip a->b->a of a 64-byte frame:
// b runs an echo loop in its own goroutine, both sides busy-poll (no
// poll(2)); ns/op is one round trip, p50/p99 are reported too.
func BenchmarkPingPong(b *testing.B) {
	n := newVethNet(b, 1, 1500)
	cfg := Config{RXFrames: 256, TXFrames: 64}
	a := n.open(n.a, 0, cfg)
	e := n.open(n.b, 0, cfg)
	deadline := time.Now().Add(5 * time.Minute)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // echo: owns e until done is closed
		defer close(done)
		pkts := make([]Packet, 16)
		out := make([]TXFrame, 16)
		for spins := 0; ; spins++ {
			e.Complete()
			k := e.Receive(pkts)
			if k == 0 {
				if spins%1024 == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
				continue
			}
			m := e.AllocTX(out[:k])
			for i := range out[:m] {
				frame := pkts[i].Segment(0)
				buf := out[i].Buf()
				copy(buf, frame)
				copy(buf[0:6], frame[6:12])
				copy(buf[6:12], frame[0:6])
				out[i].Len = len(frame)
			}
			_, _ = e.Submit(out[:m])
			_ = e.Kick()
			_ = e.Release(pkts[:k])
			_, _ = e.Refill()
		}
	}()

	pkts := make([]Packet, 16)
	frames := make([]TXFrame, 1)
	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		a.Complete()
		if a.AllocTX(frames) != 1 {
			b.Fatal("no TX buffer")
		}
		frames[0].Len = 64
		writeTestFrame(frames[0].Buf()[:64], n.bMAC, n.aMAC, 0, uint32(i))
		if _, err := a.Submit(frames); err != nil {
			b.Fatal(err)
		}
		if err := a.Kick(); err != nil {
			b.Fatal(err)
		}
		for spins := 0; ; spins++ {
			k := a.Receive(pkts)
			if k > 0 {
				_ = a.Release(pkts[:k])
				_, _ = a.Refill()
				break
			}
			if spins%4096 == 4095 && time.Now().After(deadline) {
				b.Fatal("no echo")
			}
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	<-done
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkDatapath is the socket's own per-packet cost, without a kernel:
// receive+release+refill and alloc+submit+complete of 64-frame batches
// against the simulated kernel (whose work is excluded from the timing).
func BenchmarkDatapath(b *testing.B) {
	k := newSim(b, Config{RXFrames: 128, TXFrames: 128})
	k.dp.refill()
	pkts := make([]Packet, 64)
	tx := make([]TXFrame, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		k.consumeFill()
		for range 64 {
			k.deliver(64)
		}
		k.expected = k.expected[:0]
		k.consumeTX()
		k.sent = k.sent[:0]
		k.completeTX(len(k.inflight))
		b.StartTimer()

		n := k.dp.receive(pkts)
		_ = k.dp.release(pkts[:n])
		k.dp.refill()
		k.dp.complete()
		m := k.dp.allocTX(tx)
		for i := range tx[:m] {
			tx[i].Len = 64
		}
		_, _ = k.dp.submit(tx[:m])
		done += n
	}
}
