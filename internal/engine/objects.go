// The device's object tables, shared by its engines.

package engine

import (
	"github.com/xdproce/xdproce/internal/queue"
)

// EngineOf is the engine serving qp.
func (d *Device) EngineOf(qp *queue.QP) *Engine { return d.Shards[qp.Engine.Load()] }
