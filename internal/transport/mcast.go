// Multicast: UD QPs attached to groups, datagrams to the multicast QPN
// delivered to every QP attached to the group their destination names, as
// rxe_mcast.c and rxe_rcv_mcast_pkt do.

package transport

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

// mcGroup is a multicast group with its attached QPs, in attach order.
type mcGroup struct{ qps []*queue.QP }

// AttachMcast attaches the UD QP to the group gid (ibv_attach_mcast). As
// the kernel's ib_attach_mcast: EINVAL unless the QP is UD (QP1 is not) and
// gid a multicast GID; attaching twice is no error. As rxe: ENOMEM past
// MaxMcastGroups groups, MaxMcastQPAttach QPs in a group or
// MaxTotalMcastAttach attachments. The device's first member of a group
// joins it on the port (Config.Groups).
func (d *NIC) AttachMcast(qp *queue.QP, gid netip.Addr) error {
	if qp.QPType != ibv.QPTypeUD || qp.GSI {
		return fmt.Errorf("verbs: attaching a %v QP to a multicast group (UD only): %w", qp.QPType, ibv.ErrInvalid)
	}
	if !wire.IsMulticastGID(gid) {
		return fmt.Errorf("verbs: %v is not a multicast GID: %w", gid, ibv.ErrInvalid)
	}
	return d.do(func() error { return d.attachMcast(qp, queue.GIDAddr(gid)) })
}

// DetachMcast detaches the QP from the group gid (ibv_detach_mcast): EINVAL
// if it is not attached. The device's last member of a group leaves it.
func (d *NIC) DetachMcast(qp *queue.QP, gid netip.Addr) error {
	if qp.QPType != ibv.QPTypeUD || qp.GSI || !wire.IsMulticastGID(gid) {
		return fmt.Errorf("verbs: detaching a %v QP from %v: %w", qp.QPType, gid, ibv.ErrInvalid)
	}
	return d.do(func() error {
		if err := d.liveQP(qp); err != nil {
			return err
		}
		if !d.detachMcast(qp, queue.GIDAddr(gid)) {
			return fmt.Errorf("verbs: QP %#x is not attached to %v: %w", qp.Number, gid, ibv.ErrInvalid)
		}
		return nil
	})
}

// liveQP is EINVAL if qp was destroyed. A control operation.
func (d *NIC) liveQP(qp *queue.QP) error {
	o := &d.objs
	if int(qp.Number) >= len(o.qps) || o.qps[qp.Number] != qp {
		return fmt.Errorf("verbs: QP %#x was destroyed: %w", qp.Number, ibv.ErrInvalid)
	}
	return nil
}

// attachMcast is AttachMcast's control operation; addr is the group as
// frames carry it.
func (d *NIC) attachMcast(qp *queue.QP, addr netip.Addr) error {
	if err := d.liveQP(qp); err != nil {
		return err
	}
	o := &d.objs
	g := o.groups[addr]
	if g != nil && slices.Contains(g.qps, qp) {
		return nil
	}
	if o.mcAttached >= ibv.MaxTotalMcastAttach {
		return fmt.Errorf("verbs: %d multicast attachments: %w", ibv.MaxTotalMcastAttach, ibv.ErrNoMem)
	}
	if g == nil {
		if len(o.groups) >= ibv.MaxMcastGroups {
			return fmt.Errorf("verbs: %d multicast groups: %w", ibv.MaxMcastGroups, ibv.ErrNoMem)
		}
		// The port joins first: a group the port could not join would
		// never receive.
		if d.cfg.Groups != nil {
			if err := d.cfg.Groups(addr, true); err != nil {
				return fmt.Errorf("verbs: joining %v on the port: %w", addr, err)
			}
		}
		if o.groups == nil {
			o.groups = make(map[netip.Addr]*mcGroup)
		}
		g = &mcGroup{}
		o.groups[addr] = g
	}
	if len(g.qps) >= ibv.MaxMcastQPAttach {
		return fmt.Errorf("verbs: %d QPs attached to %v: %w", ibv.MaxMcastQPAttach, addr, ibv.ErrNoMem)
	}
	g.qps = append(g.qps, qp)
	qp.Groups = append(qp.Groups, addr)
	o.mcAttached++
	return nil
}

