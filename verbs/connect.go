package verbs

import "fmt"

// Peer is what a QP needs to face the other end of a connection: the
// attributes ibv_modify_qp takes on the way from RESET to RTS, once the two
// ends have exchanged QPNs and PSNs (perftest over TCP, rdma_cm over its
// MADs). Zero is a value, not a default: RNRRetry 0 means no RNR retries.
type Peer struct {
	// Access is the QP's access flags (INIT): the remote operations it allows.
	Access Access
	AH     AH
	// DestQPN is the peer's QPN, RQPSN the first PSN it sends, SQPSN ours.
	DestQPN, RQPSN, SQPSN uint32
	PathMTU               MTU
	MinRNRTimer           uint8
	// The rest apply to RC only (UC's modify rejects them, as rxe's).
	Timeout, RetryCnt, RNRRetry  uint8
	MaxRdAtomic, MaxDestRdAtomic uint8
}

// Connect takes the QP from RESET (or INIT, when receives were posted
// first) through INIT and RTR to RTS facing p.
func (qp *QP) Connect(p Peer) error {
	if qp.State() == StateReset {
		if err := qp.Modify(QPAttr{State: StateInit, Port: 1, AccessFlags: p.Access},
			AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
			return fmt.Errorf("verbs: QP %#x to INIT: %w", qp.qpn, err)
		}
	}
	rtr := QPAttr{State: StateRTR, AH: p.AH, PathMTU: p.PathMTU, DestQPN: p.DestQPN, RQPSN: p.RQPSN}
	rtrMask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
	rts := QPAttr{State: StateRTS, SQPSN: p.SQPSN}
	rtsMask := AttrState | AttrSQPSN
	if qp.typ == QPTypeRC {
		rtr.MaxDestRdAtomic, rtr.MinRNRTimer = p.MaxDestRdAtomic, p.MinRNRTimer
		rtrMask |= AttrMaxDestRdAtomic | AttrMinRNRTimer
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = p.Timeout, p.RetryCnt, p.RNRRetry, p.MaxRdAtomic
		rtsMask |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	}
	if err := qp.Modify(rtr, rtrMask); err != nil {
		return fmt.Errorf("verbs: QP %#x to RTR: %w", qp.qpn, err)
	}
	if err := qp.Modify(rts, rtsMask); err != nil {
		return fmt.Errorf("verbs: QP %#x to RTS: %w", qp.qpn, err)
	}
	return nil
}
