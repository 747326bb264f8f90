// Package proc runs the interop harness's commands: with a timeout, in a
// process group that is killed whole, keeping the tail of their output
// (TailBuffer), in the background (Start), and quoting their arguments for
// the VMs' shell. The harness (package main) and its cells' packages
// share it.
//
// test/interop moved it here from its proc.go with internal/tools/movedecl
// (test/layout/split/split.sh, issue 31).
package proc
