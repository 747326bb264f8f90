package verbs

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// The responder's NAK for a hole that filling another uncovers
// (internal/engine/ooo.go, docs/recovery.md). Each test first runs a
// warm-up WRITE (PSNs 0-15, PSN 2 lost) from which the responder learns
// that the requester resends what is NAKed alone; then its own messages
// from PSN 16 on. The first hole's NAK is held back until the responder
// holds every packet behind both holes, so the fill always finds the
// second hole held behind it, whatever the engines' timing.

const warmPSNs = 16 // the warm-up WRITE: 64 KiB at PMTU 4096

// holeWire is what the responder's log lets through: the first NAK for
// each PSN in withhold is kept back (for the test to deliver), the first plain
// ACK of each PSN in lostACKs and the first sequence NAK of each PSN in
// lostNAKs are lost.
type holeWire struct {
	withhold []uint32
	lostACKs []uint32
	lostNAKs []uint32

	mu   sync.Mutex
	kept map[uint32][]byte
}

func (h *holeWire) drop(p *wire.Packet, seen []pktRec, frame []byte) bool {
	if p.BTH.Opcode != wire.RCAck {
		return false
	}
	first := func(ok func(pktRec) bool) bool {
		for _, r := range seen {
			if r.psn == p.BTH.PSN && ok(r) {
				return false
			}
		}
		return true
	}
	rec := pktRec{psn: p.BTH.PSN, op: p.BTH.Opcode, aeth: p.AETH}
	switch {
	case isPlainACK(rec):
		return slices.Contains(h.lostACKs, p.BTH.PSN) && first(isPlainACK)
	case isSeqNAK(rec) && slices.Contains(h.withhold, p.BTH.PSN) && first(isSeqNAK):
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.kept == nil {
			h.kept = map[uint32][]byte{}
		}
		h.kept[p.BTH.PSN] = slices.Clone(frame)
		return true
	case isSeqNAK(rec):
		return slices.Contains(h.lostNAKs, p.BTH.PSN) && first(isSeqNAK)
	}
	return false
}

// holePair is selectivePair with requester recovery ra (NoProbe: the
// requester goes back N, as rxe's), the responder holding, the data
// packets of lost (and the warm-up's PSN 2) lost once, and the
// responder's answers filtered by h. The warm-up is done when it returns.
func holePair(t *testing.T, ra Recovery, h *holeWire, lost ...uint32) (a, b *node, wa, wb *pktLog) {
	t.Helper()
	c := faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr, r Recovery) *node {
		return newNode(t, newDeviceWith(t, l, mac, ip, DeviceConfig{ActiveMTU: 4096, Clock: c, Recovery: r}), 1<<20)
	}
	a, b = mk(la, macA, ipA, ra), mk(lb, macB, ipB, 0)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU4096, timeout: 14, retry: 7, rnr: 7})
	wa = logWire(la, firstOf(isData, append([]uint32{2}, lost...)...))
	wb = &pktLog{}
	lb.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) != nil {
			return false
		}
		wb.mu.Lock()
		defer wb.mu.Unlock()
		d := h.drop(&p, wb.pkts, f)
		wb.pkts = append(wb.pkts, pktRec{psn: p.BTH.PSN, op: p.BTH.Opcode, aeth: p.AETH, reth: p.RETH, dropped: d})
		return d
	})
	fill(a.mr.Bytes()[:64<<10], 77)
	postSend(t, a, SendWR{ID: 100, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("warm-up completion %+v", wc)
	}
	quiesce(t, a.dev, b.dev)
	return a, b, wa, wb
}

// release waits until the responder holds want packets in all (the
// warm-up's 13 included), then delivers the NAK for psn h kept back.
func (h *holeWire) release(t *testing.T, a, b *node, psn uint32, want uint64) {
	t.Helper()
	waitCounter(t, b.dev, "the held packets", func(c Counters) bool { return c.OOOHeld == want })
	h.mu.Lock()
	f := h.kept[psn]
	h.mu.Unlock()
	if f == nil {
		t.Fatal("no NAK kept back")
	}
	nicOf(a.dev).Link(0).(*memlink.Link).Inject([][]byte{f})
}

// after lists the PSNs of the packets ok accepts that the log holds past
// the warm-up (PSN 16 on), dropped ones too, in order.
func (w *pktLog) after(ok func(pktRec) bool) []uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []uint32
	for _, r := range w.pkts {
		if r.psn >= warmPSNs && ok(r) {
			out = append(out, r.psn)
		}
	}
	return out
}

// runWrites posts n 64 KiB WRITEs from PSN 16 and checks their completions
// and data.
func runWrites(t *testing.T, a, b *node, n int) {
	t.Helper()
	const size = 64 << 10
	fill(a.mr.Bytes()[size:(n+1)*size], 31)
	for i := 1; i <= n; i++ {
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, i*size, size),
			RemoteAddr: b.mr.Addr() + uint64(i*size), RKey: b.mr.RKey()})
	}
}

