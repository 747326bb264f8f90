#!/bin/sh
# split.sh applies issue 31's splits of the packages over 4 000 lines, each
# a spec for internal/tools/movedecl, which moves declarations to a new
# package, exports every name the rest of the module uses and renames or
# qualifies every use:
#   queue.spec              internal/transport's queues (QP, CQ, SRQ), their
#                           work and each QP's transport state: internal/queue
#   bench.spec              bench's results, tables and plots: bench/report
#   interop-proc.spec       test/interop's process running: test/interop/proc
#   interop-integrity.spec  its data-integrity cell: test/interop/integrity
# It is a script, not a commit, so that it can be re-run on whatever those
# packages are when it is applied. Run from anywhere in a clean checkout;
# it stages the result and builds and vets it.
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
here=test/layout/split
for d in internal/queue bench/report test/interop/proc test/interop/integrity; do
	if [ -e "$d" ]; then
		echo "split: $d exists: the split is applied already" >&2
		exit 1
	fi
done
if [ -n "$(git status --porcelain)" ]; then
	echo "split: uncommitted changes; commit or stash them first" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A QP names the engine serving it by index (NIC.engineOf): code written
# since that change may still load the old pointer, in an engine's method
# (e.dev.engineOf) or the NIC's (d.engineOf).
python3 - internal/transport/*.go <<'PY'
import re, sys
for path in sys.argv[1:]:
    out, recv = [], None
    for line in open(path).read().split("\n"):
        m = re.match(r"func \((\w+) \*(engine|NIC)\)", line)
        if m:
            recv = m.group(1) + (".dev" if m.group(2) == "engine" else "")
        elif line.startswith("func "):
            recv = None
        if recv:
            line = re.sub(r"\b(\w+)\.eng\.Load\(\)", recv + r".engineOf(\1)", line)
        out.append(line)
    open(path, "w").write("\n".join(out))
PY

(cd internal/tools/movedecl && go build -o "$tmp/movedecl" .)
"$tmp/movedecl" "$here/queue.spec"
cp "$here/queue_doc.go.txt" internal/queue/doc.go
"$tmp/movedecl" "$here/bench.spec"
cp "$here/report_doc.go.txt" bench/report/doc.go
"$tmp/movedecl" "$here/interop-proc.spec"
cp "$here/proc_doc.go.txt" test/interop/proc/doc.go
"$tmp/movedecl" "$here/interop-integrity.spec"
cp "$here/integrity_doc.go.txt" test/interop/integrity/doc.go

# File comments that described what moved.
python3 - <<'PY'
fix = {
    "internal/transport/qpstate.go": (
        "// A QP's transport state (qpTransport), PSN arithmetic, and the state\n"
        "// changes the engine makes: Modify's effects, the error state and the\n"
        "// flush of the queues.\n",
        "// The state changes the engine makes to a QP, whose transport state is\n"
        "// queue.Transport: Modify's effects, the error state and the flush of\n"
        "// the queues.\n"),
    "internal/transport/dma.go": (
        "// Data movement between messages and memory, as rxe_mr.c's copy_data: a\n"
        "// region's spans, the gather into a frame being built and the scatter of a\n"
        "// received payload, and the batched copies to and from daemon clients'\n"
        "// memory.\n",
        "// Memory of another process as the provider interface names it; the\n"
        "// data movement between messages and memory is internal/queue's dma.go.\n"),
}
for path, (old, new) in fix.items():
    s = open(path).read()
    # movedecl has renamed qpTransport in comments already.
    old = old.replace("(qpTransport)", "(Transport)")
    if old in s:
        open(path, "w").write(s.replace(old, new))
    else:
        print("split: left the file comment of", path, "as it is")
PY

unformatted=$(gofmt -l internal verbs test bench cmd)
if [ -n "$unformatted" ]; then
	echo "split: not gofmt'd: $unformatted" >&2
	exit 1
fi
go build ./...
go vet ./internal/... ./verbs/ ./daemon/ ./rdmacm/ ./bench/... ./cmd/... ./test/...
git add -A
for d in internal/transport internal/queue bench bench/report test/interop test/interop/proc test/interop/integrity; do
	echo "split: $d: $(cat $(ls $d/*.go | grep -v _test.go) | wc -l) lines"
done
