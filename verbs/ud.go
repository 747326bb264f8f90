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

// CreateGSIQP creates the device's QP1 (a UD QP, attr.Type is ignored): for
// the owner of the device's connection manager, hence in-process devices
// only. Its sends carry GSIQKey whatever the work request says, as rxe's.
func (pd *PD) CreateGSIQP(attr QPInitAttr) (*QP, error) {
	attr.Type = QPTypeUD
	return pd.createQP(attr, true)
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
