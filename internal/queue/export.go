package queue

import (
	"github.com/xdproce/xdproce/internal/ibv"
)

// Queue is the index of the engine serving the QP.
func (qp *QP) Queue() int { return int(qp.Engine.Load()) }

// SourcePort is the UDP source port of the QP's flow.
func (qp *QP) SourcePort() uint16 { return qp.Transport.SrcPort }

// ForceState puts the QP in state s, as no Modify may (SQE); in Do.
func (qp *QP) ForceState(s ibv.QPState) {
	qp.Transport.State = s
	qp.StateMirror.Store(uint32(s))
}

// Pending is how many completions the CQ holds.
func (cq *CQ) Pending() int { return cq.pending() }

// Attached is how many QPs use the SRQ.
func (s *SRQ) Attached() int32 { return s.AttachedQPs.Load() }
