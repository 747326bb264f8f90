// Package engine is the in-process RNIC's transport: one engine per queue
// of the port, each running the RC/UC/UD transport of the QPs whose flow
// uses its queue, with Linux rxe's wire behaviour as the reference. An
// engine owns its QPs' transport state (queue.Transport) and changes it
// only on its own goroutine or under its mutex. Device is what the engines
// share of the NIC: the port's configuration, the object tables
// (Objects), the engines and the state of the NIC's life. The NIC
// (internal/transport) builds the Device, starts the engines (Device.Run)
// and does the control operations with every engine held between two
// steps (Device.LockAll); nothing here names it.
//
// Files follow the engine's concerns, after rxe's files and gVisor's tcp
// package:
//
//   - engine.go: the engine, its step (receive batch, posts, send work,
//     timers, flush), frame building and dispatch of received packets;
//     loop.go its goroutine and doorbell; handoff.go frames passed
//     between engines; device.go, objects.go what the engines share.
//   - requester.go: send WQEs into request packets (rxe_req.c), within
//     the loss window (queue.Transport.Window).
//   - completer.go: ACKs, NAKs and READ/atomic responses against the send
//     queue, and all completion of send work (rxe_comp.c); qpstate.go
//     the error state and the flush of the queues.
//   - timer.go: the retransmission timer, retry, go-back-N.
//   - recovery.go: READ responses placed past a hole, holes asked again;
//     ooo.go: request packets held past a hole (docs/recovery.md).
//   - responder.go: requests from the peer (rxe_resp.c); replies.go the
//     responses it queues, in order; pacing.go the pace of READ responses.
//   - memory.go: regions and windows as requests use them (lookups,
//     binds, invalidation); ud.go, mcast.go datagrams; srq.go.
//   - shared.go: work requests and completions in rings shared with a
//     daemon's clients; fastpath.go idle RC responders shared with the
//     XDP program's fast path (docs/fastpath.md).
//
// Below it, what the engine holds but is not the engine, one job to a
// package, each called statically (no interface call, no allocation per
// packet): port, the configuration the NIC gives it (Config, Clock,
// Recovery, FastPath); tables, the device's object tables (Objects);
// idle, whether an idle engine spins or sleeps (Spinner); handoff, the
// inbox of frames another engine received for this one's QPs (Inbox).
//
// internal/transport moved these here from its own files with
// internal/tools/movedecl (test/layout/split/engine.sh, issue 31), and
// parts.sh moved the packages below out of these files.
package engine
