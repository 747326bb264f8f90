package impair_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/internal/netns"
)

// BenchmarkThroughput sends b.N RoCEv2-sized datagrams from A to B through
// the wire namespace, with and without an injector, and reports packets
// per second as seen by the receiver. Allocation figures include the test's
// own sender and receiver, so they do not describe the injector (see
// BenchmarkHandleBatch for that).
func BenchmarkThroughput(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  *impair.Config
	}{
		{"no-injector", nil},
		{"rates-0", &impair.Config{}},
		{"all-1pct", &impair.Config{Drop: 0.01, Duplicate: 0.01, Corrupt: 0.01, Reorder: 0.01, Seed: 1}},
	} {
		for _, size := range []int{256, 1024} {
			b.Run(fmt.Sprintf("%s/%d", tc.name, size), func(b *testing.B) {
				f := flow{n: b.N, size: size}
				r := newRun(b, f, netns.Config{})
				var inj *impair.Injector
				if tc.cfg != nil {
					if err := r.topo.SetFaults(r.a, tc.cfg); err != nil {
						b.Fatal(err)
					}
					inj = r.topo.Injector(r.a)
				}
				var got atomic.Uint64
				done := make(chan struct{})
				go func() {
					defer close(done)
					buf := make([]byte, 65536)
					tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
					_ = unix.SetsockoptTimeval(r.receiver, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
					for {
						if _, _, err := unix.Recvfrom(r.receiver, buf, 0); err != nil {
							return
						}
						got.Add(1)
					}
				}()
				// Paced on what B received (plus what the injector
				// dropped), so no queue overflows.
				progress := func() uint64 {
					if inj != nil {
						c := inj.Counters()
						return got.Load() + c.Dropped - c.Duplicate
					}
					return got.Load()
				}
				b.ResetTimer()
				start := time.Now()
				sendAll := func(seq uint32) error {
					_, err := unix.Write(r.sender, payload(seq, size))
					return err
				}
				sendPaced(b, f.n, 256, progress, sendAll)
				for got.Load()+8 < uint64(f.n*99/100) && time.Since(start) < 30*time.Second {
					time.Sleep(time.Millisecond)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				<-done
				b.ReportMetric(float64(got.Load())/elapsed.Seconds(), "pkts/s")
			})
		}
	}
}
