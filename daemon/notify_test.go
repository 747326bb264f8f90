package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// The daemon never blocks on, nor shares an open file description with, a
// client: these tests are a hostile client, speaking the protocol itself,
// that does to the file descriptors the daemon gave it whatever a process
// can do to its own.

// rawClient is a client that speaks the protocol itself.
type rawClient struct {
	t      *testing.T
	c      *ipc.Conn
	bell   int // the doorbell fd the daemon gave
	events int // the asynchronous events' fd
}

func dialRaw(t *testing.T, tb *testbed) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := ipc.Dial(ctx, tb.name)
	if err != nil {
		t.Fatal(err)
	}
	_, _, fds, err := c.Hello()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	r := &rawClient{t: t, c: c, bell: fds[1], events: fds[2]}
	unix.Close(fds[0])
	t.Cleanup(func() {
		c.Close()
		unix.Close(r.bell)
		unix.Close(r.events)
	})
	return r
}

// call runs one request that must succeed.
func (r *rawClient) call(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int) {
	r.t.Helper()
	d, fds, err := r.c.Call(op, body)
	if err != nil {
		r.t.Fatalf("%v: %v", op, err)
	}
	return d, fds
}

// rawQP is a QP of a raw client: its send ring and its CQ's ring and
// notification fd.
type rawQP struct {
	sq, cq *uverbs.Ring
	notify int
}

// createQP makes a PD, a CQ and an RC QP (left in RESET) on them.
func (r *rawClient) createQP() *rawQP {
	r.t.Helper()
	d, _ := r.call(uverbs.OpAllocPD, nil)
	pd := d.U32()
	d, fds := r.call(uverbs.OpCreateCQ, func(e *uverbs.Encoder) { e.U32(4) })
	cqh, slots := d.U32(), d.U32()
	if len(fds) != 2 {
		r.t.Fatalf("CREATE_CQ brought %d fds", len(fds))
	}
	q := &rawQP{notify: fds[1]}
	r.t.Cleanup(func() { unix.Close(q.notify) })
	m, cq, err := ipc.MapRing(fds[0], slots, uverbs.CQESize)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { m.Unmap() })
	q.cq = cq
	d, fds = r.call(uverbs.OpCreateQP, func(e *uverbs.Encoder) {
		(&uverbs.CreateQP{PD: pd, SendCQ: cqh, RecvCQ: cqh, Type: uint8(verbs.QPTypeRC),
			Cap: uverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}).Put(e)
	})
	var rep uverbs.QPCreated
	rep.Get(d)
	if len(fds) != 2 {
		r.t.Fatalf("CREATE_QP brought %d fds", len(fds))
	}
	unix.Close(fds[1])
	sm, sq, err := ipc.MapRing(fds[0], rep.SendSlots, int(rep.SendSlotSize))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { sm.Unmap() })
	q.sq = sq
	return q
}

// ring writes the client's doorbell, as a poster would.
func (r *rawClient) ring() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(r.bell, one[:])
}

// jam does to a notification fd what a hostile client can: fills an
// eventfd's counter to its maximum and clears O_NONBLOCK on its own open
// file description; a pipe's read end it just never reads. unjam undoes it
// (drains the fd), so that a daemon that did block is freed when the test
// ends.
func jam(t *testing.T, fd int) {
	t.Helper()
	var max [8]byte
	binary.LittleEndian.PutUint64(max[:], 0xfffffffffffffffe)
	_, _ = unix.Write(fd, max[:]) // EBADF on a pipe's read end
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unjam(fd) })
}

func unjam(fd int) {
	_ = unix.SetNonblock(fd, true)
	var buf [4096]byte
	for range 64 {
		if n, err := unix.Read(fd, buf[:]); n <= 0 || err != nil {
			return
		}
	}
}

// honestWrite has the client's end WRITE to the other and waits for its
// completion, within d.
func honestWrite(t *testing.T, x, y *end, id uint64, d time.Duration) error {
	t.Helper()
	if _, err := x.qp.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}); err != nil {
		return err
	}
	var wc [1]verbs.WorkCompletion
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if x.cq.Poll(wc[:]) == 1 {
			if wc[0].Status != verbs.WCSuccess || wc[0].WRID != id {
				return errors.New("completion " + wc[0].Status.String())
			}
			return nil
		}
		time.Sleep(100 * time.Microsecond)
	}
	return context.DeadlineExceeded
}

