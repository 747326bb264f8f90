package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
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
	cached   atomic.Int32 // len(ahs), for CachedAddressHandles
	freeSend []int
	// resolving holds the MADs waiting for a peer's address handle, which
	// a goroutine of its own makes: a peer that never answers ARP (a forged
	// request's source) must not hold up the MADs to everyone else.
	resolving map[netip.Addr][]outMAD
	resolved  chan resolution
	resolvers sync.WaitGroup
	wcs       []verbs.WorkCompletion // the send CQ's, polled into
	// dropped counts MADs not sent: no address handle, no send slot.
	dropped uint64
	ready   bool // set up: every send slot accounted for
}

type outMAD struct {
	to  netip.Addr
	mad []byte
}

// resolution is the address handle made for a peer, or why none.
type resolution struct {
	to  netip.Addr
	ah  *verbs.AddressHandle
	err error
}

// Sizes of QP1's queues: receives stay posted; a send slot is free again
// once its completion is polled.
const (
	gsiRecvs   = 128
	gsiSends   = 64
	gsiRecvLen = wire.GRHLen + cm.MADLen
	gsiOutCap  = 1024
	// At most this many peers' address handles are being made at once,
	// with at most this many MADs waiting for each.
	gsiResolving    = 256
	gsiWaitingPerAH = 16
	// At most this many peers' address handles are kept: forged CM
	// requests from many source addresses must not grow QP1 without bound.
	gsiCachedAHs = 1024
)

func newGSI(dev *verbs.Device, sgid func(netip.Addr) (int, bool)) (*gsi, error) {
	g := &gsi{dev: dev, sgid: sgid, out: make(chan outMAD, gsiOutCap), kick: make(chan struct{}, 1),
		ahs: map[netip.Addr]*verbs.AddressHandle{}, resolving: map[netip.Addr][]outMAD{}, resolved: make(chan resolution, 64), wcs: make([]verbs.WorkCompletion, gsiSends)}
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
			g.transmit(ctx, m)
		case r := <-g.resolved:
			g.resolvedAH(r)
		case <-g.kick:
		case <-timer.C:
			g.agent.Tick()
		}
	}
}

// reclaim frees the send slots whose completions came.
func (g *gsi) reclaim() {
	for _, wc := range g.wcs[:g.scq.Poll(g.wcs)] {
		g.freeSend = append(g.freeSend, int(wc.WRID))
	}
}

// resolvedAH sends the MADs that waited for r's address handle (or drops
// them: the CM sends again what still matters).
func (g *gsi) resolvedAH(r resolution) {
	waiting := g.resolving[r.to]
	delete(g.resolving, r.to)
	if r.err != nil {
		g.dropped += uint64(len(waiting))
		return
	}
	g.ahs[r.to] = r.ah
	g.cached.Store(int32(len(g.ahs)))
	for _, m := range waiting {
		g.post(r.ah, m)
	}
}

// transmit posts one MAD, or has the peer's address handle made first.
func (g *gsi) transmit(ctx context.Context, m outMAD) {
	if ah := g.ahs[m.to]; ah != nil {
		g.post(ah, m)
		return
	}
	if waiting, ok := g.resolving[m.to]; ok {
		if len(waiting) < gsiWaitingPerAH {
			g.resolving[m.to] = append(waiting, m)
		} else {
			g.dropped++
		}
		return
	}
	if len(g.ahs)+len(g.resolving) >= gsiCachedAHs && !g.forgetAHs() {
		g.dropped++ // the CM sends again what still matters
		return
	}
	idx, ok := g.sgid(m.to)
	if !ok || len(g.resolving) >= gsiResolving {
		g.dropped++
		return
	}
	g.resolving[m.to] = []outMAD{m}
	g.resolvers.Add(1)
	go func() {
		defer g.resolvers.Done()
		ah, err := g.pd.CreateAH(verbs.AH{DGID: m.to, SGIDIndex: idx, HopLimit: 64})
		if err == nil && ctx.Err() != nil {
			ah.Destroy()
			return
		}
		select {
		case g.resolved <- resolution{m.to, ah, err}:
		case <-ctx.Done():
			if ah != nil {
				ah.Destroy()
			}
		}
	}()
}

// forgetAHs destroys the cached address handles once no send that may
// use one is in flight (a UD send through a destroyed handle would fail
// and stop QP1's send queue): whether it could.
func (g *gsi) forgetAHs() bool {
	if g.reclaim(); len(g.freeSend) < gsiSends {
		return false
	}
	for to, ah := range g.ahs {
		ah.Destroy()
		delete(g.ahs, to)
	}
	g.cached.Store(0)
	return true
}

// post sends one MAD through ah.
func (g *gsi) post(ah *verbs.AddressHandle, m outMAD) {
	g.reclaim()
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
// once the sends posted last have left (100 ms at most) and no address
// handle is being made.
func (g *gsi) close() {
	g.resolvers.Wait()
	for len(g.resolved) > 0 {
		if r := <-g.resolved; r.ah != nil {
			r.ah.Destroy()
		}
	}
	for end := time.Now().Add(100 * time.Millisecond); g.ready && len(g.freeSend) < gsiSends && time.Now().Before(end); {
		if g.reclaim(); len(g.freeSend) < gsiSends {
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
