// Package transport is the in-process RNIC behind package verbs: the NIC,
// its object tables' control operations (creating, modifying, querying
// and destroying QPs, CQs and SRQs, registering memory, binding
// multicast groups, status and counters) and the engines that run the
// queues, which are package engine's. The queues themselves (QP, CQ, SRQ,
// their WQEs and each QP's transport state) are package queue's, with
// exported fields; a post reaches the engine serving its QP through
// queue.Device, which the NIC implements (NIC.Posted). Package verbs is
// the API: it validates what applications ask, and hands in-process
// devices' work to the provider internal/inproc, whose objects are mostly
// these packages'.
//
// A NIC holds the engine.Device its engines share in a named field, not
// embedded, so the engine's own methods (Run, LockAll, RingAll, EngineOf)
// are not the NIC's: it forwards only what its users need, and runs one
// engine goroutine per link (queue of the port). test/layout.TestNICSurface
// holds its exported methods to a list. A control operation (NIC.Do)
// runs with every engine's mutex held, so that it never races with a
// packet in flight; what it changes of a QP's transport state (Modify's
// effects, NIC.modify) it changes between two of the engine's steps.
//
// Files: nic.go the NIC, its life and its status; objects.go QP numbers
// and placement on an engine; qp.go, qpstate.go, cq.go, srq.go, mcast.go
// the control operations on the queues; memory.go protection domains,
// regions and windows; shared.go rings shared with a daemon's clients;
// loop.go Progress and a client's doorbell; status.go; export.go hooks
// for the tests of package verbs (test/layout checks that the xdproce
// command reaches none of them).
package transport
