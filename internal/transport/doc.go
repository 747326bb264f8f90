// Package transport is the in-process RNIC behind package verbs: the
// device's object tables (QPs, CQs, SRQs, memory regions and windows) and
// the RC/UC/UD transport engine that runs them, with Linux rxe's wire
// behaviour as the reference. Package verbs is the API: it validates what
// applications ask, and hands in-process devices' work to this package as
// libibverbs hands it to a provider.
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
//   - dma.go: data between messages and memory; mr.go and mw.go the
//     memory tables and keys (rxe_mr.c, rxe_mw.c).
//   - qpstate.go: a QP's transport state and its changes; post.go the
//     posting of work requests; cq.go, srq.go, ud.go, events.go, status.go.
//   - shared.go: work requests and completions in rings shared with a
//     daemon's clients.
package transport
