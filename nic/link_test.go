package nic

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/ring"
	"github.com/xdproce/xdproce/wire"
)

// busyQueue always has frames waiting and counts what it hands out.
type busyQueue struct{ taken int }

func (q *busyQueue) Receive(pkts []ring.Packet) int { q.taken += len(pkts); return len(pkts) }
func (q *busyQueue) Release([]ring.Packet) error    { return nil }
func (q *busyQueue) Refill() (int, error)           { return 0, nil }

// TestReceiveReadsQueuesFairly: with every queue busy enough to fill a
// batch on its own, successive batches start at successive queues, so each
// queue gets its share instead of queue 0 taking every batch.
func TestReceiveReadsQueuesFairly(t *testing.T) {
	qs := []*busyQueue{{}, {}, {}}
	l := &FrameLink{pkts: make([]ring.Packet, rxBatch)}
	for _, q := range qs {
		l.rx = append(l.rx, q)
	}
	const batches = 30
	for range batches {
		if n, err := l.Receive(rxBatch, func([]byte) {}); err != nil || n != rxBatch {
			t.Fatalf("Receive: %d frames, %v", n, err)
		}
	}
	for i, q := range qs {
		if want := batches / len(qs) * rxBatch; q.taken != want {
			t.Errorf("queue %d: %d frames of %d, want %d", i, q.taken, batches*rxBatch, want)
		}
	}
}

// TestFlowsStayOnTheirQueue: on a two-queue veth pair, frames go out on the
// queue SelectTX picks from their flow and arrive on the peer's queue of
// the same index, so each QP's traffic stays on one queue at both ends and
// QPs spread over the queues.
func TestFlowsStayOnTheirQueue(t *testing.T) {
	topo, ports, links := linkPair(t, 2)
	if links[0].Queues() != 2 || links[1].Queues() != 2 {
		t.Fatalf("queues %d and %d, want 2", links[0].Queues(), links[1].Queues())
	}
	const perFlow = 50
	flows := []uint16{0xc000, 0xc001, 0xd3a7, 0xe10a} // queues 0, 1, 1, 0
	want := [2]uint64{}
	for _, flow := range flows {
		frames := make([][]byte, perFlow)
		for i := range frames {
			frames[i] = roceFrame(t, topo.Hosts[0], topo.Hosts[1], ports, flow, uint32(i))
		}
		links[0].SelectTX(flow)
		if err := links[0].Transmit(t.Context(), frames); err != nil {
			t.Fatal(err)
		}
		want[flow%2] += perFlow
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := 0
	if err := links[1].Collect(ctx, func([]byte) bool { got++; return got < len(flows)*perFlow }); err != nil {
		t.Fatalf("received %d of %d: %v", got, len(flows)*perFlow, err)
	}
	for q := range 2 {
		tx := ports[0].Sockets()[q].Counters().TXPackets
		rx := ports[1].Sockets()[q].Counters().RXPackets
		if tx != want[q] || rx != want[q] {
			t.Errorf("queue %d: sent %d, received %d, want %d each", q, tx, rx, want[q])
		}
	}
}

// linkPair opens a port and a link on all its queues at each end of a veth
// pair with that many queues, closed when the test ends.
func linkPair(t *testing.T, queues int) (*netns.Topology, [2]*Port, [2]*FrameLink) {
	t.Helper()
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: queues})
	var ports [2]*Port
	var links [2]*FrameLink
	for i, h := range topo.Hosts[:2] {
		err := h.Do(func() (err error) {
			if ports[i], err = Open(t.Context(), Config{Ifname: h.Link}); err != nil {
				return err
			}
			links[i], err = NewFrameLink(ports[i])
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		t.Cleanup(func() {
			if err := errors.Join(links[i].Close(), ports[i].Close()); err != nil {
				t.Error(err)
			}
		})
	}
	return topo, ports, links
}

// roceFrame is a RoCEv2 SEND_ONLY frame from host a to host b with UDP
// source port flow.
func roceFrame(t *testing.T, a, b *netns.Host, ports [2]*Port, flow uint16, psn uint32) []byte {
	var p wire.Packet
	p.Reset()
	copy(p.Eth.Src[:], ports[0].Link().MAC)
	copy(p.Eth.Dst[:], ports[1].Link().MAC)
	p.IP.Src, p.IP.Dst = a.Addr, b.Addr
	p.UDP.SrcPort = flow
	p.BTH = wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x12, PSN: psn}
	p.Payload = []byte("spread")
	frame := make([]byte, p.FrameLen())
	n, err := wire.Encode(frame, &p)
	if err != nil {
		t.Fatal(err)
	}
	return frame[:n]
}

