package engine

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

const QkeyOwn = ibv.QKeyControlled

// udHeader fills e.tx for a datagram of qp: addressed by the work request's
// address handle, with a DETH carrying the Q_Key and the source QPN.
func (e *Engine) udHeader(qp *queue.QP, wr *queue.WR, op wire.Opcode, psn uint32) *wire.Packet {
	p := &e.tx
	t := &qp.Transport
	ah := wr.AH
	dip := queue.GIDAddr(ah.DGID)
	p.Eth = wire.Ethernet{Dst: [6]byte(ah.DMAC), Src: t.SMAC}
	p.IP = wire.IP{V6: !dip.Is4(), Src: queue.GIDAddr(e.dev.Cfg.GIDs[ah.SGIDIndex]), Dst: dip, TOS: ah.TrafficClass, TTL: 64, DF: dip.Is4()}
	p.UDP = wire.UDP{SrcPort: t.SrcPort, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: wr.RemoteQPN, PSN: psn & 0xffffff}
	qkey := wr.RemoteQKey
	switch {
	case qp.GSI:
		qkey = ibv.GSIQKey
	case qkey&QkeyOwn != 0:
		qkey = t.Attr.QKey
	}
	p.DETH = wire.DETH{QKey: qkey, SrcQP: qp.Number}
	p.Payload = nil
	return p
}

// dispatchUD takes a packet for a UD QP: a datagram of the UD transport
// from anyone, with the QP's Q_Key.
func (e *Engine) dispatchUD(qp *queue.QP, p *wire.Packet) {
	if p.BTH.Opcode.Transport() != wire.TransportUD {
		e.Counters.DroppedNoQP++
		return
	}
	// The Q_Key changes only in control operations: any engine may check it.
	if p.DETH.QKey != qp.Transport.Attr.QKey {
		e.Counters.DroppedBadQKey++
		return
	}
	if owner := e.dev.EngineOf(qp); owner != e {
		e.handOff(owner)
		return
	}
	e.Counters.RcvdPkts++
	if s := qp.Transport.State; s == ibv.StateRTR || s == ibv.StateRTS || s == ibv.StateSQD {
		e.receiveDatagram(qp, p)
	}
}

// receiveDatagram delivers a datagram into the next receive WQE: the GRH
// area, then the payload; a datagram that finds no receive is dropped (UD
// has no RNR), one larger than the receive completes it with LOC_LEN_ERR.
func (e *Engine) receiveDatagram(qp *queue.QP, p *wire.Packet) {
	t := &qp.Transport
	if !e.takeRecv(qp, p.BTH.PSN) {
		e.Counters.DroppedNoRecv++
		return
	}
	var grh [wire.GRHLen]byte
	wire.PutGRH(&grh, &p.IP, int(p.UDP.Length))
	if !queue.Scatter(t.Recv.Segs, 0, grh[:], &e.pending) || !queue.ScatterPayload(t.Recv.Segs, wire.GRHLen, p, &e.pending) {
		e.completeRecvErr(qp, ibv.WCLocLenErr)
		return
	}
	t.Recv.Written = wire.GRHLen + queue.PayloadLen(p)
	flags := ibv.WCFlags(0)
	if p.BTH.Opcode == wire.UDSendOnlyImm {
		flags |= ibv.WCWithImm
	}
	e.completeRecv(qp, ibv.WCSuccess, ibv.WCRecv, flags)
}
