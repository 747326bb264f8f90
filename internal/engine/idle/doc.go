// Package idle decides whether an engine with nothing to do spins or
// sleeps (Spinner): a state machine over the idle gaps the engine sees and
// the clock readings it takes at their ends, with no other state. The
// engine's goroutine (internal/engine, Device.Run) owns one per engine.
//
// internal/engine moved it here from its loop.go with
// internal/tools/movedecl (test/layout/split/parts.sh, issue 31).
package idle