// listAnswers reports whether LIST answers within a second.
func listAnswers(t *testing.T, tb *testbed) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := Query(ctx, tb.name)
	if err != nil {
		t.Logf("LIST: %v", err)
	}
	return err == nil
}

// TestHostileCQNotifyStallsNoOne: a client that jams its CQ's notification
// fd, arms the CQ and makes a completion happen (a WR posted to a QP in
// RESET) stalls neither another client's traffic nor LIST, and the daemon
// still stops at once. The daemon used to write the client's eventfd, a
// file description both held: the engine blocked in that write.
func TestHostileCQNotifyStallsNoOne(t *testing.T) {
	tb := newTestbed(t)
	honest := tb.dial(t)
	x, y := newEnd(t, honest, 4096), newEnd(t, tb.b, 4096)
	connect(t, x, y, ipA, ipB, macA, macB)

	h := dialRaw(t, tb)
	q := h.createQP()
	jam(t, q.notify)
	q.cq.Aux().Store(uverbs.NotifyAny)
	uverbs.PutSendWQE(q.sq.Slot(0), &uverbs.SendWQE{WRID: 1, Opcode: uint8(verbs.WRSend)}, nil, nil)
	q.sq.SetProducer(1)
	h.ring()
	deadline := time.Now().Add(5 * time.Second)
	for q.cq.Producer() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if q.cq.Producer() == 0 {
		t.Fatal("the bad WR never completed")
	}
	time.Sleep(20 * time.Millisecond) // the engine signals after it published the CQE

	for i := range 3 {
		if err := honestWrite(t, x, y, uint64(i+1), 3*time.Second); err != nil {
			t.Fatalf("the other client's WRITE %d: %v", i, err)
		}
	}
	if !listAnswers(t, tb) {
		t.Fatal("LIST does not answer")
	}
	if !tb.shutdown(t, 3*time.Second) {
		t.Fatal("the daemon does not stop")
	}
}

// TestHostileDoorbellBlocksNoShutdown: a client that clears O_NONBLOCK on
// its doorbell fd and rings does not keep the daemon from stopping. The
// doorbell used to be one eventfd shared by every client: the daemon's
// read of it then blocked in the kernel.
func TestHostileDoorbellBlocksNoShutdown(t *testing.T) {
	tb := newTestbed(t)
	h := dialRaw(t, tb)
	if err := unix.SetNonblock(h.bell, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.SetNonblock(h.bell, true)
		h.ring() // wakes a daemon blocked reading a shared doorbell
	})
	for range 3 {
		h.ring()
		time.Sleep(10 * time.Millisecond)
	}
	if !listAnswers(t, tb) {
		t.Fatal("LIST does not answer")
	}
	if !tb.shutdown(t, 3*time.Second) {
		t.Fatal("the daemon does not stop")
	}
}

