package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// batchLink records the opcodes of each Send call: one call is one kick.
type batchLink struct {
	*memlink.Link
	mu      sync.Mutex
	batches [][]wire.Opcode
}

func (l *batchLink) Send(frames [][]byte) error {
	var ops []wire.Opcode
	for _, f := range frames {
		var p wire.Packet
		if err := wire.Decode(f, &p); err == nil {
			ops = append(ops, p.BTH.Opcode)
		}
	}
	if len(ops) > 0 {
		l.mu.Lock()
		l.batches = append(l.batches, ops)
		l.mu.Unlock()
	}
	return l.Link.Send(frames)
}

func (l *batchLink) take() [][]wire.Opcode {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.batches
	l.batches = nil
	return b
}

// holdPair connects A to a B whose link records its batches and whose
// device holds lone ACKs for hold.
func holdPair(t *testing.T, hold time.Duration) (a, b *node, lb *batchLink) {
	t.Helper()
	la, raw := memlink.NewPair(4096 + 200)
	lb = &batchLink{Link: raw}
	a = newNode(t, newDevice(t, la, macA, ipA, 4096), 1<<16)
	b = newNode(t, newDeviceWith(t, lb, macB, ipB, DeviceConfig{ActiveMTU: 4096, AckHold: hold}), 1<<16)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7, timeout: 20}) // 4.3 s: longer than the holds take here
	return a, b, lb
}

// A reply posted while the responder holds its ACK leaves in the same
// batch: a ping-pong round trip costs one kick each way.
func TestAckWaitsForReply(t *testing.T) {
	a, b, lb := holdPair(t, time.Minute)
	fill(a.mr.Bytes()[:64], 1)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, b.dev, "A's WRITE at B", func(c Counters) bool { return c.RcvdPkts == 1 })
	equalBytes(t, "B's region", b.mr.Bytes()[:64], a.mr.Bytes()[:64])
	if got := lb.take(); len(got) != 0 {
		t.Fatalf("B sent %v before the reply was posted; the ACK should wait", got)
	}
	postSend(t, b, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(b.mr, 0, 64),
		RemoteAddr: a.mr.Addr() + 4096, RKey: a.mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 1 {
		t.Fatalf("A's WRITE: %+v", wc)
	}
	if wc := poll(t, b.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 2 {
		t.Fatalf("B's WRITE: %+v", wc)
	}
	got := lb.take()
	if len(got) == 0 || len(got[0]) != 2 || got[0][0] != wire.RCAck || got[0][1] != wire.RCWriteOnly {
		t.Fatalf("B's batches %v, want the ACK and the reply WRITE in the first", got)
	}
}

// Without a reply the ACK leaves when the hold ends, and the next ACKs
// are not held; a negative hold sends them at the end of the receive batch.
// Nothing but ACKs is ever held.
func TestAckHoldEnds(t *testing.T) {
	for _, hold := range []time.Duration{300 * time.Millisecond, -1} {
		a, b, lb := holdPair(t, hold)
		start := time.Now()
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("hold %v: %+v", hold, wc)
		}
		if hold > 0 && time.Since(start) < hold {
			t.Errorf("hold %v: the ACK came after %v", hold, time.Since(start))
		}
		start = time.Now()
		postSend(t, a, SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("hold %v: %+v", hold, wc)
		}
		if hold > 0 && time.Since(start) >= hold {
			t.Errorf("hold %v: after a hold without reply the next ACK still waited %v", hold, time.Since(start))
		}
		// A READ's response is data, never held.
		postSend(t, a, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 64),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("hold %v: READ %+v", hold, wc)
		}
		for _, batch := range lb.take() {
			if len(batch) != 1 {
				t.Errorf("hold %v: batch %v, want one frame each", hold, batch)
			}
		}
	}
}

// TestCloseSendsHeldAck: a device closed while it holds an ACK for a reply
// sends it first. rc_pingpong's last SEND is answered by nothing: its
// receiver closes the device as soon as the SEND completes, and a peer with
// retry_cnt 7 would retry that SEND for ever without the ACK.
func TestCloseSendsHeldAck(t *testing.T) {
	a, b, lb := holdPair(t, time.Hour)
	postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, 0, 64)})
	postSend(t, a, SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 64)})
	poll(t, b.rcq, 1, 5*time.Second)
	if pending(a.scq) != 0 {
		t.Fatal("the SEND completed while its ACK was held")
	}
	must(t, b.dev.Close())
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 2 {
		t.Fatalf("completion %+v", wc)
	}
	var acks int
	for _, batch := range lb.take() {
		for _, op := range batch {
			if op == wire.RCAck {
				acks++
			}
		}
	}
	if acks != 1 {
		t.Fatalf("%d ACKs sent, want the held one", acks)
	}
}
