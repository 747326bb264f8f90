package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cmagent"
	"github.com/xdproce/xdproce/verbs"
	"github.com/xdproce/xdproce/wire"
)

// gsi is the device's QP1 carrying the agent's MADs: receive buffers always
// posted, sends through an address handle per peer.
type gsi struct {
	dev      *verbs.Device
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	mr       *verbs.MR
	agent    *cmagent.Agent
	sgid     func(peer netip.Addr) (int, bool)

	out  chan outMAD   // to the sender goroutine
	kick chan struct{} // the agent's timers may have moved
	// Owned by the sender goroutine:
	ahs      map[netip.Addr]*verbs.AddressHandle
	freeSend []int
	// dropped counts MADs not sent: no address handle, no send slot.
	dropped uint64
	ready   bool // set up: every send slot accounted for
}

type outMAD struct {
	to  netip.Addr
	mad []byte
}

// Sizes of QP1's queues: receives stay posted; a send slot is free again
// once its completion is polled.
const (
	gsiRecvs   = 128
	gsiSends   = 64
	gsiRecvLen = wire.GRHLen + cm.MADLen
	gsiOutCap  = 1024
)

func newGSI(dev *verbs.Device, sgid func(netip.Addr) (int, bool)) (*gsi, error) {
	g := &gsi{dev: dev, sgid: sgid, out: make(chan outMAD, gsiOutCap), kick: make(chan struct{}, 1),
		ahs: map[netip.Addr]*verbs.AddressHandle{}}
	var err error
	if g.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("rdmacm: QP1's PD: %w", err)
	}
	fail := func(what string, err error) (*gsi, error) {
		g.close()
		return nil, fmt.Errorf("rdmacm: QP1's %s: %w", what, err)
	}
	if g.scq, err = dev.CreateCQ(gsiSends); err != nil {
		return fail("send CQ", err)
	}
	if g.rcq, err = dev.CreateCQ(gsiRecvs); err != nil {
		return fail("receive CQ", err)
	}
	if g.mr, err = g.pd.AllocMR((gsiRecvs+gsiSends)*gsiRecvLen, verbs.AccessLocalWrite); err != nil {
		return fail("buffers", err)
	}
	g.qp, err = g.pd.CreateGSIQP(verbs.QPInitAttr{SendCQ: g.scq, RecvCQ: g.rcq,
		Cap: verbs.QPCap{MaxSendWR: gsiSends, MaxRecvWR: gsiRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail("QP", err)
	}
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, Port: 1, QKey: verbs.GSIQKey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState | verbs.AttrSQPSN},
	}
	for _, s := range steps {
		if err := g.qp.Modify(s.attr, s.mask); err != nil {
			return fail("bring-up", err)
		}
	}
	for i := range gsiRecvs {
		if err := g.postRecv(i); err != nil {
			return fail("receives", err)
		}
	}
	for i := range gsiSends {
		g.freeSend = append(g.freeSend, gsiRecvs+i)
	}
	g.ready = true
	return g, nil
}

func (g *gsi) slot(i int) verbs.SGE {
	return verbs.SGE{Addr: g.mr.Addr() + uint64(i*gsiRecvLen), Length: gsiRecvLen, LKey: g.mr.LKey()}
}

func (g *gsi) buf(i int) []byte { return g.mr.Bytes()[i*gsiRecvLen : (i+1)*gsiRecvLen] }

func (g *gsi) postRecv(i int) error {
	_, err := g.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGList: []verbs.SGE{g.slot(i)}}})
	return err
}

// SendMAD implements cmagent.Sender: queued for the sender goroutine (an
// address handle may take an ARP round to make), dropped when the queue is
// full, as a NIC drops what its ring cannot hold; the CM retransmits.
func (g *gsi) SendMAD(to netip.Addr, mad []byte) {
	select {
	case g.out <- outMAD{to, mad}:
	default:
	}
}

// wake tells the sender goroutine to look at the agent's timers again.
func (g *gsi) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// drain waits, at most d, until the sender goroutine has taken every
// queued MAD.
func (g *gsi) drain(d time.Duration) {
	for end := time.Now().Add(d); len(g.out) > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
}

// receive runs until ctx ends: every MAD that arrives goes to the agent.
func (g *gsi) receive(ctx context.Context) {
	wcs := make([]verbs.WorkCompletion, 32)
	for ctx.Err() == nil {
		n := g.rcq.Poll(wcs)
		if n == 0 {
			g.rcq.ReqNotify(false)
			if n = g.rcq.Poll(wcs); n == 0 {
				if g.rcq.Wait(ctx) != nil {
					return
				}
				continue
			}
		}
		for _, wc := range wcs[:n] {
			i := int(wc.WRID)
			if wc.Status != verbs.WCSuccess {
				if wc.Status == verbs.WCWRFlushErr {
					return
				}
			} else if wc.ByteLen == gsiRecvLen {
				if ah, err := verbs.AHFromGRH(g.buf(i), 0); err == nil {
					g.agent.Receive(ah.DGID, g.buf(i)[wire.GRHLen:])
				}
			}
			if g.postRecv(i) != nil {
				return
			}
		}
		g.wake()
	}
}

// send runs until ctx ends: it transmits queued MADs and runs the agent's
// timers.
func (g *gsi) send(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	wcs := make([]verbs.WorkCompletion, gsiSends)
	for {
		next, ok := g.agent.NextDeadline()
		wait := time.Hour
		if ok {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case m := <-g.out:
			for _, wc := range wcs[:g.scq.Poll(wcs)] {
				g.freeSend = append(g.freeSend, int(wc.WRID))
			}
			g.transmit(ctx, m)
		case <-g.kick:
		case <-timer.C:
			g.agent.Tick()
		}
	}
}

// transmit posts one MAD, making the peer's address handle first.
func (g *gsi) transmit(ctx context.Context, m outMAD) {
	ah := g.ahs[m.to]
	if ah == nil {
		idx, ok := g.sgid(m.to)
		if !ok {
			g.dropped++
			return
		}
		var err error
		ah, err = g.pd.CreateAH(verbs.AH{DGID: m.to, SGIDIndex: idx, HopLimit: 64})
		if err != nil || ctx.Err() != nil {
			g.dropped++
			return
		}
		g.ahs[m.to] = ah
	}
	if len(g.freeSend) == 0 {
		g.dropped++
		return
	}
	i := g.freeSend[len(g.freeSend)-1]
	g.freeSend = g.freeSend[:len(g.freeSend)-1]
	copy(g.buf(i), m.mad)
	sge := g.slot(i)
	sge.Length = cm.MADLen
	wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{sge},
		AH: ah, RemoteQPN: cm.QP1, RemoteQKey: cm.GSIQKey}
	if _, err := g.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		g.freeSend = append(g.freeSend, i)
		g.dropped++
	}
}

// close destroys QP1 and its resources (after both goroutines ended),
// once the sends posted last have left (100 ms at most).
func (g *gsi) close() {
	wcs := make([]verbs.WorkCompletion, gsiSends)
	for end := time.Now().Add(100 * time.Millisecond); g.ready && len(g.freeSend) < gsiSends && time.Now().Before(end); {
		n := g.scq.Poll(wcs)
		for _, wc := range wcs[:n] {
			g.freeSend = append(g.freeSend, int(wc.WRID))
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if g.qp != nil {
		g.qp.Destroy()
	}
	for _, ah := range g.ahs {
		ah.Destroy()
	}
	if g.mr != nil {
		g.mr.Dereg()
	}
	g.pd.Dealloc()
}
