// Package verbs is xdproce's ibverbs-like API: devices, PDs, MRs, MWs, CQs,
// QPs, SRQs, address handles and asynchronous events, with Linux rxe's
// behaviour as the reference. It checks what applications ask, as
// libibverbs and the kernel's core do, and hands the work to the device's
// provider in one call, through the ops interfaces of internal/ibv, as
// libibverbs hands it to a provider through verbs_context_ops: an
// in-process RNIC (internal/inproc, over internal/transport's object
// tables and RC/UC/UD engine), or a daemon the device is attached to
// (Dial; internal/attached is its client).
//
// An in-process Device runs one engine goroutine per queue of its link;
// it talks to the network only through a link.Link (batches of Ethernet
// frames), so the transport runs over AF_XDP (Open) or in memory
// (link/memlink, with seeded loss, duplication, reordering and
// corruption) with an injectable Clock (internal/faketime in tests). The
// daemon's rings shared with its clients are internal/sharedring's.
//
// Choices where ibverbs leaves room, following rxe unless said otherwise:
//   - retry_cnt 7 and rnr_retry 7 both mean "retry forever", as rxe does.
//   - IPv4 ID is 0 on every packet (rxe hashes a non-zero one); DF is set,
//     TTL 64. The ICRC covers the ID, so captures are compared with it patched.
//   - MR.Dereg runs on the engine goroutine between two packets, so when it
//     returns nil no packet touches the memory again and later requests
//     naming its keys get a remote access error. It fails with EBUSY while
//     the region is in use: memory windows are bound to it, a send WR not
//     yet completed names its lkey, or a responder is in the middle of a
//     multi-packet SEND into it (rxe holds a reference for these). A peer's
//     multi-packet WRITE into it is revoked instead (the rest of it fails
//     with a remote access error), so a FIRST without a LAST cannot pin it.
//     Keys are index<<8 | a random byte, with rxe's index ranges for regions
//     and windows.
//   - RTS -> SQD drains the send queue: WRs already started finish (and are
//     retransmitted), none starts, and EventSQDrained follows the last
//     completion if EnSQDAsyncNotify is set; until then only ERR may leave
//     SQD, as rxe.
//   - A receive WR with a bad SGE is a malformed WQE (class A): it completes
//     with LOC_QP_OP_ERR and the requester gets REM_OP_ERR, as rxe.
//   - Memory windows are of type 1 (ibv_bind_mw: the PD's, bound again or
//     with length 0 unbound by later binds, never invalidated) and type 2
//     (bound to the QP that bound them), as rxe's. A BIND_MW or LOCAL_INV work request
//     runs when every WR before it has completed (rxe runs it as soon as the
//     requester reaches it; both complete in order). Every packet of a
//     multi-packet WRITE and of a READ's response checks its window again,
//     as rxe checks the rkey per packet: LOCAL_INV, SEND_WITH_INV, Dealloc
//     or a rebind between two of them ends the WRITE with a remote access
//     error and the READ's response unsent (its re-request is refused).
//   - A CQ overflow raises EventCQErr and moves the QP that overflowed it to
//     the error state with EventQPFatal, as does a request the responder
//     rejects. SRQ limits raise EventSRQLimitReached once, when a WQE taken
//     leaves fewer than the limit, then disarm (as rxe's responder).
//   - Every receive completion has WCWithGRH set, on RC/UC too, as rxe.
package verbs
