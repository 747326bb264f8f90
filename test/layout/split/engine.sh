#!/bin/sh
# engine.sh applies issue 31's last split, after split.sh's: internal/
# transport's engine moves to internal/engine (engine.spec, a spec for
# internal/tools/movedecl), and internal/transport keeps the NIC and its
# control operations, above the engine. It is a script, not a commit, so
# that it can be re-run on whatever the engine's files are when it is
# applied. It needs the preparatory refactor (the NIC embeds the device
# the engines share; Modify's effects, a QP's status and DeregMR's checks
# are the NIC's functions). Run from anywhere in a clean checkout; it
# stages the result and builds and vets it.
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
here=test/layout/split
if [ -e internal/engine ]; then
	echo "engine: internal/engine exists: the split is applied already" >&2
	exit 1
fi
if [ -n "$(git status --porcelain)" ]; then
	echo "engine: uncommitted changes; commit or stash them first" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd internal/tools/movedecl && go build -o "$tmp/movedecl" .)
"$tmp/movedecl" "$here/engine.spec"
cp "$here/engine_doc.go.txt" internal/engine/doc.go
cp "$here/transport_doc.go.txt" internal/transport/doc.go

# Files whose declarations went both ways keep their file comment on both
# sides: each side says what it has now.
python3 - <<'PY'
import re
new = {
    "internal/transport/loop.go":
        "// Ways into the engines' loops from outside them: Progress, for\n"
        "// applications that drive the engines themselves, and the watch of a\n"
        "// daemon's client's doorbell.\n",
    "internal/engine/loop.go":
        "// The engine goroutine's life: its doorbell, the list of QPs with new\n"
        "// posts and the run loop with its spin-then-sleep policy.\n",
    "internal/transport/mcast.go":
        "// Multicast groups as control operations: UD QPs attached to and\n"
        "// detached from groups, the port joining and leaving them, as\n"
        "// rxe_mcast.c does.\n",
    "internal/engine/mcast.go":
        "// Multicast datagrams: one to the multicast QPN is delivered to every QP\n"
        "// attached to the group its destination names, as rxe_rcv_mcast_pkt\n"
        "// does.\n",
    "internal/transport/memory.go":
        "// The device's memory (package memory: regions, windows, their keys and\n"
        "// protection domains) as control operations: protection domains,\n"
        "// registration and deregistration, windows allocated and freed.\n",
    "internal/engine/memory.go":
        "// The device's memory as the engines use it: key lookups, binds,\n"
        "// invalidations and window checks.\n",
    "internal/transport/objects.go":
        "// QPs by number, as control operations: their numbering, placement on\n"
        "// an engine and removal.\n",
    "internal/engine/objects.go":
        "// The device's object tables, shared by its engines.\n",
    "internal/transport/qpstate.go":
        "// Modify's effects on a QP's transport state (queue.Transport), made as\n"
        "// a control operation between two of its engine's steps.\n",
    "internal/engine/qpstate.go":
        "// The state changes the engine makes to a QP: the error state and the\n"
        "// flush of the queues.\n",
}
for path, comment in new.items():
    try:
        s = open(path).read()
    except FileNotFoundError:
        print("engine: no", path, "to give a file comment")
        continue
    m = re.search(r"^package ", s, re.M)
    if not m or (s[:m.start()].strip() and not s.lstrip().startswith("//")):
        print("engine: left the file comment of", path, "as it is")
        continue
    open(path, "w").write(comment + "\n" + s[m.start():])

# Package queue's doc names the engines' package.
path = "internal/queue/doc.go"
s = open(path).read()
for old, new_ in (("fields are exported because package transport's engines own them",
                   "fields are exported because package engine's engines own them"),
                  ("(see internal/transport's doc)", "(see internal/engine's doc)")):
    if old in s:
        s = s.replace(old, new_)
    else:
        print("engine: internal/queue/doc.go no longer says", repr(old))
open(path, "w").write(s)
PY

unformatted=$(gofmt -l internal verbs test bench cmd)
if [ -n "$unformatted" ]; then
	echo "engine: not gofmt'd: $unformatted" >&2
	exit 1
fi
go build ./...
go vet ./internal/... ./verbs/ ./daemon/ ./rdmacm/ ./bench/... ./cmd/... ./test/...
git add -A
for d in internal/transport internal/engine; do
	echo "engine: $d: $(cat $(ls $d/*.go | grep -v _test.go) | wc -l) lines"
done
