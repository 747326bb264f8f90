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

for p in ${PARTS:-idle handoff tables port}; do
	if [ -e internal/engine/$p ]; then
		echo "parts: internal/engine/$p exists: moved already" >&2
		exit 1
	fi
	"$tmp/movedecl" "$here/$p.spec"
	cp "$here/${p}_doc.go.txt" internal/engine/$p/doc.go
done

# A new file starts with the file comment of the file its declarations
# came from; each says what it has now.
python3 - <<'PY'
import os, re
new = {
    "internal/engine/idle/spinner.go": "",
    "internal/engine/handoff/inbox.go": "",
    "internal/engine/tables/objects.go": "",
    "internal/engine/tables/memory.go": "",
    "internal/engine/tables/shared.go":
        "// The tables of QPs and SRQs whose work requests a daemon's clients post\n"
        "// to shared rings.\n",
    "internal/engine/tables/replies.go":
        "// Queued READ replies dropped with the region they read.\n",
    "internal/engine/tables/mcast.go": "",
    "internal/engine/port/config.go": "",
    "internal/engine/port/clock.go": "",
    "internal/engine/port/recovery.go": "",
    "internal/engine/port/fastpath.go": "",
}
for path, comment in new.items():
    if not os.path.exists(path):
        continue
    s = open(path).read()
    m = re.search(r"^package ", s, re.M)
    if not m or (s[:m.start()].strip() and not s.lstrip().startswith("//")):
        print("parts: left the file comment of", path, "as it is")
        continue
    open(path, "w").write((comment + "\n" if comment else "") + s[m.start():])
PY

# The fast path's design (a comment of no declaration, before FastPath)
# stays with the engine's fast path.
python3 - <<'PY'
import os, re
src, dst = "internal/engine/port/fastpath.go", "internal/engine/fastpath.go"
if os.path.exists(src):
    s = open(src).read()
    m = re.search(r"^// The XDP responder fast path.*?\n\n(?=// FastPath is)", s, re.M | re.S)
    if m:
        open(src, "w").write(s[:m.start()] + s[m.end():])
        d = open(dst).read()
        i = d.index("\n)\n\n") + len("\n)\n\n")
        open(dst, "w").write(d[:i] + m.group(0) + d[i:])
    else:
        print("parts: the fast path's comment is not where it was")
PY

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
