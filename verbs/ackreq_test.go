package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// ackReqTap counts the WRITEs a requester's link carries, and those that
// ask for an ACK.
type ackReqTap struct {
	mu            sync.Mutex
	writes, asked int
	lastAsked     bool // the last WRITE seen asked
}

func (o *ackReqTap) install(la *memlink.Link) {
	la.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) != nil || p.BTH.Opcode != wire.RCWriteOnly {
			return false
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		o.writes++
		if o.lastAsked = p.BTH.AckReq; o.lastAsked {
			o.asked++
		}
		return false
	})
}

func (o *ackReqTap) get() (writes, asked int, lastAsked bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.writes, o.asked, o.lastAsked
}

// TestAckReqPolicy: with AckCoalesce the requester asks for an ACK on a
// message's last packet only when nothing goes out right behind it
// (internal/queue/ackpolicy.go). A
// burst of WRITEs posted together asks once, on its last WRITE, and every
// WRITE completes without a retransmission timer (4 s here, longer than
// the test waits). A lone WRITE asks (as rxe's requester: the golden
// captures), and so does a WRITE whose next WQE waits for it to complete
// (a memory-window bind runs only once everything before it completed).
func TestAckReqPolicy(t *testing.T) {
	la, lb := memlink.NewPair(4096 + 200)
	cfg := DeviceConfig{ActiveMTU: 4096, AckCoalesce: true}
	a := newNode(t, newDeviceWith(t, la, macA, ipA, cfg), 1<<16)
	b := newNode(t, newDeviceWith(t, lb, macB, ipB, cfg), 1<<16)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{timeout: 20, retry: 7, rnr: 7})
	var tap ackReqTap
	tap.install(la)
	const burst = 16
	wrs := make([]SendWR, burst)
	for i := range wrs {
		wrs[i] = SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 64*i, 64),
			RemoteAddr: b.mr.Addr() + uint64(64*i), RKey: b.mr.RKey()}
	}
	fill(a.mr.Bytes()[:64*burst], 3)
	postSend(t, a, wrs...)
	for _, wc := range poll(t, a.scq, burst, 2*time.Second) {
		if wc.Status != WCSuccess {
			t.Fatalf("burst: %+v", wc)
		}
	}
	if w, asked, last := tap.get(); w != burst || asked != 1 || !last {
		t.Errorf("a burst of %d WRITEs: %d sent, %d asked for an ACK (last asked: %v); want %d, 1, true", burst, w, asked, last, burst)
	}

	postSend(t, a, SendWR{ID: 100, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	poll(t, a.scq, 1, 2*time.Second)
	if w, asked, last := tap.get(); w != burst+1 || asked != 2 || !last {
		t.Errorf("a lone WRITE: %d sent, %d asked, last asked %v; want it to ask", w, asked, last)
	}

	// A WRITE with a bind behind it in the same post.
	mr, err := a.pd.AllocMR(1<<12, AccessLocalWrite|AccessMWBind)
	must(t, err)
	mw, err := a.pd.AllocMW(MWType2)
	must(t, err)
	postSend(t, a,
		SendWR{ID: 200, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		SendWR{ID: 201, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{MW: mw, RKey: IncRKey(mw.RKey()), MR: mr,
			Addr: mr.Addr(), Length: 64, Access: AccessRemoteWrite}})
	for _, wc := range poll(t, a.scq, 2, 2*time.Second) {
		if wc.Status != WCSuccess {
			t.Fatalf("WRITE and bind: %+v", wc)
		}
	}
	if w, asked, last := tap.get(); w != burst+2 || asked != 3 || !last {
		t.Errorf("a WRITE before a bind: %d sent, %d asked, last asked %v; want it to ask", w, asked, last)
	}
	if c := counters(a.dev); c.RetransmittedPkts != 0 {
		t.Errorf("%d packets resent", c.RetransmittedPkts)
	}
}
