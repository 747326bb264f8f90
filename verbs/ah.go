package verbs

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/uverbs"
)

// AddressHandle is a destination for datagrams (ibv_ah): a GID, the source
// GID index, and the next hop's MAC address, resolved once when the handle
// is created as the kernel does for RoCE (ib_resolve_eth_dmac).
type AddressHandle struct {
	pd   *PD
	attr AH // the provider's, which never changes
	ops  ibv.AHOps

	mu        sync.Mutex  // serializes Destroy
	destroyed atomic.Bool // read by posters
}

// CreateAH makes an address handle on the PD (ibv_create_ah). RoCE needs a
// GRH, so the destination GID is required; the source GID index must name a
// GID of the same family (IPv4-mapped or IPv6), as rxe derives the packet's
// IP version from it. Without DMAC the neighbour table resolves it now.
func (pd *PD) CreateAH(ah AH) (*AddressHandle, error) {
	if pd.dev.closing.Load() {
		return nil, ErrClosed
	}
	if err := pd.dev.checkAH(ah); err != nil {
		return nil, err
	}
	ops, err := pd.ops.CreateAH(ah)
	if err != nil {
		return nil, err
	}
	return &AddressHandle{pd: pd, attr: *ops.Attr(), ops: ops}, nil
}

// checkAH validates an address handle's attributes against the port's GID
// table.
func (d *Device) checkAH(ah AH) error {
	if !ah.DGID.IsValid() || ah.DGID.IsUnspecified() {
		return fmt.Errorf("verbs: address handle without a destination GID (RoCE needs a GRH): %w", ErrInvalid)
	}
	sgid, err := d.QueryGID(ah.SGIDIndex)
	if err != nil {
		return err
	}
	if sgid.Unmap().Is4() != ah.DGID.Unmap().Is4() {
		return fmt.Errorf("verbs: destination %v and source GID %v are of different IP versions: %w", ah.DGID, sgid, ErrInvalid)
	}
	if ah.FlowLabel >= 1<<20 {
		return fmt.Errorf("verbs: flow label %#x: %w", ah.FlowLabel, ErrInvalid)
	}
	if ah.DMAC != nil && len(ah.DMAC) != 6 {
		return fmt.Errorf("verbs: MAC address of %d bytes: %w", len(ah.DMAC), ErrInvalid)
	}
	return nil
}

// Attr is the handle's destination, its MAC address resolved.
func (a *AddressHandle) Attr() AH { return a.attr }

// PD is the protection domain the handle belongs to.
func (a *AddressHandle) PD() *PD { return a.pd }

// Destroy frees the handle (ibv_destroy_ah).
func (a *AddressHandle) Destroy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.destroyed.Load() {
		return fmt.Errorf("verbs: address handle already destroyed: %w", ErrInvalid)
	}
	if err := a.ops.Destroy(); err != nil {
		return err
	}
	a.destroyed.Store(true)
	return nil
}

// gone reports whether the handle was destroyed. Its attributes never
// change: a datagram posted before Destroy still leaves as addressed.
func (a *AddressHandle) gone() bool { return a.destroyed.Load() }

// AHFromWire is the address handle a CREATE_AH message describes; RoCE
// needs its GRH and the one port.
func AHFromWire(w *uverbs.AHAttr) (AH, error) {
	if !w.IsGlobal {
		return AH{}, fmt.Errorf("verbs: address handle without a GRH on RoCE: %w", ErrInvalid)
	}
	if w.Port != 1 {
		return AH{}, fmt.Errorf("verbs: port %d (the device has port 1): %w", w.Port, ErrInvalid)
	}
	return AH{DGID: netip.AddrFrom16(w.DGID), SGIDIndex: int(w.SGIDIndex), HopLimit: w.HopLimit, TrafficClass: w.TrafficClass,
		FlowLabel: w.FlowLabel}, nil
}
