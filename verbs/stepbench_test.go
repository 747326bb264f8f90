package verbs

import "testing"

// BenchmarkWriteStepped is a 64-byte WRITE's whole path (the post, the
// requester's packet, the responder's ACK, the completion and the poll)
// with both engines held and stepped by the benchmark's goroutine, 64
// WRITEs a round: the per-packet work alone, without the share of a busy
// machine's scheduler that the streaming benchmarks measure too, so that
// two builds can be compared on a shared machine (issue 31's split).
func BenchmarkWriteStepped(b *testing.B) {
	writeStepped(b, 64, DeviceConfig{ActiveMTU: 4096, AckHold: -1})
}

// BenchmarkWriteSteppedOne is BenchmarkWriteStepped one WRITE a round,
// with lazy asks as on the fast path: what each WRITE's step costs on its
// own, as in a ping-pong (issue 34's per-WRITE build cost).
func BenchmarkWriteSteppedOne(b *testing.B) {
	writeStepped(b, 1, DeviceConfig{ActiveMTU: 4096, AckHold: -1, AckCoalesce: true})
}

func writeStepped(b *testing.B, depth int, cfg DeviceConfig) {
	a, peer := benchPairWith(b, 64, cfg)
	na, np := nicOf(a.dev), nicOf(peer.dev)
	na.LockEngine(0)
	np.LockEngine(0)
	b.Cleanup(func() {
		na.UnlockEngine(0)
		np.UnlockEngine(0)
	})
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}}
	buf := make([]WorkCompletion, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(depth, b.N-done)
		for range n {
			if _, err := a.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
		}
		for got, steps := 0, 0; got < n; steps++ {
			if steps == 1000 {
				b.Fatalf("%d of %d WRITEs completed after %d rounds of steps", got, n, steps)
			}
			na.StepEngine(0)
			np.StepEngine(0)
			k := a.scq.Poll(buf)
			for _, wc := range buf[:k] {
				if wc.Status != WCSuccess {
					b.Fatalf("completion %+v", wc)
				}
			}
			got += k
		}
		done += n
	}
}
