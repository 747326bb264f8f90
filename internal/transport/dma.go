// Memory of another process as the provider interface names it; the
// data movement between messages and memory is internal/queue's dma.go.

package transport

import (
	"github.com/xdproce/xdproce/internal/ibv"
)

// ProcMemory, ProcReadVec and ProcWriteVec are the provider interface's
// (package ibv): memory of another process the engines reach by copying.
type (
	ProcMemory   = ibv.ProcMemory
	ProcReadVec  = ibv.ProcReadVec
	ProcWriteVec = ibv.ProcWriteVec
)
