// Package integrity is the interop harness's data-integrity cell: xdproce
// (an in-process device in the harness's namespace) against verbs_peer.py
// on rxe in a VM, one RC QP each side, every RC operation in both
// directions with every byte checked against a model of both buffers
// (Cell.Run; test/interop/integrity.go says how the buffers are laid out
// and runs the cell). The peer is driven over a line protocol on the stdin
// and stdout of "rxe-peer exec" (StartPeerProc, PeerStream).
//
// test/interop moved it here from its integrity.go with
// internal/tools/movedecl (test/layout/split/split.sh, issue 31).
package integrity
