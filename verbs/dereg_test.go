package verbs

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// dropWhile makes l drop the frames for which match holds while the returned
// flag is set (it starts set).
func dropWhile(l *memlink.Link, match func(p *wire.Packet) bool) *atomic.Bool {
	on := new(atomic.Bool)
	on.Store(true)
	l.SetDropFilter(func(f []byte) bool {
		if !on.Load() {
			return false
		}
		var p wire.Packet
		return wire.Decode(f, &p) == nil && match(&p)
	})
	return on
}

// dropOpcode drops the frames with opcode op while the flag is set.
func dropOpcode(l *memlink.Link, op wire.Opcode) *atomic.Bool {
	return dropWhile(l, func(p *wire.Packet) bool { return p.BTH.Opcode == op })
}

func wantBusy(t *testing.T, what string, mr *MR) {
	t.Helper()
	if err := mr.Dereg(); !isErr(err, ErrBusy) {
		t.Fatalf("Dereg of %s: %v, want EBUSY", what, err)
	}
}

// TestDeregInFlight: a region the engine holds memory of for a message in
// progress cannot be deregistered (EBUSY) and stays fully usable; once the
// message is done, Dereg succeeds.
func TestDeregInFlight(t *testing.T) {
	const n = 8 * 1024 // 8 packets of 1024 bytes
	t.Run("WRITE source", func(t *testing.T) {
		a, b, la, _ := pair(t, connOpts{}, 1<<16)
		fill(a.mr.Bytes()[:n], 1)
		hold := dropOpcode(la, wire.RCWriteLast)
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		waitCounter(t, b.dev, "FIRST and MIDDLEs", func(c Counters) bool { return c.RcvdPkts >= 7 })
		wantBusy(t, "the source of an unacknowledged WRITE", a.mr)
		hold.Store(false)
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("WRITE after the refused Dereg: %+v", wc)
		}
		equalBytes(t, "WRITE", b.mr.Bytes()[:n], a.mr.Bytes()[:n])
		must(t, a.mr.Dereg())
	})
	t.Run("WRITE source not yet started", func(t *testing.T) {
		a, b, _, _ := pair(t, connOpts{}, 1<<16)
		must(t, a.qp.Modify(QPAttr{State: StateSQD}, AttrState))
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		wantBusy(t, "the source of a posted WRITE", a.mr)
		must(t, a.qp.Modify(QPAttr{State: StateRTS}, AttrState))
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("WRITE: %+v", wc)
		}
		must(t, a.mr.Dereg())
	})
	t.Run("READ destination", func(t *testing.T) {
		a, b, _, lb := pair(t, connOpts{}, 1<<16)
		fill(b.mr.Bytes()[:n], 2)
		hold := dropOpcode(lb, wire.RCReadResponseLast)
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		waitCounter(t, a.dev, "FIRST and MIDDLE responses", func(c Counters) bool { return c.RcvdPkts >= 7 })
		wantBusy(t, "the destination of a READ in progress", a.mr)
		hold.Store(false)
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
			t.Fatalf("READ after the refused Dereg: %+v", wc)
		}
		equalBytes(t, "READ", a.mr.Bytes()[:n], b.mr.Bytes()[:n])
		must(t, a.mr.Dereg())
	})
	t.Run("SEND receive buffer", func(t *testing.T) {
		a, b, la, _ := pair(t, connOpts{}, 1<<16)
		fill(a.mr.Bytes()[:n], 3)
		postRecv(t, b, RecvWR{ID: 7, SGList: sge(b.mr, 0, n)})
		hold := dropOpcode(la, wire.RCSendLast)
		postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n)})
		waitCounter(t, b.dev, "FIRST and MIDDLEs", func(c Counters) bool { return c.RcvdPkts >= 7 })
		wantBusy(t, "the buffer of a receive in progress", b.mr)
		hold.Store(false)
		if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.ByteLen != n {
			t.Fatalf("receive: %+v", wc)
		}
		equalBytes(t, "SEND", b.mr.Bytes()[:n], a.mr.Bytes()[:n])
		must(t, b.mr.Dereg())
	})
	t.Run("responder moved to ERR releases", func(t *testing.T) {
		a, b, la, _ := pair(t, connOpts{retry: 1}, 1<<16)
		fill(a.mr.Bytes()[:n], 4)
		hold := dropOpcode(la, wire.RCWriteLast)
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		waitCounter(t, b.dev, "FIRST and MIDDLEs", func(c Counters) bool { return c.RcvdPkts >= 7 })
		must(t, b.qp.Modify(QPAttr{State: StateErr}, AttrState))
		must(t, b.mr.Dereg())
		after := bytes.Clone(b.mr.Bytes())
		hold.Store(false) // the LAST now arrives, at a QP in ERR
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status == WCSuccess {
			t.Fatalf("WRITE completed at a responder in ERR: %+v", wc)
		}
		if !bytes.Equal(after, b.mr.Bytes()) {
			t.Fatal("the region changed after Dereg returned")
		}
	})
}

