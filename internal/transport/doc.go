// Package transport is the in-process RNIC behind package verbs: the NIC
// (its object tables, the control operations that create, modify and
// destroy queues, regions and windows) and the RC/UC/UD transport engine
// that runs the queues, with Linux rxe's wire behaviour as the reference.
// The queues themselves (QP, CQ, SRQ, their WQEs and each QP's transport
// state) are package queue's, with exported fields: an engine reads and
// changes them directly, and a post reaches the engine through
// queue.Device, which the NIC implements. Package verbs is the API: it
// validates what applications ask, and hands in-process devices' work to
// the provider internal/inproc, whose objects are mostly these packages'.
//
// A NIC runs one engine goroutine per link (queue of the port), each owning
// the transport state of the QPs whose flow uses its queue (a QP keeps the
// index of its engine: NIC.engineOf). Files follow the engine's concerns,
// after rxe's files and gVisor's tcp package:
//
//   - engine.go: the engine, its step (receive batch, posts, send work,
//     timers, flush), frame building and dispatch of received packets;
//     loop.go its goroutine, doorbell and Progress; handoff.go frames
//     passed between engines.
//   - requester.go: send WQEs into request packets (rxe_req.c), within
//     the loss window (queue.Transport.Window).
//   - completer.go: ACKs, NAKs and READ/atomic responses against the send
//     queue, and all completion of send work (rxe_comp.c).
//   - timer.go: the retransmission timer, retry, go-back-N.
//   - recovery.go: READ responses placed past a hole, holes asked again;
//     ooo.go: request packets held past a hole (docs/recovery.md).
//   - responder.go: requests from the peer (rxe_resp.c); replies.go the
//     responses it queues, in order; pacing.go the pace of READ responses.
//   - memory.go the device's regions and windows (package memory: their
//     tables and keys, after rxe_mr.c and rxe_mw.c) as the engines use
//     them, and their registration.
//   - nic.go the NIC; objects.go its tables and QP placement; qp.go,
//     cq.go, srq.go, mcast.go the control operations on the queues;
//     qpstate.go a QP's state changes; ud.go, status.go.
//   - shared.go: work requests and completions in rings shared with a
//     daemon's clients (the engine's side of queue's QueueSource, SRQSource
//     and CQSink); fastpath.go idle RC responders shared with the XDP
//     program's fast path (docs/fastpath.md).
//   - export.go: hooks for the tests of package verbs; test/layout
//     checks that the xdproce command reaches none of them.
package transport
