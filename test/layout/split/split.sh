#!/bin/sh
# split.sh applies issue 31's split of internal/transport: the queues (QP,
# CQ, SRQ), their work and each QP's transport state move to
# internal/queue, with every name the rest of the module uses exported and
# every use renamed or qualified (internal/tools/movedecl, queue.spec).
# It is a script, not a commit, so that it can be re-run on whatever the
# engine's files are when it is applied. Run from anywhere in a clean
# checkout; it stages the result and builds and vets it.
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
here=test/layout/split
if [ -e internal/queue ]; then
	echo "split: internal/queue exists: the split is applied already" >&2
	exit 1
fi
if [ -n "$(git status --porcelain -- internal verbs test)" ]; then
	echo "split: uncommitted changes under internal, verbs or test; commit or stash them first" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A QP names the engine serving it by index (NIC.engineOf): code written
# since that change may still load the old pointer.
for f in internal/transport/*.go; do
	sed -i 's/\([A-Za-z_][A-Za-z0-9_]*\)\.eng\.Load()/e.dev.engineOf(\1)/g' "$f"
done

(cd internal/tools/movedecl && go build -o "$tmp/movedecl" .)
"$tmp/movedecl" "$here/queue.spec"
cp "$here/queue_doc.go.txt" internal/queue/doc.go

unformatted=$(gofmt -l internal verbs test)
if [ -n "$unformatted" ]; then
	echo "split: not gofmt'd: $unformatted" >&2
	exit 1
fi
go build ./...
go vet ./internal/... ./verbs/ ./daemon/ ./rdmacm/ ./test/layout/
git add -A internal verbs test
echo "split: applied and staged; internal/transport is now $(cat $(ls internal/transport/*.go | grep -v _test.go) | wc -l) lines, internal/queue $(cat $(ls internal/queue/*.go | grep -v _test.go) | wc -l)"