// TestDeregRevokesInboundWrite: a peer that sends a WRITE's FIRST and never
// its LAST (a dead or hostile requester, a lost UC message) does not pin
// the target region: Dereg succeeds at once, and no later packet of that
// WRITE touches the memory. RC: the rest fails with a remote access error
// and the QP goes to the error state, as for any invalid key; UC: the
// message is dropped and the QP goes on.
func TestDeregRevokesInboundWrite(t *testing.T) {
	const n = 8 * 1024
	t.Run("RC", func(t *testing.T) {
		a, b, la, _ := pair(t, connOpts{}, 1<<16)
		fill(a.mr.Bytes()[:n], 1)
		hold := dropOpcode(la, wire.RCWriteLast)
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		waitCounter(t, b.dev, "FIRST and MIDDLEs", func(c Counters) bool { return c.RcvdPkts >= 7 })
		must(t, b.mr.Dereg())
		after := bytes.Clone(b.mr.Bytes())
		hold.Store(false)
		if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
			t.Fatalf("WRITE into a region deregistered under it: %+v, want REM_ACCESS_ERR", wc)
		}
		if !bytes.Equal(after, b.mr.Bytes()) {
			t.Fatal("the region changed after Dereg returned")
		}
		if st := b.qp.State(); st != StateErr {
			t.Fatalf("responder QP in %v, want ERR", st)
		}
	})
	t.Run("UC", func(t *testing.T) {
		a, b, la := ucPair(t)
		fill(a.mr.Bytes()[:n], 2)
		hold := dropOpcode(la, wire.UCWriteLast)
		postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		waitCounter(t, b.dev, "FIRST and MIDDLEs", func(c Counters) bool { return c.RcvdPkts >= 7 })
		must(t, b.mr.Dereg())
		after := bytes.Clone(b.mr.Bytes())
		hold.Store(false)
		// The next WRITE, into a new region, arrives whole.
		mr2, err := b.pd.AllocMR(n, AccessLocalWrite|AccessRemoteWrite)
		must(t, err)
		base := counters(b.dev).RcvdPkts
		postSend(t, a, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: mr2.Addr(), RKey: mr2.RKey()})
		poll(t, a.scq, 2, 5*time.Second)
		// Counters are read on the engine goroutine: once they show the
		// WRITE's 8 packets handled, its bytes are in place.
		waitCounter(t, b.dev, "the second WRITE", func(c Counters) bool { return c.RcvdPkts >= base+n/1024 })
		equalBytes(t, "the second WRITE", mr2.Bytes(), a.mr.Bytes()[:n])
		if !bytes.Equal(after, b.mr.Bytes()) {
			t.Fatal("the region changed after Dereg returned")
		}
		if st := b.qp.State(); st != StateRTS {
			t.Fatalf("UC responder QP in %v, want RTS", st)
		}
	})
}