// detachMcast takes qp out of the group addr and reports whether it was
// in it; the group's last member leaves it on the port. A control
// operation.
func (d *NIC) detachMcast(qp *queue.QP, addr netip.Addr) bool {
	o := &d.objs
	g := o.groups[addr]
	if g == nil {
		return false
	}
	i := slices.Index(g.qps, qp)
	if i < 0 {
		return false
	}
	g.qps = slices.Delete(g.qps, i, i+1)
	if j := slices.Index(qp.Groups, addr); j >= 0 {
		qp.Groups = slices.Delete(qp.Groups, j, j+1)
	}
	o.mcAttached--
	if len(g.qps) == 0 {
		delete(o.groups, addr)
		if d.cfg.Groups != nil {
			// As rxe's dev_mc_del, a failure to leave is not the
			// caller's: the group is gone from the device either way.
			_ = d.cfg.Groups(addr, false)
		}
	}
	return true
}

// detachAll takes a QP being destroyed out of its groups (the kernel
// detaches a destroyed QP's groups too: ib_uverbs_detach_umcast).
func (d *NIC) detachAll(qp *queue.QP) {
	for len(qp.Groups) > 0 {
		d.detachMcast(qp, qp.Groups[0])
	}
}

// dispatchMcast takes a packet to the multicast QPN: each QP attached to
// the group of its destination address that is in a receiving state and
// holds the datagram's Q_Key gets a copy (rxe_rcv_mcast_pkt's
// check_type_state and check_keys). QPs of other engines get it from their
// engine: the frame is handed to each such engine once, which delivers it
// to its own QPs only (e.handingOff).
func (e *engine) dispatchMcast(p *wire.Packet) {
	g := e.groups[p.IP.Dst]
	if g == nil {
		e.counters.DroppedNoGroup++
		return
	}
	if p.BTH.Opcode.Transport() != wire.TransportUD {
		e.counters.DroppedNoQP++
		return
	}
	took := false
	if !e.handingOff {
		clear(e.mcHanded)
	}
	for _, qp := range g.qps {
		if owner := e.dev.engineOf(qp); owner != e {
			if !e.handingOff && !e.mcHanded[owner.index] {
				e.mcHanded[owner.index] = true
				e.handOff(owner)
			}
			continue
		}
		if p.DETH.QKey != qp.Transport.Attr.QKey {
			e.counters.DroppedBadQKey++
			continue
		}
		if s := qp.Transport.State; s == ibv.StateRTR || s == ibv.StateRTS || s == ibv.StateSQD {
			e.receiveDatagram(qp, p)
			took = true
		}
	}
	if took {
		e.counters.RcvdPkts++
		e.counters.McastPkts++
	}
}

// noteMcast keeps the frame just queued, to a group some QP of the device
// is attached to, for loopMcast: the device is a member of the group, so
// its own QPs receive what it sends there, as the kernel loops a group's
// datagrams back to the sending host (IP_MULTICAST_LOOP) and rxe receives
// them from there.
func (e *engine) noteMcast(frame []byte) {
	if e.tx.IP.Dst.IsMulticast() && e.groups[e.tx.IP.Dst] != nil {
		e.mcLoop = append(e.mcLoop, frame)
	}
}

// loopMcast copies the batch's frames to the device's groups into every
// engine's inbox, once they are sealed and before the link may reuse their
// buffers; each engine delivers them to its own attached QPs.
func (e *engine) loopMcast() {
	if len(e.mcLoop) == 0 {
		return
	}
	for _, f := range e.mcLoop {
		for _, x := range e.dev.shards {
			// A full inbox loses the copy, as a full RX ring would.
			if x.inbox.put(f, nil) {
				x.ring()
			} else {
				e.counters.HandOffDrops++
			}
		}
		e.counters.LoopbackPkts++
	}
	clear(e.mcLoop)
	e.mcLoop = e.mcLoop[:0]
}
