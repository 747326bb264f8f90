package verbs

import (
	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link"
)

// Link is the network a Device runs over (see package link).
type Link = link.Link

// Clock tells the engine the time; tests inject a fake one
// (internal/faketime).
type Clock = port.Clock

// ProcMemory is memory of another process that the engines reach by
// copying: a daemon's client's own memory (process_vm_readv/writev). Its
// offsets are the region's. A copy that fails (the client unmapped the
// memory, or died) moves nothing; the client's data is then undefined, as
// ibverbs leaves it when registered memory is freed.
type ProcMemory = transport.ProcMemory

// ProcReadVec is a ProcMemory that takes several reads in one call.
type ProcReadVec = transport.ProcReadVec

// ProcWriteVec is a ProcMemory that takes several writes in one call.
type ProcWriteVec = transport.ProcWriteVec