// TestDoorbell: a Wake makes the Wait in progress, or the next one, return
// at once, and only once: the Wait after it sleeps its time again (the
// doorbell is reset when, and only when, it rang).
func TestDoorbell(t *testing.T) {
	l, err := newFrameLink(nil, 1514)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()
	took := func(d time.Duration) time.Duration {
		start := time.Now()
		l.Wait(d)
		return time.Since(start)
	}
	if d := took(30 * time.Millisecond); d < 25*time.Millisecond {
		t.Fatalf("a Wait with no frame and no Wake returned after %v", d)
	}
	l.Wake()
	if d := took(5 * time.Second); d > time.Second {
		t.Fatalf("a Wait after Wake took %v", d)
	}
	if d := took(30 * time.Millisecond); d < 25*time.Millisecond {
		t.Fatalf("the doorbell rang twice for one Wake: the next Wait returned after %v", d)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		l.Wake()
	}()
	if d := took(5 * time.Second); d > time.Second {
		t.Fatalf("a Wake during a Wait ended it after %v", d)
	}
}

// TestRxCoalesce: after a stream's frames, a Wait sleeps its coalescing
// time with the socket's wakeup disarmed, so frames arriving meanwhile do
// not end it, and the next sleep follows what it gathered; a lone frame's
// Wait, an answering side's and the doorbell wake at once.
func TestRxCoalesce(t *testing.T) {
	topo, ports, links := linkPair(t, 1)
	tx, rx := links[0], links[1]
	if err := rx.SetRxCoalesce(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// A link's TX side has one owner (the engine); the senders take turns:
	// each waits for the previous one to finish transmitting, since the
	// frame's arrival at rx is no happens-before edge for the race detector.
	sent := make(chan struct{})
	close(sent)
	send := func(after time.Duration) {
		prev, done := sent, make(chan struct{})
		sent = done
		go func() {
			defer close(done)
			<-prev
			time.Sleep(after)
			if err := tx.Transmit(t.Context(), [][]byte{roceFrame(t, topo.Hosts[0], topo.Hosts[1], ports, 0xc000, 1)}); err != nil {
				t.Error(err)
			}
		}()
	}
	t.Cleanup(func() { <-sent })
	took := func(d time.Duration) time.Duration {
		start := time.Now()
		rx.Wait(d)
		return time.Since(start)
	}
	receive := func(what string) {
		t.Helper()
		if n, err := rx.Receive(64, func([]byte) {}); n != 1 || err != nil {
			t.Fatalf("%s: received %d frames, %v", what, n, err)
		}
	}
	// wokenBy: a frame 30 ms into a Wait of 5 s ends it.
	wokenBy := func(what string) {
		t.Helper()
		send(30 * time.Millisecond)
		if d := took(5 * time.Second); d > 2*time.Second {
			t.Fatalf("%s woke its Wait after %v", what, d)
		}
		receive(what)
	}
	// A lone frame: its Wait arms the socket and wakes when it arrives (and
	// the one-shot wakeup is spent).
	wokenBy("a lone frame")

	// A stream: the Wait sleeps its 300 ms through a frame at 30 ms.
	rx.coalesce.cur = 300 * time.Millisecond
	rx.received.Store(coalesceBatch)
	send(30 * time.Millisecond)
	if d := took(5 * time.Second); d < 250*time.Millisecond || d > 4*time.Second {
		t.Fatalf("a stream's coalescing Wait returned after %v, want its 300 ms", d)
	}
	receive("frame of the stream")
	if rx.coalesce.cur != 375*time.Millisecond {
		t.Fatalf("a sleep that gathered one frame left the next at %v, want 375ms", rx.coalesce.cur)
	}

	// One frame received since: the Wait re-arms the socket.
	wokenBy("a lone frame after the stream")

	// A side that sent as much as it received answers requests: no sleep.
	rx.received.Store(coalesceBatch)
	rx.sent.Store(coalesceBatch)
	wokenBy("a request to an answering side")

	// The doorbell ends a coalescing sleep, which then teaches nothing.
	rx.coalesce.cur = 5 * time.Second
	rx.received.Store(coalesceBatch)
	go func() {
		time.Sleep(30 * time.Millisecond)
		rx.Wake()
	}()
	if d := took(10 * time.Second); d > 2*time.Second {
		t.Fatalf("the doorbell ended a coalescing Wait after %v", d)
	}
	if rx.coalesce.cur != 5*time.Second {
		t.Fatalf("a sleep the doorbell ended moved the next to %v", rx.coalesce.cur)
	}
}