// TestNoWriteAfterDereg races Dereg against a stream of multi-packet WRITEs
// whose LAST packet is lost every other time, so the responder spends most
// of its time in the middle of a WRITE: once Dereg has returned nil the
// region never changes.
func TestNoWriteAfterDereg(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			a, b, la, _ := pair(t, connOpts{timeout: 8}, 1<<17)
			la.SetImpairment(memlink.Impairment{Drop: 0.02, Reorder: 0.02, Seed: seed})
			var lasts atomic.Int32
			dropWhile(la, func(p *wire.Packet) bool { return p.BTH.Opcode == wire.RCWriteLast && lasts.Add(1)%2 == 1 })
			target, err := b.pd.AllocMR(1<<17, AccessLocalWrite|AccessRemoteWrite)
			must(t, err)
			const size = 16 * 1024
			done := make(chan string, 1)
			var completed atomic.Int32
			go func() {
				wcs := make([]WorkCompletion, 1)
				for i := range 10000 {
					fill(a.mr.Bytes()[:size], i)
					wr := SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, size),
						RemoteAddr: target.Addr() + uint64(i%4*size), RKey: target.RKey()}
					if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
						done <- fmt.Sprintf("PostSend: %v", err)
						return
					}
					deadline := time.Now().Add(10 * time.Second)
					for a.scq.Poll(wcs) == 0 {
						if time.Now().After(deadline) {
							done <- "no completion"
							return
						}
						time.Sleep(20 * time.Microsecond)
					}
					if wcs[0].Status != WCSuccess {
						done <- wcs[0].Status.String()
						return
					}
					completed.Add(1)
				}
				done <- "all WRITEs succeeded"
			}()
			for completed.Load() < 5 {
				time.Sleep(100 * time.Microsecond)
			}
			busy := 0
			for {
				err := target.Dereg()
				if err == nil {
					break
				}
				if !isErr(err, ErrBusy) {
					t.Fatalf("Dereg: %v", err)
				}
				busy++
				time.Sleep(time.Duration(busy%7) * 10 * time.Microsecond)
			}
			after := bytes.Clone(target.Bytes())
			var end string
			select {
			case end = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the writer did not stop")
			}
			if end != WCRemAccessErr.String() {
				t.Fatalf("the writer ended with %q, want REM_ACCESS_ERR", end)
			}
			time.Sleep(20 * time.Millisecond) // let stray retransmissions arrive
			if !bytes.Equal(after, target.Bytes()) {
				t.Fatalf("the region changed after Dereg returned nil (refused %d times)", busy)
			}
			t.Logf("Dereg refused %d times with EBUSY", busy)
		})
	}
}

// TestDeregSRQRegionOfAnotherPD: a QP of one PD fed from an SRQ of another
// is filling a receive WQE of the SRQ's PD with a multi-packet SEND; the
// region that WQE names is in use (EBUSY) though no QP of its PD is.
func TestDeregSRQRegionOfAnotherPD(t *testing.T) {
	a, b, la, _ := pair(t, connOpts{}, 1<<16)
	pd2, err := b.dev.AllocPD()
	must(t, err)
	srq, err := pd2.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	must(t, err)
	mr2, err := pd2.AllocMR(1<<16, AccessLocalWrite)
	must(t, err)
	qp, err := b.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	must(t, err)
	a.qp, err = a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(t, err)
	b.qp = qp
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{retry: 7, rnr: 7})
	if _, err := srq.PostRecv([]RecvWR{{ID: 7, SGList: sge(mr2, 0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	hold := dropOpcode(la, wire.RCSendLast)
	fill(a.mr.Bytes()[:8192], 3)
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, 8192)})
	waitCounter(t, b.dev, "FIRST and MIDDLEs", func(c Counters) bool { return c.RcvdPkts >= 7 })
	wantBusy(t, "the SRQ region a SEND is filling", mr2)
	hold.Store(false)
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.WRID != 7 {
		t.Fatalf("receive after the refused Dereg: %+v", wc)
	}
	equalBytes(t, "SEND", mr2.Bytes()[:8192], a.mr.Bytes()[:8192])
	must(t, mr2.Dereg())
}
