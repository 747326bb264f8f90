package ibv

import (
	"errors"
	"syscall"
)

// Device limits, in one place as rxe keeps them in rxe_param.h.
const (
	MaxQP          = 4096    // QPNs 2..MaxQP-1 (0 and 1 are the special QPs)
	MaxQPWR        = 16384   // send or receive WRs per QP
	MaxSGE         = 32      // scatter/gather elements per WR
	MaxInlineData  = 256     // bytes
	MaxCQE         = 1 << 20 // completions per CQ
	MaxMRSize      = 1 << 40
	MaxMsgSize     = 1 << 31 // bytes in one message (RETH DMA length limit)
	MaxRdAtomic    = 128     // outstanding READ/atomic per QP, either side
	MaxUnackedPSNs = 128     // requester window, as rxe
	MaxPktsPerAck  = 64      // AckReq at least every this many packets, as rxe
)

// Sentinel errors wrapped by API misuse, testable with errors.Is; they are the
// errno values ibverbs returns.
var (
	ErrInvalid = syscall.EINVAL
	ErrNoMem   = syscall.ENOMEM
	ErrBusy    = syscall.EBUSY
	ErrNotSup  = syscall.EOPNOTSUPP
	// ErrClosed is returned by every call on a closed device.
	ErrClosed = errors.New("verbs: device closed")
)