func checkWrites(t *testing.T, a, b *node, n int) {
	t.Helper()
	const size = 64 << 10
	for i, wc := range poll(t, a.scq, n, 5*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[:(n+1)*size], a.mr.Bytes()[:(n+1)*size])
}

// TestHoleNAKTwoHoles: two 64 KiB WRITEs (PSNs 16-47), PSNs 19 and 36
// lost. Once the resent 19 fills the first hole, the responder ACKs 35
// and NAKs 36 in the same breath; the requester resends 19 and 36 alone,
// no timer. The variants lose the ACK of 35 (the NAK, which acknowledges
// everything before 36, tells the requester instead: without it only the
// timer would) or the NAK of 36 (the ACK, answering the probe, tells).
func TestHoleNAKTwoHoles(t *testing.T) {
	for _, tc := range []struct {
		name             string
		lostACK, lostNAK []uint32
	}{{"", nil, nil}, {"lost ACK", []uint32{35}, nil}, {"lost NAK", nil, []uint32{36}}} {
		t.Run(tc.name, func(t *testing.T) {
			h := &holeWire{withhold: []uint32{19}, lostACKs: tc.lostACK, lostNAKs: tc.lostNAK}
			a, b, wa, wb := holePair(t, 0, h, 19, 36)
			runWrites(t, a, b, 2)
			h.release(t, a, b, h.withhold[0], 13+27)
			checkWrites(t, a, b, 2)
			quiesce(t, a.dev, b.dev)
			if got := wa.resent(isData); !slices.Equal(got, []uint32{2, 19, 36}) {
				t.Fatalf("resent PSNs %v, want [2 19 36] (the warm-up's, then the holes)", got)
			}
			if got := wb.after(isSeqNAK); !slices.Equal(got, []uint32{19, 36}) {
				t.Fatalf("sequence NAKs %v, want [19 36]", got)
			}
			if got := wb.after(isPlainACK); !slices.Equal(got, []uint32{35, 47}) {
				t.Fatalf("ACKs %v, want [35 47]", got)
			}
			if ack := wb.last(isPlainACK); ack.aeth.MSN != 3 {
				t.Fatalf("last ACK MSN %d, want 3", ack.aeth.MSN)
			}
			if ca, cb := counters(a.dev), counters(b.dev); ca.TransportTimeouts != 0 || cb.OOOHoleNAKs != 1 || cb.DuplicateRequest != 0 {
				t.Fatalf("counters A %+v B %+v: want no timer, one hole NAK, no duplicate", ca, cb)
			}
		})
	}
}

// TestHoleNAKAdjacentHoles: PSNs 19, 20 and 30 lost. The resent 19 fills
// the first hole but executes nothing held (20 is missing too), so its ACK
// names the probe alone, which is what a go-back-N responder answers: the
// requester would go back over 20-47, most of which the responder holds.
// The NAK of 20 that follows the ACK makes it resend 20 alone. That 20 is
// the PSN after the filling one, which a go-back-N requester sends next
// too; it was not held, so it does not make the responder take the
// requester for one: the fill by 20 uncovers 30 and NAKs it, which tells
// the requester although the ACK of 29 is lost. Four packets resent, no
// timer (the commonest waste at 5% loss before,
// docs/results/2026-11-28-loss-holes.md).
func TestHoleNAKAdjacentHoles(t *testing.T) {
	h := &holeWire{withhold: []uint32{19}, lostACKs: []uint32{29}}
	a, b, wa, wb := holePair(t, 0, h, 19, 20, 30)
	runWrites(t, a, b, 2)
	h.release(t, a, b, 19, 13+26)
	checkWrites(t, a, b, 2)
	quiesce(t, a.dev, b.dev)
	if got := wa.resent(isData); !slices.Equal(got, []uint32{2, 19, 20, 30}) {
		t.Fatalf("resent PSNs %v, want [2 19 20 30]", got)
	}
	if got := wb.after(isSeqNAK); !slices.Equal(got, []uint32{19, 20, 30}) {
		t.Fatalf("sequence NAKs %v, want [19 20 30]", got)
	}
	if got := wb.after(isPlainACK); !slices.Equal(got, []uint32{19, 29, 47}) {
		t.Fatalf("ACKs %v, want [19 29 47] (29 lost)", got)
	}
	if ca, cb := counters(a.dev), counters(b.dev); ca.TransportTimeouts != 0 || cb.OOOHoleNAKs != 2 || cb.DuplicateRequest != 0 {
		t.Fatalf("counters A %+v B %+v", ca, cb)
	}
}

