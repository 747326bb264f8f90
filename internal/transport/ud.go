package transport

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

const qkeyOwn = ibv.QKeyControlled

// udHeader fills e.tx for a datagram of qp: addressed by the work request's
// address handle, with a DETH carrying the Q_Key and the source QPN.
func (e *engine) udHeader(qp *QP, wr *WR, op wire.Opcode, psn uint32) *wire.Packet {
	p := &e.tx
	t := &qp.t
	ah := wr.AH
	dip := gidAddr(ah.DGID)
	p.Eth = wire.Ethernet{Dst: [6]byte(ah.DMAC), Src: t.smac}
	p.IP = wire.IP{V6: !dip.Is4(), Src: gidAddr(e.dev.cfg.GIDs[ah.SGIDIndex]), Dst: dip, TOS: ah.TrafficClass, TTL: 64, DF: dip.Is4()}
	p.UDP = wire.UDP{SrcPort: t.sport, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: wr.RemoteQPN, PSN: psn & 0xffffff}
	qkey := wr.RemoteQKey
	switch {
	case qp.gsi:
		qkey = ibv.GSIQKey
	case qkey&qkeyOwn != 0:
		qkey = t.attr.QKey
	}
	p.DETH = wire.DETH{QKey: qkey, SrcQP: qp.qpn}
	p.Payload = nil
	return p
}

// dispatchUD takes a packet for a UD QP: a datagram of the UD transport
// from anyone, with the QP's Q_Key.
func (e *engine) dispatchUD(qp *QP, p *wire.Packet) {
	if p.BTH.Opcode.Transport() != wire.TransportUD {
		e.counters.DroppedNoQP++
		return
	}
	// The Q_Key changes only in control operations: any engine may check it.
	if p.DETH.QKey != qp.t.attr.QKey {
		e.counters.DroppedBadQKey++
		return
	}
	if owner := e.dev.engineOf(qp); owner != e {
		e.handOff(owner)
		return
	}
	e.counters.RcvdPkts++
	if s := qp.t.state; s == ibv.StateRTR || s == ibv.StateRTS || s == ibv.StateSQD {
		e.receiveDatagram(qp, p)
	}
}

// receiveDatagram delivers a datagram into the next receive WQE: the GRH
// area, then the payload; a datagram that finds no receive is dropped (UD
// has no RNR), one larger than the receive completes it with LOC_LEN_ERR.
func (e *engine) receiveDatagram(qp *QP, p *wire.Packet) {
	t := &qp.t
	if !e.takeRecv(qp, p.BTH.PSN) {
		e.counters.DroppedNoRecv++
		return
	}
	var grh [wire.GRHLen]byte
	wire.PutGRH(&grh, &p.IP, int(p.UDP.Length))
	if !scatter(t.recv.segs, 0, grh[:], &e.pending) || !scatterPayload(t.recv.segs, wire.GRHLen, p, &e.pending) {
		e.completeRecvErr(qp, ibv.WCLocLenErr)
		return
	}
	t.recv.written = wire.GRHLen + payloadLen(p)
	flags := ibv.WCFlags(0)
	if p.BTH.Opcode == wire.UDSendOnlyImm {
		flags |= ibv.WCWithImm
	}
	e.completeRecv(qp, ibv.WCSuccess, ibv.WCRecv, flags)
}
