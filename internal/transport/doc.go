// Package transport is the in-process RNIC behind package verbs: the
// device's object tables (QPs, CQs, SRQs, memory regions and windows) and
// the RC/UC/UD transport engine that runs them, with Linux rxe's wire
// behaviour as the reference. Package verbs is the API: it validates what
// applications ask, and hands in-process devices' work to the provider
// internal/inproc, whose objects are mostly this package's.
//
// A NIC runs one engine goroutine per link (queue of the port), each owning
// the transport state of the QPs whose flow uses its queue. Files follow
// the engine's concerns, after rxe's files and gVisor's tcp package:
//
//   - engine.go: the engine, its step (receive batch, posts, send work,
//     timers, flush), frame building and dispatch of received packets;
//     loop.go its goroutine, doorbell and Progress; handoff.go frames
//     passed between engines.
//   - requester.go: send WQEs into request packets (rxe_req.c), within
//     the congestion window (cwnd.go).
//   - completer.go: ACKs, NAKs and READ/atomic responses against the send
//     queue, and all completion of send work (rxe_comp.c).
//   - timer.go: the retransmission timer, RTO and retry, go-back-N.
//   - recovery.go: READ responses placed past a hole, holes asked again;
//     ooo.go: request packets held past a hole (docs/recovery.md).
//   - responder.go: requests from the peer (rxe_resp.c); replies.go the
//     responses it queues, in order; pacing.go the pace of READ responses.
//   - dma.go: data between messages and memory; memory.go the device's
//     regions and windows (package memory: their tables and keys, after
//     rxe_mr.c and rxe_mw.c) as the engines use them.
//   - qpstate.go: a QP's transport state and its changes; post.go the
//     posting of work requests; cq.go, srq.go, ud.go, events.go, status.go.
//   - shared.go: work requests and completions in rings shared with a
//     daemon's clients.
//   - export.go: hooks for the tests of package verbs; test/layout
//     checks that the xdproce command reaches none of them.
package transport
