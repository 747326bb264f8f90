// The tables of QPs and SRQs whose work requests a daemon's clients post
// to shared rings.

package tables

import (
	"github.com/xdproce/xdproce/internal/queue"
)

// ForgetShared drops qp from the shared QPs (under every engine's mutex).
func (o *Objects) ForgetShared(qp *queue.QP) {
	for i, s := range o.SharedQPs {
		if s == qp {
			o.SharedQPs = append(o.SharedQPs[:i], o.SharedQPs[i+1:]...)
			return
		}
	}
}

// ForgetSharedSRQ drops s from the shared SRQs (under every engine's mutex).
func (o *Objects) ForgetSharedSRQ(s *queue.SRQ) {
	for i, x := range o.SharedSRQs {
		if x == s {
			o.SharedSRQs = append(o.SharedSRQs[:i], o.SharedSRQs[i+1:]...)
			return
		}
	}
}
