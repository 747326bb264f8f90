#!/bin/sh
# parts.sh moves out of internal/engine what is not the engine: state
# machines and tables of one job each, which the engine holds and calls
# statically (no interface, no allocation per packet). Each spec here is
# one package below internal/engine (internal/tools/movedecl). It is a
# script, not a commit, so that it can be re-run on whatever the engine's
# files are when it is applied. Run from anywhere in a clean checkout; it
# stages the result and builds and vets it.
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
here=test/layout/split
if [ -n "$(git status --porcelain)" ]; then
	echo "parts: uncommitted changes; commit or stash them first" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd internal/tools/movedecl && go build -o "$tmp/movedecl" .)

for p in ${PARTS:-idle handoff}; do
	if [ -e internal/engine/$p ]; then
		echo "parts: internal/engine/$p exists: moved already" >&2
		exit 1
	fi
	"$tmp/movedecl" "$here/$p.spec"
	cp "$here/${p}_doc.go.txt" internal/engine/$p/doc.go
done

unformatted=$(gofmt -l internal verbs test bench cmd)
if [ -n "$unformatted" ]; then
	echo "parts: not gofmt'd: $unformatted" >&2
	exit 1
fi
go build ./...
go vet ./internal/... ./verbs/ ./daemon/ ./bench/... ./cmd/... ./test/...
git add -A
for d in internal/engine internal/engine/*/; do
	d=${d%/}
	echo "parts: $d: $(cat $(ls $d/*.go | grep -v _test.go) | wc -l) lines"
done
