// Package handoff holds the frames one engine receives for another
// engine's QPs (Inbox) until that engine's next step: a bounded queue of
// reused buffers under a mutex, with an atomic flag so that an engine with
// nothing handed to it pays one load per step. internal/engine owns one
// inbox per engine.
//
// internal/engine moved it here from its handoff.go with
// internal/tools/movedecl (test/layout/split/parts.sh, issue 31).
package handoff