// TestHostileDoorbellStealsNoWakeup: a client that reads its doorbell fd
// gets nothing another client rang, and the other's posts are served while
// the engines sleep.
func TestHostileDoorbellStealsNoWakeup(t *testing.T) {
	tb := newTestbed(t)
	honest := tb.dial(t)
	x, y := newEnd(t, honest, 4096), newEnd(t, tb.b, 4096)
	connect(t, x, y, ipA, ipB, macA, macB)
	h := dialRaw(t, tb)

	var stolen atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var buf [8]byte
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := []unix.PollFd{{Fd: int32(h.bell), Events: unix.POLLIN}}
			if n, _ := unix.Poll(p, 5); n > 0 && p[0].Revents&unix.POLLIN != 0 {
				if n, err := unix.Read(h.bell, buf[:]); err == nil && n > 0 {
					stolen.Add(1)
				} else {
					time.Sleep(time.Millisecond) // end of file: nothing to steal
				}
			}
			if p[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
				time.Sleep(time.Millisecond) // not a readable fd: nothing to steal
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i := range 30 {
		time.Sleep(5 * time.Millisecond) // the engine goes to sleep
		if err := honestWrite(t, x, y, uint64(i+1), 3*time.Second); err != nil {
			t.Fatalf("WRITE %d: %v", i, err)
		}
	}
	if n := stolen.Load(); n > 0 {
		t.Fatalf("the hostile client read %d of the other's doorbell rings", n)
	}
}

// TestHostileEventsFDStallsNoOne: a client that jams its asynchronous
// events' fd and makes a QP_FATAL happen (a producer index out of range)
// keeps neither another client's events from it nor the daemon from
// stopping.
func TestHostileEventsFDStallsNoOne(t *testing.T) {
	tb := newTestbed(t)
	h := dialRaw(t, tb)
	jam(t, h.events)
	q := h.createQP()
	q.sq.SetProducer(q.sq.Slots() + 5)
	h.ring()
	time.Sleep(50 * time.Millisecond) // the engine finds it and the event is routed

	c1 := tb.dial(t)
	x := newEndWith(t, c1, endSpec{cqDepth: 1, size: 4096, access: verbs.AccessLocalWrite,
		attr: verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1}}})
	y := newEnd(t, tb.b, 4096)
	connect(t, x, y, ipA, ipB, macA, macB)
	for i := range 3 {
		if _, err := x.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	got := map[verbs.AsyncEventType]bool{}
	for !got[verbs.EventCQErr] || !got[verbs.EventQPFatal] {
		ev, err := c1.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("the other client's events (so far %v): %v", got, err)
		}
		got[ev.Type] = true
	}
	if !listAnswers(t, tb) {
		t.Fatal("LIST does not answer")
	}
	if !tb.shutdown(t, 3*time.Second) {
		t.Fatal("the daemon does not stop")
	}
}

// TestHostileCMChannelStallsNoOne: a client that jams its rdma_cm event
// channel's fd and listens, and gets a CONNECT_REQUEST, keeps neither
// another client from connecting through the daemon's CM nor the daemon
// from stopping.
func TestHostileCMChannelStallsNoOne(t *testing.T) {
	tb := newTestbed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := dialRaw(t, tb)
	d, fds := h.call(uverbs.OpCMCreateChannel, nil)
	ch := d.U32()
	if len(fds) != 1 {
		t.Fatalf("CM_CREATE_CHANNEL brought %d fds", len(fds))
	}
	t.Cleanup(func() { unix.Close(fds[0]) })
	jam(t, fds[0])
	d, _ = h.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(ch); e.U16(uint16(rdmacm.PortSpaceTCP)) })
	id := d.U32()
	h.call(uverbs.OpCMBind, func(e *uverbs.Encoder) {
		e.U32(id)
		(&uverbs.CMAddr{IP: ipA.As16(), Family: 4, Port: 7200}).Put(e)
	})
	h.call(uverbs.OpCMListen, func(e *uverbs.Encoder) { e.U32(id); e.U32(8) })

	svcB, err := rdmacm.Start(tb.b, rdmacm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer svcB.Close()
	// B connects to the hostile listener, which never answers: the
	// daemon's CM queues the request on the jammed channel.
	dctx, dcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		svcB.Dial(dctx, newEnd(t, tb.b, 64).qp, netip.AddrPortFrom(ipA, 7200), rdmacm.ConnParam{})
	}()
	defer func() {
		dcancel()
		wg.Wait()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for tb.srv.cm.IDs() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if tb.srv.cm.IDs() < 2 {
		t.Fatal("the request never reached the hostile listener")
	}
	time.Sleep(20 * time.Millisecond)

	// Another client connects through the daemon's CM.
	l, err := svcB.Listen(rdmacm.PortSpaceTCP, netip.AddrPortFrom(netip.IPv4Unspecified(), 7201), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	yb := newEnd(t, tb.b, 4096)
	wg.Add(1)
	go func() {
		defer wg.Done()
		req, err := l.Next(dctx)
		if err != nil {
			return
		}
		yb.qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
		req.Accept(dctx, yb.qp, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
	}()
	honest := tb.dial(t)
	x := newEnd(t, honest, 4096)
	svcA, err := rdmacm.Start(honest, rdmacm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer svcA.Close()
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	defer hcancel()
	if _, err := svcA.Dial(hctx, x.qp, netip.AddrPortFrom(ipB, 7201), rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatalf("the other client's connection: %v", err)
	}
	if !listAnswers(t, tb) {
		t.Fatal("LIST does not answer")
	}
	if !tb.shutdown(t, 3*time.Second) {
		t.Fatal("the daemon does not stop")
	}
}
