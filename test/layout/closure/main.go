// Command closure measures how much of a package's non-test code a set of
// its files reaches: the top-level declarations their code names, and
// theirs in turn. For internal/transport with the engine's files as roots
// it is the least the engine's package can be without changing those
// files (issue 31):
//
//	go run ./test/layout/closure internal/transport engine.go,loop.go,requester.go,completer.go,timer.go,responder.go,replies.go,pacing.go,cwnd.go,ooo.go,recovery.go
//
// Names are matched by identifier, not by type (a method named like one
// the roots call is counted), so the figure errs high by a little.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// decl is a top-level declaration: its file, the names it declares, its
// lines (doc comment included) and the identifiers its code names.
type decl struct {
	file  string
	lines int
	refs  map[string]bool
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: closure DIR FILE,FILE,...")
		os.Exit(2)
	}
	if err := run(os.Args[1], strings.Split(os.Args[2], ",")); err != nil {
		fmt.Fprintln(os.Stderr, "closure:", err)
		os.Exit(1)
	}
}

func run(dir string, rootFiles []string) error {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	byName := map[string][]*decl{}
	var all []*decl
	fileLines := map[string]int{}
	for _, fn := range files {
		if strings.HasSuffix(fn, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, fn, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing: %w", err)
		}
		base := filepath.Base(fn)
		fileLines[base] = fset.File(f.Pos()).LineCount()
		for _, d := range f.Decls {
			names, doc := declared(d)
			if names == nil {
				continue
			}
			start := d.Pos()
			if doc != nil {
				start = doc.Pos()
			}
			dd := &decl{file: base, refs: map[string]bool{}}
			dd.lines = fset.Position(d.End()).Line - fset.Position(start).Line + 1
			ast.Inspect(d, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					dd.refs[id.Name] = true
				}
				return true
			})
			all = append(all, dd)
			for _, n := range names {
				byName[n] = append(byName[n], dd)
			}
		}
	}
	for _, r := range rootFiles {
		if _, ok := fileLines[r]; !ok {
			return fmt.Errorf("%s has no file %s", dir, r)
		}
	}
	in := map[*decl]bool{}
	var work []*decl
	for _, d := range all {
		if slices.Contains(rootFiles, d.file) {
			in[d] = true
			work = append(work, d)
		}
	}
	for len(work) > 0 {
		d := work[len(work)-1]
		work = work[:len(work)-1]
		for r := range d.refs {
			for _, t := range byName[r] {
				if !in[t] {
					in[t] = true
					work = append(work, t)
				}
			}
		}
	}
	reached := map[string]int{}
	for d := range in {
		reached[d.file] += d.lines
	}
	total, roots := 0, 0
	for _, f := range slices.Sorted(func(yield func(string) bool) {
		for f := range fileLines {
			if !yield(f) {
				return
			}
		}
	}) {
		n := reached[f]
		if slices.Contains(rootFiles, f) {
			n = fileLines[f] // a root counts whole: it cannot shrink
			roots += n
		}
		total += n
		fmt.Printf("%-16s %5d of %5d\n", f, n, fileLines[f])
	}
	fmt.Printf("roots %d lines; with what they reach %d lines (all files: %d)\n", roots, total, sum(fileLines))
	return nil
}

// declared returns the names a declaration declares and its doc comment;
// nil for imports.
func declared(d ast.Decl) ([]string, *ast.CommentGroup) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return []string{d.Name.Name}, d.Doc
	case *ast.GenDecl:
		if d.Tok == token.IMPORT {
			return nil, nil
		}
		var names []string
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				names = append(names, s.Name.Name)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					names = append(names, n.Name)
				}
			}
		}
		return names, d.Doc
	}
	return nil, nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
