// Package layout checks the shape of the source tree rather than its
// behaviour: that no package outgrows what one reader can hold (issue 31),
// and that the hooks the tests reach into the engines through are not
// linked into the shipped binary.
package layout

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// maxPackageLines bounds a package's non-test code, counted as `wc -l`
// of its non-test .go files (comments and blank lines included).
const maxPackageLines = 4000

// oversized are the packages known to exceed maxPackageLines, each with
// why it still does. The list may only shrink: a package over the bound
// that is not here fails, and so does one here that is back under it.
var oversized = map[string]string{
	// None: internal/transport's engine moved to internal/engine, and the
	// NIC with its control operations stayed (test/layout/split/engine.sh).
}

// moduleRoot is the repository's root, two levels above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// goCmd runs the go command in the module root and returns its output.
func goCmd(t *testing.T, ctx context.Context, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// packageSize is a package's non-test Go source: all lines, and the lines
// that are neither blank nor comment-only.
type packageSize struct {
	path        string // relative to the module
	lines, code int
}

// measure counts the non-test .go files in dir, whatever their build
// constraints (the measure `wc -l` takes).
func measure(dir string) (lines, code int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return 0, 0, fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, 0, fmt.Errorf("reading source: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines++
			s := strings.TrimSpace(sc.Text())
			if s != "" && !strings.HasPrefix(s, "//") {
				code++
			}
		}
		if err := sc.Err(); err != nil {
			return 0, 0, fmt.Errorf("reading %s: %w", f, err)
		}
	}
	return lines, code, nil
}

// TestPackageSizes fails when a package's non-test code exceeds
// maxPackageLines and it is not one of the known oversized packages, or
// when a known one is back under the bound (then strike it off the list).
// It logs every package's size, largest first.
func TestPackageSizes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := moduleRoot(t)
	out := goCmd(t, ctx, nil, "list", "-f", "{{.Dir}}", "./...")
	var sizes []packageSize
	for dir := range strings.FieldsSeq(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatalf("package dir %s: %v", dir, err)
		}
		lines, code, err := measure(dir)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, packageSize{path: filepath.ToSlash(rel), lines: lines, code: code})
	}
	if len(sizes) < 10 {
		t.Fatalf("go list found %d packages; expected the whole module", len(sizes))
	}
	slices.SortFunc(sizes, func(a, b packageSize) int { return b.lines - a.lines })
	for _, s := range sizes {
		t.Logf("%6d lines %6d code  %s", s.lines, s.code, s.path)
	}
	seen := map[string]bool{}
	for _, s := range sizes {
		seen[s.path] = true
		_, known := oversized[s.path]
		switch {
		case s.lines > maxPackageLines && !known:
			t.Errorf("%s has %d lines of non-test code, over %d: split it by concern", s.path, s.lines, maxPackageLines)
		case s.lines <= maxPackageLines && known:
			t.Errorf("%s has %d lines, under %d now: take it off the oversized list", s.path, s.lines, maxPackageLines)
		}
	}
	for p := range oversized {
		if !seen[p] {
			t.Errorf("oversized lists %s, which go list does not find", p)
		}
	}
}

// hookFiles are the files that declare hooks for the tests of package
// verbs: the engines' and the queues'.
var hookFiles = []string{"internal/transport/export.go", "internal/queue/export.go"}

// testHooks are the functions and methods hookFiles declare, as the
// linker names them.
func testHooks(t *testing.T) []string {
	t.Helper()
	var hooks []string
	for _, file := range hookFiles {
		hooks = append(hooks, fileHooks(t, file)...)
	}
	// The hooks of package memory that only export.go calls.
	hooks = append(hooks,
		"github.com/xdproce/xdproce/internal/memory.(*Table).PlaceMR",
		"github.com/xdproce/xdproce/internal/memory.(*Table).PlaceMW")
	if len(hooks) < 20 {
		t.Fatalf("found %d hooks in %v; expected the files' ~25", len(hooks), hookFiles)
	}
	return hooks
}

// fileHooks are the exported functions and methods of file, a path
// relative to the module.
func fileHooks(t *testing.T, file string) []string {
	t.Helper()
	pkg := "github.com/xdproce/xdproce/" + filepath.ToSlash(filepath.Dir(file))
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(moduleRoot(t), file), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parsing the test hooks: %v", err)
	}
	var hooks []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !fn.Name.IsExported() {
			continue
		}
		if fn.Recv == nil {
			hooks = append(hooks, pkg+"."+fn.Name.Name)
			continue
		}
		recv := fn.Recv.List[0].Type
		if star, ok := recv.(*ast.StarExpr); ok {
			hooks = append(hooks, fmt.Sprintf("%s.(*%s).%s", pkg, star.X.(*ast.Ident).Name, fn.Name.Name))
			continue
		}
		hooks = append(hooks, fmt.Sprintf("%s.%s.%s", pkg, recv.(*ast.Ident).Name, fn.Name.Name))
	}
	return hooks
}

// TestNoTestHooksInBinary builds the shipped command and fails if any of
// the engines' test hooks is linked into it: they exist for the tests
// only, so nothing the command runs may reach them.
func TestNoTestHooksInBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the xdproce command")
	}
	hooks := testHooks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "xdproce")
	// Without inlining, a hook the command reaches is a symbol of its own
	// (inlined, a one-line hook would leave none to find).
	goCmd(t, ctx, []string{"CGO_ENABLED=0"}, "build", "-gcflags=all=-l", "-o", bin, "./cmd/xdproce")
	syms := map[string]bool{}
	for line := range strings.Lines(string(goCmd(t, ctx, nil, "tool", "nm", bin))) {
		if f := strings.Fields(line); len(f) >= 3 {
			syms[f[len(f)-1]] = true
		}
	}
	if len(syms) < 1000 {
		t.Fatalf("go tool nm listed %d symbols; expected a whole binary", len(syms))
	}
	for _, h := range hooks {
		if syms[h] {
			t.Errorf("the xdproce binary links the test hook %s", h)
		}
	}
}
