package transport

import "github.com/xdproce/xdproce/internal/ibv"

// completionOf maps a send opcode to its completion opcode.
func completionOf(o ibv.WROpcode) ibv.WCOpcode {
	switch o {
	case ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm:
		return ibv.WCRDMAWrite
	case ibv.WRRDMARead:
		return ibv.WCRDMARead
	case ibv.WRAtomicCmpAndSwp:
		return ibv.WCCompSwap
	case ibv.WRAtomicFetchAdd:
		return ibv.WCFetchAdd
	case ibv.WRBindMW:
		return ibv.WCBindMW
	case ibv.WRLocalInv:
		return ibv.WCLocalInv
	}
	return ibv.WCSend
}

// isLocalOp reports the operations the requester executes itself, sending nothing.
func isLocalOp(o ibv.WROpcode) bool { return o == ibv.WRBindMW || o == ibv.WRLocalInv }

// isReadOrAtomic reports the operations whose responses carry data back.
func isReadOrAtomic(o ibv.WROpcode) bool {
	return o == ibv.WRRDMARead || o == ibv.WRAtomicCmpAndSwp || o == ibv.WRAtomicFetchAdd
}
