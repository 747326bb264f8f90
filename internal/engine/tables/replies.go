// Queued READ replies dropped with the region they read.

package tables

import (
	"github.com/xdproce/xdproce/internal/memory"
)

// RevokeReplies drops the queued READ replies that read mr, just
// deregistered: no packet reads it again, and a requester that asks again
// is told the key is invalid.
func (e *Objects) RevokeReplies(mr *memory.MR) {
	for _, qp := range e.Live {
		t := &qp.Transport
		keep := t.Replies[:t.ReplyHead]
		for _, r := range t.Replies[t.ReplyHead:] {
			if !r.Read || r.Res.MR != mr {
				keep = append(keep, r)
			}
		}
		clear(t.Replies[len(keep):])
		t.Replies = keep
	}
}
