package verbs

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// reorderLink is the receiving end of a path that reorders: a frame depth
// picks (its first copy only) is held back until depth more frames have
// arrived behind it, then delivered; the rest arrive in order.
type reorderLink struct {
	link  *memlink.Link
	depth func(p *wire.Packet) int
	held  []heldFrame
	ready [][]byte
	once  map[uint32]bool // PSNs held back once already
}

type heldFrame struct {
	frame []byte
	left  int
}

func (r *reorderLink) arrive(f []byte) {
	var p wire.Packet
	if wire.Decode(f, &p) == nil && !r.once[p.BTH.PSN] {
		if d := r.depth(&p); d > 0 {
			r.once[p.BTH.PSN] = true
			r.held = append(r.held, heldFrame{bytes.Clone(f), d})
			return
		}
	}
	r.ready = append(r.ready, bytes.Clone(f))
	kept := r.held[:0]
	for _, h := range r.held {
		if h.left--; h.left == 0 {
			r.ready = append(r.ready, h.frame)
			continue
		}
		kept = append(kept, h)
	}
	r.held = kept
}

func (r *reorderLink) Receive(max int, fn func([]byte)) (int, error) {
	if len(r.ready) < max {
		if _, err := r.link.Receive(max, r.arrive); err != nil {
			return 0, err
		}
	}
	n := min(max, len(r.ready))
	for _, f := range r.ready[:n] {
		fn(f)
	}
	r.ready = r.ready[n:]
	return n, nil
}

func (r *reorderLink) Wait(d time.Duration) {
	if len(r.ready) == 0 {
		r.link.Wait(d)
	}
}

func (r *reorderLink) Send(frames [][]byte) error { return r.link.Send(frames) }
func (r *reorderLink) Wake()                      { r.link.Wake() }
func (r *reorderLink) MaxFrame() int              { return r.link.MaxFrame() }

// TestReorderDeepIsNotLoss: 64 KiB READs (16 responses each) over a path
// that delivers one response of each of the first six READs 5 to 8
// responses late, and loses none. The first, overtaken by five, passes the
// initial threshold (3): the requester asks for that PSN alone, and the
// original then its replay arrive. The second copy proves the re-ask
// spurious, and the QP's reorder window widens: the later, deeper late
// responses are asked for no more. A response lost after that is still
// asked for once the widened window of responses has passed it, before
// any timer (the fake clock never moves). Exactly these READ requests,
// every byte right.
func TestReorderDeepIsNotLoss(t *testing.T) {
	const size, reads, npk = 64 << 10, 7, 16
	depths := []int{5, 8, 6, 7, 8, 5} // READ i's response at offset 4
	const lostRead, lostOff = 6, 2
	c := faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	ro := &reorderLink{link: la, once: map[uint32]bool{}, depth: func(p *wire.Packet) int {
		if !isReadResp(p.BTH.Opcode) {
			return 0
		}
		if i, off := int(p.BTH.PSN/npk), p.BTH.PSN%npk; i < len(depths) && off == 4 {
			return depths[i]
		}
		return 0
	}}
	a := newNode(t, newDeviceWith(t, ro, macA, ipA, DeviceConfig{ActiveMTU: 4096, Clock: c}), 1<<20)
	b := newNode(t, newDeviceWith(t, lb, macB, ipB, DeviceConfig{ActiveMTU: 4096, Clock: c}), 1<<20)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU4096, timeout: 14, retry: 7, rnr: 7})
	wa := logWire(la, nil)
	logWire(lb, firstOf(isReadResp, lostRead*npk+lostOff))
	for i := range reads {
		// Each READ its own memory: a spurious re-ask's replay may still
		// be reading the previous one's.
		off := i * size
		fill(b.mr.Bytes()[off:off+size], i+1)
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, off, size),
			RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("READ %d: completion %+v", i, wc)
		}
		equalBytes(t, "READ", a.mr.Bytes()[off:off+size], b.mr.Bytes()[off:off+size])
		// The spurious re-ask's replay arrives after the READ completed.
		waitCounter(t, b.dev, "the READ's responses", func(cb Counters) bool { return cb.SentPkts >= uint64((i+1)*npk) })
	}
	quiesce(t, a.dev, b.dev)
	type req struct{ psn, off, n uint32 }
	var got []req
	for _, r := range wa.sent(wire.RCReadRequest) {
		got = append(got, req{r.psn, uint32(r.reth.VA - b.mr.Addr()), r.reth.Len})
	}
	var want []req
	for i := range uint32(reads) {
		base := i * size
		want = append(want, req{i * npk, base, size})
		switch i {
		case 0:
			want = append(want, req{4, 4 * 4096, 4096}) // the one spurious re-ask
		case lostRead:
			want = append(want, req{i*npk + lostOff, base + lostOff*4096, 4096})
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("READ requests (PSN, offset, length)\n got %v\nwant %v", got, want)
	}
	ca, cb := counters(a.dev), counters(b.dev)
	if ca.SpuriousRetry != 1 || ca.LostResponseRetry != 2 || ca.TransportTimeouts != 0 || cb.RetransmittedPkts != 2 {
		t.Fatalf("counters A %+v B %+v: want one spurious re-ask, two in all, two responses resent, no timer", ca, cb)
	}
}
