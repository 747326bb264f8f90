// Multicast datagrams: one to the multicast QPN is delivered to every QP
// attached to the group its destination names, as rxe_rcv_mcast_pkt
// does.

package engine

import (
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/wire"
)

// dispatchMcast takes a packet to the multicast QPN: each QP attached to
// the group of its destination address that is in a receiving state and
// holds the datagram's Q_Key gets a copy (rxe_rcv_mcast_pkt's
// check_type_state and check_keys). QPs of other engines get it from their
// engine: the frame is handed to each such engine once, which delivers it
// to its own QPs only (e.handingOff).
func (e *Engine) dispatchMcast(p *wire.Packet) {
	g := e.Groups[p.IP.Dst]
	if g == nil {
		e.Counters.DroppedNoGroup++
		return
	}
	if p.BTH.Opcode.Transport() != wire.TransportUD {
		e.Counters.DroppedNoQP++
		return
	}
	took := false
	if !e.handingOff {
		clear(e.McHanded)
	}
	for _, qp := range g.Qps {
		if owner := e.dev.EngineOf(qp); owner != e {
			if !e.handingOff && !e.McHanded[owner.Index] {
				e.McHanded[owner.Index] = true
				e.handOff(owner)
			}
			continue
		}
		if p.DETH.QKey != qp.Transport.Attr.QKey {
			e.Counters.DroppedBadQKey++
			continue
		}
		if s := qp.Transport.State; s == ibv.StateRTR || s == ibv.StateRTS || s == ibv.StateSQD {
			e.receiveDatagram(qp, p)
			took = true
		}
	}
	if took {
		e.Counters.RcvdPkts++
		e.Counters.McastPkts++
	}
}

// noteMcast keeps the frame just queued, to a group some QP of the device
// is attached to, for loopMcast: the device is a member of the group, so
// its own QPs receive what it sends there, as the kernel loops a group's
// datagrams back to the sending host (IP_MULTICAST_LOOP) and rxe receives
// them from there.
func (e *Engine) noteMcast(frame []byte) {
	if e.tx.IP.Dst.IsMulticast() && e.Groups[e.tx.IP.Dst] != nil {
		e.mcLoop = append(e.mcLoop, frame)
	}
}

// loopMcast copies the batch's frames to the device's groups into every
// engine's inbox, once they are sealed and before the link may reuse their
// buffers; each engine delivers them to its own attached QPs.
func (e *Engine) loopMcast() {
	if len(e.mcLoop) == 0 {
		return
	}
	for _, f := range e.mcLoop {
		for _, x := range e.dev.Shards {
			// A full inbox loses the copy, as a full RX ring would.
			if x.inbox.Put(f, nil) {
				x.ring()
			} else {
				e.Counters.HandOffDrops++
			}
		}
		e.Counters.LoopbackPkts++
	}
	clear(e.mcLoop)
	e.mcLoop = e.mcLoop[:0]
}
