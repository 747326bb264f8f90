package queue

import "github.com/xdproce/xdproce/internal/ibv"

// CompletionOf maps a send opcode to its completion opcode.
func CompletionOf(o ibv.WROpcode) ibv.WCOpcode {
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

// IsLocalOp reports the operations the requester executes itself, sending nothing.
func IsLocalOp(o ibv.WROpcode) bool { return o == ibv.WRBindMW || o == ibv.WRLocalInv }

// IsReadOrAtomic reports the operations whose responses carry data back.
func IsReadOrAtomic(o ibv.WROpcode) bool {
	return o == ibv.WRRDMARead || o == ibv.WRAtomicCmpAndSwp || o == ibv.WRAtomicFetchAdd
}
