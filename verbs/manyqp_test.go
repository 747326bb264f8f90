package verbs

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
)

// manyQPs connects n RC QP pairs between a and b, all sharing a's and b's
// PD, CQs and memory region, and returns them as nodes (one per QP).
func manyQPs(t testing.TB, a, b *node, n int) (as, bs []*node) {
	t.Helper()
	for range n {
		qa, qb := *a, *b
		for _, q := range []*node{&qa, &qb} {
			var err error
			q.qp, err = q.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: q.scq, RecvCQ: q.rcq,
				Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
			must(t, err)
		}
		connect(t, &qa, &qb, ipA, ipB, macA, macB, connOpts{mtu: MTU1024, timeout: 8, retry: 7, rnr: 7})
		as, bs = append(as, &qa), append(bs, &qb)
	}
	return as, bs
}

// TestManyQPsUnderFaults runs 300 QP pairs on one device pair at once, over
// a link that drops, duplicates, corrupts and reorders: each QP WRITEs its
// own slice of the peer's region and then SENDs it back with immediate data.
// Every byte and every completion must arrive, on the right QP.
func TestManyQPsUnderFaults(t *testing.T) {
	const qps, slot = 300, 8 << 10
	a, b, la, lb := pair(t, connOpts{}, qps*slot)
	imp := memlink.Impairment{Drop: 0.01, Duplicate: 0.01, Corrupt: 0.01, Reorder: 0.01}
	imp.Seed = 11
	la.SetImpairment(imp)
	imp.Seed = 12
	lb.SetImpairment(imp)
	as, bs := manyQPs(t, a, b, qps)

	rng := rand.New(rand.NewPCG(3, 4))
	fill(a.mr.Bytes(), 9)
	sizes := make([]int, qps)
	// QPNs are random per device: a's and b's may collide, so only a's.
	byA := map[uint32]int{}
	for i := range qps {
		sizes[i] = 1 + rng.IntN(slot)
		byA[as[i].qp.QPN()] = i
		postRecv(t, as[i], RecvWR{ID: uint64(i), SGList: sge(a.mr, i*slot, slot)})
		postSend(t, as[i], SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGList: sge(a.mr, i*slot, sizes[i]), RemoteAddr: b.mr.Addr() + uint64(i*slot), RKey: b.mr.RKey()})
	}
	for _, wc := range poll(t, a.scq, qps, 20*time.Second) {
		if i, ok := byA[wc.QPNum]; !ok || wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("WRITE completion %+v", wc)
		}
	}
	want := append([]byte(nil), a.mr.Bytes()...)
	clear(a.mr.Bytes())
	for i := range qps {
		postSend(t, bs[i], SendWR{ID: uint64(i), Opcode: WRSendWithImm, Flags: SendSignaled, ImmData: uint32(i),
			SGList: sge(b.mr, i*slot, sizes[i])})
	}
	for _, wc := range poll(t, a.rcq, qps, 20*time.Second) {
		i, ok := byA[wc.QPNum]
		if !ok || wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.ImmData != uint32(i) || wc.ByteLen != uint32(sizes[i]) {
			t.Fatalf("receive completion %+v", wc)
		}
	}
	poll(t, b.scq, qps, 20*time.Second)
	for i := range qps {
		equalBytes(t, "message", a.mr.Bytes()[i*slot:i*slot+sizes[i]], want[i*slot:i*slot+sizes[i]])
	}
	if s := la.Stats(); s.Dropped == 0 || s.Corrupted == 0 {
		t.Fatalf("the link was not impaired: %+v", s)
	}
}

// BenchmarkManyQPsWrite64 spreads 64-byte WRITEs over 256 QPs, 4 in flight
// on each: the cost of a busy device with many connections.
func BenchmarkManyQPsWrite64(b *testing.B) {
	const qps, depth = 256, 4
	x, y := benchPair(b, 4096)
	as, _ := manyQPs(b, x, y, qps)
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(x.mr, 0, 64), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	buf := make([]WorkCompletion, 256)
	index := map[uint32]int{}
	for i, q := range as {
		index[q.qp.QPN()] = i
	}
	inflight := make([]int, qps)
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for i := 0; i < qps && posted < b.N; i++ {
			for ; inflight[i] < depth && posted < b.N; inflight[i]++ {
				if _, err := as[i].qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				posted++
			}
		}
		k := x.scq.Poll(buf)
		for _, wc := range buf[:k] {
			if wc.Status != WCSuccess {
				b.Fatalf("completion %+v", wc)
			}
			inflight[index[wc.QPNum]]--
		}
		done += k
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
}
