// Package queue holds an in-process RNIC's queues as the transport engine
// reads them on every packet: queue pairs (QP), completion queues (CQ) and
// shared receive queues (SRQ), the work queued on them (SendWQE, RecvWQE),
// and each QP's transport state (Transport: PSNs, timers, the loss window,
// the responder's resources and replies, packets held past a hole). Their
// fields are exported because package engine's engines own them: an
// engine changes a QP's Transport only on its own goroutine, and reads the
// rest under its mutex (see internal/engine's doc).
//
// The queues' own methods are what an application does to them without
// the engines stopping: posting (QP.PostSend, PostRecv, SRQ.PostRecv,
// PostFromRing for a daemon's client's rings), polling (CQ.Poll,
// ReqNotify, Wait) and reading their limits. A post reaches the engine
// serving the QP through Device, two doorbells the NIC implements; nothing
// here calls into the engine per packet. Creating, modifying and
// destroying a queue are control operations, the NIC's methods
// (transport.NIC.CreateQP, ModifyQP, DestroyQP, ...).
//
// Files: qp.go the QP and the work requests it takes; post.go the checks
// of a post and the receive WQE; wqe.go the send WQE and its opcodes;
// state.go a QP's transport state and the responder's; cwnd.go, timer.go,
// pacing.go, ooo.go, replies.go the parts of that state the engine's files
// of the same names use; cq.go, srq.go; shared.go the interfaces a daemon's
// rings plug into (QueueSource, SRQSource, CQSink, Port); dma.go data
// between messages and memory; events.go the asynchronous events;
// export.go hooks for the tests of package verbs.
//
// internal/transport moved these here from its own files with
// internal/tools/movedecl (test/layout/split/split.sh, issue 31).
package queue
