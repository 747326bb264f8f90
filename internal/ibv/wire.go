package ibv

import "github.com/xdproce/xdproce/uverbs"

// Wire is the handle's attributes as the daemon's protocol carries them.
func (ah AH) Wire() uverbs.AHAttr {
	return uverbs.AHAttr{DGID: ah.DGID.As16(), SGIDIndex: uint8(ah.SGIDIndex), HopLimit: ah.HopLimit, TrafficClass: ah.TrafficClass,
		FlowLabel: ah.FlowLabel, Port: 1, IsGlobal: true}
}

// Wire is the attribute set as the daemon's protocol carries it.
func (a *QPAttr) Wire() uverbs.QPAttr {
	w := uverbs.QPAttr{State: uint8(a.State), CurState: uint8(a.CurState), AccessFlags: uint32(a.AccessFlags), PKeyIndex: a.PKeyIndex,
		Port: a.Port, QKey: a.QKey, DGID: a.AH.DGID.As16(), SGIDIndex: uint8(a.AH.SGIDIndex), HopLimit: a.AH.HopLimit,
		TrafficClass: a.AH.TrafficClass, FlowLabel: a.AH.FlowLabel, DMAC: a.AH.DMAC, PathMTU: uint8(a.PathMTU), Timeout: a.Timeout,
		RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, RQPSN: a.RQPSN, SQPSN: a.SQPSN, MaxRdAtomic: a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNR: a.MinRNRTimer, DestQPN: a.DestQPN, EnSQDAsyncNotify: a.EnSQDAsyncNotify,
		SQDraining: a.SQDraining, Cap: uverbs.QPCap{MaxSendWR: uint32(a.Cap.MaxSendWR), MaxRecvWR: uint32(a.Cap.MaxRecvWR),
			MaxSendSGE: uint32(a.Cap.MaxSendSGE), MaxRecvSGE: uint32(a.Cap.MaxRecvSGE), MaxInlineData: uint32(a.Cap.MaxInlineData)}}
	return w
}
