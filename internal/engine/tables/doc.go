// Package tables holds a device's object tables (Objects): its QPs by
// number and in creation order, its memory regions and windows, its
// asynchronous events, its multicast groups and the QPs and SRQs that a
// daemon's clients post to through shared rings. internal/engine's
// engines read them under their own mutex; internal/transport's control
// operations change them with every engine's mutex held.
//
// internal/engine moved them here from its objects.go (and their methods
// from memory.go, replies.go, shared.go) with internal/tools/movedecl
// (test/layout/split/parts.sh, issue 31).
package tables
