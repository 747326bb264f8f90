// Package port is what a NIC's engines are configured with (Config): the
// port's addresses and MTU, the clock (Clock, which tests replace), the
// engine goroutine's polling, the pieces of selective recovery turned off
// (Recovery) and the responder state shared with the XDP program's fast
// path (FastPath, FastQP). verbs and internal/inproc fill it in;
// internal/engine reads it.
//
// internal/engine moved these here from its device.go, clock.go,
// recovery.go and fastpath.go with internal/tools/movedecl
// (test/layout/split/parts.sh, issue 31).
package port
