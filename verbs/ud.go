package verbs

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/wire"
)

// Unreliable datagrams: each SEND is one packet to the QP its work request
// names, through an address handle; a receive gets the packet's GRH area
// (40 bytes) ahead of the payload, as rxe fills it.

const qkeyOwn = QKeyControlled

// CreateGSIQP creates the device's QP1 (a UD QP, attr.Type is ignored): for
// the owner of the device's connection manager, hence in-process devices
// only. Its sends carry GSIQKey whatever the work request says, as rxe's.
func (pd *PD) CreateGSIQP(attr QPInitAttr) (*QP, error) {
	if pd.dev.rem != nil {
		return nil, fmt.Errorf("verbs: QP1 belongs to the daemon: %w", ErrNotSup)
	}
	attr.Type = QPTypeUD
	return pd.createQP(attr, true)
}

// udHeader fills e.tx for a datagram of qp: addressed by the work request's
// address handle, with a DETH carrying the Q_Key and the source QPN.
func (e *engine) udHeader(qp *QP, wr *SendWR, op wire.Opcode, psn uint32) *wire.Packet {
	p := &e.tx
	t := &qp.t
	ah := &wr.AH.attr
	dip := gidAddr(ah.DGID)
	p.Eth = wire.Ethernet{Dst: [6]byte(ah.DMAC), Src: t.smac}
	p.IP = wire.IP{V6: !dip.Is4(), Src: gidAddr(e.dev.cfg.GIDs[ah.SGIDIndex]), Dst: dip, TOS: ah.TrafficClass, TTL: 64, DF: dip.Is4()}
	p.UDP = wire.UDP{SrcPort: t.sport, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: wr.RemoteQPN, PSN: psn & 0xffffff}
	qkey := wr.RemoteQKey
	switch {
	case qp.gsi:
		qkey = GSIQKey
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
	if owner := qp.eng.Load(); owner != e {
		e.handOff(owner)
		return
	}
	e.counters.RcvdPkts++
	if s := qp.t.state; s == StateRTR || s == StateRTS || s == StateSQD {
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
		e.completeRecvErr(qp, WCLocLenErr)
		return
	}
	t.recv.written = wire.GRHLen + payloadLen(p)
	flags := WCFlags(0)
	if p.BTH.Opcode == wire.UDSendOnlyImm {
		flags |= WCWithImm
	}
	e.completeRecv(qp, WCSuccess, WCRecv, flags)
}

// AHFromGRH is ibv_init_ah_from_wc on RoCE: the address handle attributes
// that answer the datagram whose receive buffer starts with grh, the 40
// bytes the device fills (an IPv4 header in the last 20, an IPv6 header
// filling them): its source, traffic class and flow label, a hop limit of
// 255, sent from the GID sgidIndex.
func AHFromGRH(grh []byte, sgidIndex int) (AH, error) {
	if len(grh) < wire.GRHLen {
		return AH{}, fmt.Errorf("verbs: a GRH area of %d bytes: %w", len(grh), ErrInvalid)
	}
	switch {
	case grh[20]>>4 == 4:
		return AH{DGID: netip.AddrFrom4([4]byte(grh[32:36])), SGIDIndex: sgidIndex, HopLimit: 0xff, TrafficClass: grh[21]}, nil
	case grh[0]>>4 == 6:
		return AH{DGID: netip.AddrFrom16([16]byte(grh[8:24])), SGIDIndex: sgidIndex, HopLimit: 0xff,
			TrafficClass: uint8(binary.BigEndian.Uint16(grh) >> 4), FlowLabel: binary.BigEndian.Uint32(grh) & 0xfffff}, nil
	}
	return AH{}, fmt.Errorf("verbs: the GRH area holds no IP header (% x): %w", grh[:4], ErrInvalid)
}
