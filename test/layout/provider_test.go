package layout

import (
	"context"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// providerLibraries are the C libraries of provider/, each as the
// directories its sources are compiled from (the Makefile's *_SRCS).
var providerLibraries = map[string][]string{
	"libibverbs.so.1": {"provider/verbs", "provider/common"},
	"librdmacm.so.1":  {"provider/rdmacm", "provider/common"},
}

// oneModule are the sets of a library's files allowed to call each other,
// each with why: one module split across files. The list may only shrink:
// files here that no longer call each other fail, as files that do and are
// not here.
var oneModule = map[string]string{
	"provider/rdmacm/rsocket.c provider/rdmacm/rsocket_io.c": "rsockets: one module in two files (rsocket.h " +
		"declares what they share): connections and the socket calls in rsocket.c, data and CM events in rsocket_io.c",
}

// TestProviderCallsOneWay checks that the files of each C library call one
// another one way only (issue 31: cma.c and event.c called each other). Each
// file is compiled alone; its global symbols say which functions it defines
// and which it calls in other files. A cycle between files (two or more
// calling each other, directly or round a loop) fails, naming the calls.
func TestProviderCallsOneWay(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no C compiler: %v", err)
		}
		t.Skipf("no C compiler (make deps-provider): %v", err)
	}
	if _, err := os.Stat("/usr/include/rdma/rdma_cma.h"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no rdma-core headers: %v", err)
		}
		t.Skipf("no rdma-core headers (make deps-provider): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := moduleRoot(t)
	seen := map[string]bool{}
	for _, lib := range slices.Sorted(maps.Keys(providerLibraries)) {
		calls := fileCalls(t, ctx, cc, root, providerLibraries[lib])
		for _, scc := range cycles(calls) {
			key := strings.Join(scc, " ")
			if _, ok := oneModule[key]; ok {
				seen[key] = true
				continue
			}
			var b strings.Builder
			for _, from := range scc {
				for _, to := range scc {
					if syms := calls[from][to]; len(syms) > 0 {
						fmt.Fprintf(&b, "\n\t%s -> %s: %s", from, to, strings.Join(syms, ", "))
					}
				}
			}
			t.Errorf("%s: %s call each other:%s", lib, strings.Join(scc, ", "), b.String())
		}
	}
	for key, why := range oneModule {
		if !seen[key] {
			t.Errorf("oneModule lists %q (%s), whose files no longer call each other: take it off", key, why)
		}
	}
}

// fileCalls compiles every .c file of dirs alone and returns, for each
// file, the files whose global symbols it references, with those symbols
// (sorted). Paths are relative to root.
func fileCalls(t *testing.T, ctx context.Context, cc, root string, dirs []string) map[string]map[string][]string {
	t.Helper()
	out := t.TempDir()
	defined := map[string]string{} // symbol -> the file defining it
	refs := map[string][]string{}  // file -> the symbols it leaves undefined
	for _, dir := range dirs {
		srcs, err := filepath.Glob(filepath.Join(root, dir, "*.c"))
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if len(srcs) == 0 {
			t.Fatalf("%s: no C files", dir)
		}
		for _, src := range srcs {
			rel, err := filepath.Rel(root, src)
			if err != nil {
				t.Fatalf("%s: %v", src, err)
			}
			obj := filepath.Join(out, strings.ReplaceAll(rel, "/", "_")+".o")
			// -O0: every call the source makes stays a call.
			cmd := exec.CommandContext(ctx, cc, "-std=gnu11", "-O0", "-fPIC", "-fvisibility=hidden", "-c", "-o", obj, src)
			cmd.Dir = root
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s -c %s: %v\n%s", cc, rel, err, msg)
			}
			def, undef, err := objectSymbols(obj)
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			for _, s := range def {
				if other, ok := defined[s]; ok {
					t.Fatalf("%s is defined by both %s and %s", s, other, rel)
				}
				defined[s] = rel
			}
			refs[rel] = undef
		}
	}
	calls := map[string]map[string][]string{}
	for from, syms := range refs {
		calls[from] = map[string][]string{}
		for _, s := range syms {
			if to, ok := defined[s]; ok && to != from {
				calls[from][to] = append(calls[from][to], s)
			}
		}
		for _, v := range calls[from] {
			slices.Sort(v)
		}
	}
	return calls
}

// objectSymbols reads an object file's global symbols: those it defines
// and those it references undefined.
func objectSymbols(path string) (def, undef []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open object: %w", err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, nil, fmt.Errorf("symbols of %s: %w", path, err)
	}
	for _, s := range syms {
		if b := elf.ST_BIND(s.Info); b != elf.STB_GLOBAL && b != elf.STB_WEAK {
			continue
		}
		if s.Section == elf.SHN_UNDEF {
			undef = append(undef, s.Name)
		} else {
			def = append(def, s.Name)
		}
	}
	return def, undef, nil
}

// cycles returns the strongly connected components of more than one file
// of the call graph (Tarjan's algorithm), each sorted, in sorted order.
func cycles(calls map[string]map[string][]string) [][]string {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(v string)
	visit = func(v string) {
		index[v] = len(index)
		low[v] = index[v]
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range slices.Sorted(maps.Keys(calls[v])) {
			if _, ok := index[w]; !ok {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var scc []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			scc = append(scc, w)
			if w == v {
				break
			}
		}
		if len(scc) > 1 {
			slices.Sort(scc)
			out = append(out, scc)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(calls)) {
		if _, ok := index[v]; !ok {
			visit(v)
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return out
}