// TestHoleNAKThreeHoles: PSNs 19, 28 and 40 of 16-47 lost. Each fill
// uncovers the next hole: ACK 27 and NAK 28, then ACK 39 and NAK 40, then
// ACK 47; three packets resent, each once.
func TestHoleNAKThreeHoles(t *testing.T) {
	h := &holeWire{withhold: []uint32{19}}
	a, b, wa, wb := holePair(t, 0, h, 19, 28, 40)
	runWrites(t, a, b, 2)
	h.release(t, a, b, h.withhold[0], 13+26)
	checkWrites(t, a, b, 2)
	quiesce(t, a.dev, b.dev)
	if got := wa.resent(isData); !slices.Equal(got, []uint32{2, 19, 28, 40}) {
		t.Fatalf("resent PSNs %v, want [2 19 28 40]", got)
	}
	if got := wb.after(isSeqNAK); !slices.Equal(got, []uint32{19, 28, 40}) {
		t.Fatalf("sequence NAKs %v, want [19 28 40]", got)
	}
	if got := wb.after(isPlainACK); !slices.Equal(got, []uint32{27, 39, 47}) {
		t.Fatalf("ACKs %v, want [27 39 47]", got)
	}
	if ca, cb := counters(a.dev), counters(b.dev); ca.TransportTimeouts != 0 || cb.OOOHoleNAKs != 2 {
		t.Fatalf("counters A %+v B %+v", ca, cb)
	}
}

// TestHoleNAKInSend: three 64 KiB SENDs (PSNs 16-63), PSN 20 lost and the
// FIRST, a MIDDLE or the LAST of the second SEND. The fill of 20 executes
// the held packets up to the second hole (the second SEND's receive WQE
// taken mid-message for MIDDLE and LAST) and NAKs it; the receives
// complete in order with every byte, and the MSN is what go-back-N
// leaves.
func TestHoleNAKInSend(t *testing.T) {
	for _, hole := range []struct {
		name string
		psn  uint32
	}{{"FIRST", 32}, {"MIDDLE", 40}, {"LAST", 47}} {
		t.Run(hole.name, func(t *testing.T) {
			h := &holeWire{withhold: []uint32{20}}
			a, b, wa, wb := holePair(t, 0, h, 20, hole.psn)
			const size = 64 << 10
			fill(a.mr.Bytes()[size:4*size], int(hole.psn))
			for i := 1; i <= 3; i++ {
				postRecv(t, b, RecvWR{ID: uint64(10 + i), SGList: sge(b.mr, i*size, size)})
				postSend(t, a, SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, i*size, size)})
			}
			h.release(t, a, b, h.withhold[0], 13+42)
			for i, wc := range poll(t, a.scq, 3, 5*time.Second) {
				if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
					t.Fatalf("completion %d: %+v", i, wc)
				}
			}
			for i, wc := range poll(t, b.rcq, 3, 5*time.Second) {
				if wc.Status != WCSuccess || wc.WRID != uint64(11+i) || wc.ByteLen != size {
					t.Fatalf("receive %d: %+v", i, wc)
				}
			}
			equalBytes(t, "SEND", b.mr.Bytes()[size:4*size], a.mr.Bytes()[size:4*size])
			quiesce(t, a.dev, b.dev)
			if got := wa.resent(isData); !slices.Equal(got, []uint32{2, 20, hole.psn}) {
				t.Fatalf("resent PSNs %v, want [2 20 %d]", got, hole.psn)
			}
			if got := wb.after(isSeqNAK); !slices.Equal(got, []uint32{20, hole.psn}) {
				t.Fatalf("sequence NAKs %v, want [20 %d]", got, hole.psn)
			}
			if got, want := wb.after(isPlainACK), []uint32{hole.psn - 1, 63}; !slices.Equal(got, want) {
				t.Fatalf("ACKs %v, want %v", got, want)
			}
			if ack := wb.last(isPlainACK); ack.aeth.MSN != 4 {
				t.Fatalf("last ACK MSN %d, want 4", ack.aeth.MSN)
			}
			if ca := counters(a.dev); ca.TransportTimeouts != 0 {
				t.Fatalf("counters %+v: a timer fired", ca)
			}
		})
	}
}

// TestHoleNAKNotToGoBackN: a requester that goes back N (NoProbe, as
// rxe) resends everything from the first hole, the second hole's packet
// among it; a NAK for the second hole would make it go back over it all
// again. The responder saw it resend the PSN after the warm-up's fill, so
// it does not NAK an uncovered hole: one NAK per hole, each first
// transmission of 20-47 resent once at most.
func TestHoleNAKNotToGoBackN(t *testing.T) {
	h := &holeWire{withhold: []uint32{19}}
	a, b, wa, wb := holePair(t, NoProbe, h, 19, 36)
	runWrites(t, a, b, 2)
	h.release(t, a, b, h.withhold[0], 13+27)
	checkWrites(t, a, b, 2)
	quiesce(t, a.dev, b.dev)
	resent := wa.resent(isData)
	for _, psn := range resent {
		if n := len(slices.DeleteFunc(slices.Clone(resent), func(x uint32) bool { return x != psn })); n > 1 {
			t.Fatalf("resent PSNs %v: %d sent again %d times", resent, psn, n)
		}
	}
	if got := wb.after(isSeqNAK); !slices.Equal(got, []uint32{19}) {
		t.Fatalf("sequence NAKs %v, want [19]", got)
	}
	if cb := counters(b.dev); cb.OOOHoleNAKs != 0 {
		t.Fatalf("responder counters %+v: a hole NAK to a go-back-N requester", cb)
	}
}
