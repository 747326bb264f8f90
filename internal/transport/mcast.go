// Multicast groups as control operations: UD QPs attached to and
// detached from groups, the port joining and leaving them, as
// rxe_mcast.c does.

package transport

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdproce/xdproce/internal/engine/tables"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/wire"
)

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
	o := &d.dev.Objs
	if int(qp.Number) >= len(o.Qps) || o.Qps[qp.Number] != qp {
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
	o := &d.dev.Objs
	g := o.Groups[addr]
	if g != nil && slices.Contains(g.Qps, qp) {
		return nil
	}
	if o.McAttached >= ibv.MaxTotalMcastAttach {
		return fmt.Errorf("verbs: %d multicast attachments: %w", ibv.MaxTotalMcastAttach, ibv.ErrNoMem)
	}
	if g == nil {
		if len(o.Groups) >= ibv.MaxMcastGroups {
			return fmt.Errorf("verbs: %d multicast groups: %w", ibv.MaxMcastGroups, ibv.ErrNoMem)
		}
		// The port joins first: a group the port could not join would
		// never receive.
		if d.dev.Cfg.Groups != nil {
			if err := d.dev.Cfg.Groups(addr, true); err != nil {
				return fmt.Errorf("verbs: joining %v on the port: %w", addr, err)
			}
		}
		if o.Groups == nil {
			o.Groups = make(map[netip.Addr]*tables.McGroup)
		}
		g = &tables.McGroup{}
		o.Groups[addr] = g
	}
	if len(g.Qps) >= ibv.MaxMcastQPAttach {
		return fmt.Errorf("verbs: %d QPs attached to %v: %w", ibv.MaxMcastQPAttach, addr, ibv.ErrNoMem)
	}
	g.Qps = append(g.Qps, qp)
	qp.Groups = append(qp.Groups, addr)
	o.McAttached++
	return nil
}

// detachMcast takes qp out of the group addr and reports whether it was
// in it; the group's last member leaves it on the port. A control
// operation.
func (d *NIC) detachMcast(qp *queue.QP, addr netip.Addr) bool {
	o := &d.dev.Objs
	g := o.Groups[addr]
	if g == nil {
		return false
	}
	i := slices.Index(g.Qps, qp)
	if i < 0 {
		return false
	}
	g.Qps = slices.Delete(g.Qps, i, i+1)
	if j := slices.Index(qp.Groups, addr); j >= 0 {
		qp.Groups = slices.Delete(qp.Groups, j, j+1)
	}
	o.McAttached--
	if len(g.Qps) == 0 {
		delete(o.Groups, addr)
		if d.dev.Cfg.Groups != nil {
			// As rxe's dev_mc_del, a failure to leave is not the
			// caller's: the group is gone from the device either way.
			_ = d.dev.Cfg.Groups(addr, false)
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
