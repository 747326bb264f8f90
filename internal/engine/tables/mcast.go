package tables

import (
	"github.com/xdproce/xdproce/internal/queue"
)

// McGroup is a multicast group with its attached QPs, in attach order.
type McGroup struct{ Qps []*queue.QP }
