package verbs

import (
	"testing"
	"time"
)

// BenchmarkPostSend is the post path alone, per WRITE: the API's checks
// and conversion, the provider's, and the queueing. The engine is held
// while a batch is posted, so it takes none of them meanwhile and spends
// no processor; between batches (timer stopped) it sends them all.
func BenchmarkPostSend(b *testing.B) {
	a, peer := benchPair(b, 4096)
	nic := nicOf(a.dev)
	wr := []SendWR{{Opcode: WRRDMAWrite, SGList: sge(a.mr, 0, 64), RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}}
	last := []SendWR{wr[0]}
	last[0].Flags = SendSignaled
	buf := make([]WorkCompletion, 1)
	const batch = 1000 // within the QP's 1024 send WRs
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		b.StopTimer()
		nic.LockEngine(0)
		b.StartTimer()
		for i := 0; i < n-1; i++ {
			if _, err := a.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := a.qp.PostSend(last); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		nic.UnlockEngine(0)
		if wc, ok := waitOne(a.scq, buf, 10*time.Second); !ok || wc.Status != WCSuccess {
			b.Fatalf("completion %+v (%v)", wc, ok)
		}
		b.StartTimer()
		done += n
	}
}
