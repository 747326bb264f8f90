package rdmacm

import (
	"fmt"
	"net"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cmagent"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// Route is an ID's path as rdma_cm_id's route shows it.
type Route struct {
	GIDIndex     int
	PathMTU      verbs.MTU // 0 until the route is resolved
	DMAC         net.HardwareAddr
	FlowLabel    uint32
	TrafficClass uint8
	HopLimit     uint8
}

// Route returns the ID's path.
func (id *ID) Route() Route {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.rem != nil {
		return id.remoteRoute()
	}
	r := Route{GIDIndex: id.sgid, DMAC: id.dmac, FlowLabel: id.flow, TrafficClass: id.tos}
	switch id.state {
	case stateRouteResolved, stateConnect, stateDisconnect:
		r.PathMTU, r.HopLimit = id.s.mtu, hopLimit
	}
	return r
}

// InitQPAttr returns the attributes and mask that take a QP of the ID to
// state (INIT, RTR or RTS), as rdma_init_qp_attr, for owners that move
// their QPs themselves.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error) {
	if id.rem != nil {
		return id.remoteInitQPAttr(state)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.ud() {
		switch state {
		case verbs.StateInit:
			return verbs.QPAttr{State: state, Port: 1, QKey: id.qkey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey, nil
		case verbs.StateRTR:
			return verbs.QPAttr{State: state}, verbs.AttrState, nil
		case verbs.StateRTS:
			return verbs.QPAttr{State: state}, verbs.AttrState | verbs.AttrSQPSN, nil
		}
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: QP attributes for %v: %w", state, ErrInvalid)
	}
	p, ok := id.paramsLocked()
	if state == verbs.StateInit {
		a := verbs.QPAttr{State: state, Port: 1}
		if ok {
			a.AccessFlags = id.peer(p, id.sgid, id.dmac).Access
		}
		return a, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags, nil
	}
	if !ok || (state != verbs.StateRTR && state != verbs.StateRTS) {
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: QP attributes for %v in %v: %w", state, id.state, ErrInvalid)
	}
	peer := id.peer(p, id.sgid, id.dmac)
	if state == verbs.StateRTR {
		return verbs.QPAttr{State: state, AH: peer.AH, PathMTU: peer.PathMTU, DestQPN: peer.DestQPN, RQPSN: peer.RQPSN,
				MaxDestRdAtomic: peer.MaxDestRdAtomic},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer, nil
	}
	return verbs.QPAttr{State: state, SQPSN: peer.SQPSN, Timeout: peer.Timeout, RetryCnt: peer.RetryCnt, RNRRetry: peer.RNRRetry,
			MaxRdAtomic: peer.MaxRdAtomic},
		verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic, nil
}

// paramsLocked are the connection's QP parameters once both ends' numbers
// are known: the active side after the REP, the passive side from the
// request and what it will answer.
func (id *ID) paramsLocked() (cmagent.QPParams, bool) {
	switch {
	case id.conn == nil:
		return cmagent.QPParams{}, false
	case id.parent != nil:
		rep := cm.REP{StartingPSN: id.seq, ResponderResources: min(id.req.InitiatorDepth, uint8(id.s.attr.MaxQPRdAtom)),
			InitiatorDepth: min(id.req.ResponderResources, uint8(id.s.attr.MaxQPInitRdAtom))}
		return cmagent.PassiveQPParams(&id.req, &rep), true
	case id.resp != nil:
		return cmagent.ActiveQPParams(&id.req, &id.rep, id.s.opts.PacketLifetime), true
	}
	return cmagent.QPParams{}, false
}

// rdma_set_option's levels and options.
const (
	OptionLevelID    = 0 // RDMA_OPTION_ID
	OptionLevelIB    = 1 // RDMA_OPTION_IB
	OptionTOS        = 0 // RDMA_OPTION_ID_TOS: u8
	OptionReuseAddr  = 1 // RDMA_OPTION_ID_REUSEADDR: int
	OptionAFOnly     = 2 // RDMA_OPTION_ID_AFONLY: int
	OptionACKTimeout = 3 // RDMA_OPTION_ID_ACK_TIMEOUT: u8
	OptionIBPath     = 1 // RDMA_OPTION_IB_PATH
)

// SetOption sets an option as rdma_set_option: the type of service and
// the ACK timeout take effect; address reuse and family restriction are
// accepted (one device, no port sharing to relax); path records are IB's.
func (id *ID) SetOption(level, name uint32, val []byte) error {
	if id.rem != nil {
		return id.remoteOp(uverbs.OpCMSetOption, &uverbs.CMSetOption{Level: level, Name: name, Value: val})
	}
	bad := fmt.Errorf("rdmacm: option %d/%d of %d bytes: %w", level, name, len(val), ErrInvalid)
	switch {
	case level == OptionLevelID && name == OptionTOS && len(val) == 1:
		id.SetTOS(val[0])
	case level == OptionLevelID && name == OptionACKTimeout && len(val) == 1:
		if val[0] > 31 {
			return bad
		}
		id.mu.Lock()
		id.ackTO = val[0]
		id.mu.Unlock()
	case level == OptionLevelID && (name == OptionReuseAddr || name == OptionAFOnly) && len(val) == 4:
	case level == OptionLevelIB && name == OptionIBPath:
		return fmt.Errorf("rdmacm: IB path records: %w", ErrNotSup)
	default:
		return bad
	}
	return nil
}
