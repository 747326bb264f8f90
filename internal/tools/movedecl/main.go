// Command movedecl moves top-level declarations of a Go package into a
// package below it, mechanically: every identifier of the moved code that
// the rest of the module uses is exported (renamed at every use, fields and
// methods included), uses outside the new package are qualified with its
// name, imports are fixed and the files gofmt'd. It type-checks the whole
// module (tests too), so it follows a name wherever it is used, and it
// refuses a move whose code would still name something of the old package
// (an import cycle), listing what.
//
// It exists so that issue 31's split of internal/transport can be re-run on
// whatever the engine's files look like when it is applied
// (test/layout/split.sh); a spec file says what moves:
//
//	from github.com/xdproce/xdproce/internal/transport
//	to   github.com/xdproce/xdproce/internal/queue
//	load ./...
//	move sendWQE recvWQE          # types (with all their methods), funcs, consts, vars
//	testfile cwnd_test.go         # a test file that moves whole
//	name qpTransport Transport    # the exported name, where capitalising reads badly
//	name QP.typ Type              # a field or method: TYPE.name
//	file qpstate.go state.go      # where a source file's moved declarations go
//
// Run it from the module's root: go run ./internal/tools/movedecl SPEC
// (it is a module of its own, so the project does not depend on x/tools).
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/tools/go/ast/astutil"
	"golang.org/x/tools/go/packages"
)

type spec struct {
	from, to  string
	patterns  []string
	moves     map[string]bool
	testFiles map[string]bool
	names     map[string]string
	files     map[string]string
	exports   map[string]bool
	keep      map[string]bool
	moveFiles map[string]bool
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: movedecl SPEC (run from the module root)")
		os.Exit(2)
	}
	s, err := readSpec(os.Args[1])
	if err == nil {
		err = run(s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "movedecl:", err)
		os.Exit(1)
	}
}

func readSpec(path string) (*spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	defer f.Close()
	s := &spec{moves: map[string]bool{}, testFiles: map[string]bool{}, names: map[string]string{}, files: map[string]string{}, exports: map[string]bool{}, keep: map[string]bool{}, moveFiles: map[string]bool{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		w := strings.Fields(line)
		if len(w) == 0 {
			continue
		}
		switch {
		case w[0] == "from" && len(w) == 2:
			s.from = w[1]
		case w[0] == "to" && len(w) == 2:
			s.to = w[1]
		case w[0] == "load":
			s.patterns = append(s.patterns, w[1:]...)
		case w[0] == "move":
			for _, m := range w[1:] {
				s.moves[m] = true
			}
		case w[0] == "testfile":
			for _, m := range w[1:] {
				s.testFiles[m] = true
			}
		case w[0] == "name" && len(w) == 3:
			s.names[w[1]] = w[2]
		case w[0] == "movefile":
			for _, m := range w[1:] {
				s.moveFiles[m] = true
			}
		case w[0] == "keep":
			for _, m := range w[1:] {
				s.keep[m] = true
			}
		case w[0] == "export":
			for _, m := range w[1:] {
				s.exports[m] = true
			}
		case w[0] == "file" && len(w) == 3:
			s.files[w[1]] = w[2]
		default:
			return nil, fmt.Errorf("%s:%d: cannot read %q", path, n, sc.Text())
		}
	}
	if s.from == "" || s.to == "" {
		return nil, fmt.Errorf("%s: from and to are required", path)
	}
	return s, sc.Err()
}

// span is a byte range of a file; whole marks a test file that moves whole.
type span struct{ start, end int }

type edit struct {
	start, end int
	text       string
}

type mover struct {
	s      *spec
	fset   *token.FileSet
	toName string
	toDir  string
	// moved are the ranges of each file (absolute path) that move.
	moved map[string][]span
	whole map[string]bool
	// src holds each file's bytes.
	src   map[string][]byte
	edits map[string]map[int]edit
	// qualified are the files that now name the new package.
	qualified map[string]bool
	// imports are the packages moved code names through the old
	// package's aliases, by destination file.
	imports map[string][]string
	// words are the camel-case names exported, old to new ("" where two
	// names of the same spelling became different ones), which comments
	// of the rewritten files follow.
	words map[string]string
}

// aliasTarget is the named type of another package that obj, a type alias
// declared in package from, stands for; nil if it is not one.
func aliasTarget(obj types.Object, from string) *types.TypeName {
	tn, ok := obj.(*types.TypeName)
	if !ok || !tn.IsAlias() || tn.Pkg() == nil || tn.Pkg().Path() != from || !isPkgLevel(tn) {
		return nil
	}
	n, ok := types.Unalias(tn.Type()).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() == from {
		return nil
	}
	return n.Obj()
}

// destOf is the file of the new package that code of fn moves to.
func (m *mover) destOf(fn string) string {
	base := filepath.Base(fn)
	if d := m.s.files[base]; d != "" {
		base = d
	}
	return filepath.Join(m.toDir, base)
}

func run(s *spec) error {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
		packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports | packages.NeedModule, Tests: true}
	pkgs, err := packages.Load(cfg, s.patterns...)
	if err != nil {
		return fmt.Errorf("loading: %w", err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		return fmt.Errorf("the module does not type-check")
	}
	m := &mover{s: s, fset: pkgs[0].Fset, toName: filepath.Base(s.to), moved: map[string][]span{},
		whole: map[string]bool{}, src: map[string][]byte{}, edits: map[string]map[int]edit{}, qualified: map[string]bool{},
		imports: map[string][]string{}, words: map[string]string{}}
	var from []*packages.Package
	for _, p := range pkgs {
		if p.PkgPath == s.from {
			from = append(from, p)
		}
		if p.PkgPath == s.to {
			return fmt.Errorf("%s exists already", s.to)
		}
	}
	if len(from) == 0 {
		return fmt.Errorf("%s is not among the loaded packages", s.from)
	}
	mod := from[0].Module
	if mod == nil || !strings.HasPrefix(s.to, mod.Path+"/") {
		return fmt.Errorf("%s is not in the module of %s", s.to, s.from)
	}
	m.toDir = filepath.Join(mod.Dir, strings.TrimPrefix(s.to, mod.Path+"/"))
	// What the moved code names of the old package moves too, but for
	// the names the spec keeps (and whatever would drag them along): new
	// helpers written beside moved code follow it.
	var exported map[string]string
	for {
		if err := m.findMoved(from); err != nil {
			return err
		}
		var pull []string
		var err error
		exported, pull, err = m.exports(pkgs)
		if err == nil {
			break
		}
		if len(pull) == 0 {
			return err
		}
		for _, n := range pull {
			fmt.Println("movedecl: moving too", n)
			m.s.moves[n] = true
		}
		m.moved, m.whole = map[string][]span{}, map[string]bool{}
	}
	if err := m.rewrite(pkgs, exported); err != nil {
		return err
	}
	return m.write()
}

// findMoved marks the declarations the spec moves.
func (m *mover) findMoved(from []*packages.Package) error {
	found := map[string]bool{}
	seen := map[string]bool{}
	for _, p := range from {
		for _, f := range p.Syntax {
			fn := m.fset.File(f.Pos()).Name()
			if seen[fn] {
				continue
			}
			seen[fn] = true
			src, err := os.ReadFile(fn)
			if err != nil {
				return fmt.Errorf("reading %s: %w", fn, err)
			}
			m.src[fn] = src
			base := filepath.Base(fn)
			if m.s.testFiles[base] {
				m.whole[fn] = true
				m.moved[fn] = []span{{0, len(src)}}
				found[base] = true
				continue
			}
			if strings.HasSuffix(base, "_test.go") {
				continue
			}
			prevEnd := f.Name.End() // what came before the declaration
			for _, d := range f.Decls {
				var names []string
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv != nil {
						names = []string{recvName(d.Recv.List[0].Type)}
					} else {
						names = []string{d.Name.Name}
					}
				case *ast.GenDecl:
					for _, sp := range d.Specs {
						switch sp := sp.(type) {
						case *ast.TypeSpec:
							names = append(names, sp.Name.Name)
						case *ast.ValueSpec:
							for _, n := range sp.Names {
								names = append(names, n.Name)
							}
						}
					}
				}
				// A whole file's methods of a type that stays stay too.
				hit := m.s.moveFiles[base] && len(names) > 0 && !m.keptMethod(d)
				if hit {
					found[base] = true
				}
				for _, n := range names {
					if m.s.moves[n] {
						hit, found[n] = true, true
					}
				}
				if hit {
					sp := m.declSpan(src, d)
					// A comment standing alone right above the declaration
					// (a section's explanation) goes with it.
					for _, cg := range f.Comments {
						if cg.Pos() > prevEnd && m.fset.Position(cg.End()).Offset < sp.start && !isDoc(f, cg) {
							s := m.fset.Position(cg.Pos()).Offset
							for s > 0 && src[s-1] != '\n' {
								s--
							}
							sp.start = s
							break
						}
					}
					m.moved[fn] = append(m.moved[fn], sp)
				}
				prevEnd = d.End()
			}
		}
	}
	var missing []string
	for n := range m.s.moves {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	for n := range m.s.moveFiles {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	for n := range m.s.testFiles {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("not declared in %s: %s", m.s.from, strings.Join(missing, " "))
	}
	return nil
}

func recvName(t ast.Expr) string {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// declSpan is d's lines, its doc comment and trailing comment included.
func (m *mover) declSpan(src []byte, d ast.Decl) span {
	start := d.Pos()
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Doc != nil {
			start = d.Doc.Pos()
		}
	case *ast.GenDecl:
		if d.Doc != nil {
			start = d.Doc.Pos()
		}
	}
	s := m.fset.Position(start).Offset
	for s > 0 && src[s-1] != '\n' {
		s--
	}
	e := m.fset.Position(d.End()).Offset
	for e < len(src) && src[e] != '\n' {
		e++
	}
	if e < len(src) {
		e++
	}
	return span{s, e}
}

// inside reports whether pos lies in code that moves.
func (m *mover) inside(pos token.Pos) bool {
	p := m.fset.Position(pos)
	for _, sp := range m.moved[p.Filename] {
		if p.Offset >= sp.start && p.Offset < sp.end {
			return true
		}
	}
	return false
}

// movedObj reports whether obj is declared in code that moves (a
// package-level name, a field or method of a moved type, or a local of a
// moved function).
func (m *mover) movedObj(obj types.Object) bool {
	return obj != nil && obj.Pkg() != nil && obj.Pkg().Path() == m.s.from && obj.Pos().IsValid() && m.inside(obj.Pos())
}

func (m *mover) key(obj types.Object) string {
	p := m.fset.Position(obj.Pos())
	return fmt.Sprintf("%s:%d", p.Filename, p.Offset)
}

func isPkgLevel(obj types.Object) bool {
	return obj.Parent() != nil && obj.Parent() == obj.Pkg().Scope()
}

// nameKey is how the spec's name lines address obj: NAME or TYPE.NAME.
func nameKey(obj types.Object) string {
	switch o := obj.(type) {
	case *types.Func:
		if r := o.Signature().Recv(); r != nil {
			return typeName(r.Type()) + "." + o.Name()
		}
	case *types.Var:
		if o.IsField() {
			return fieldOwner(o) + "." + o.Name()
		}
	}
	return obj.Name()
}

func typeName(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Name()
	}
	return "?"
}

// fieldOwner names the named struct type that declares field v.
func fieldOwner(v *types.Var) string {
	scope := v.Pkg().Scope()
	for _, n := range scope.Names() {
		tn, ok := scope.Lookup(n).(*types.TypeName)
		if !ok {
			continue
		}
		if st, ok := tn.Type().Underlying().(*types.Struct); ok {
			for i := range st.NumFields() {
				if st.Field(i) == v {
					return n
				}
			}
		}
	}
	return "?"
}

// exports decides the new name of every moved name used outside the moved
// code, and checks that the moved code names nothing that stays.
func (m *mover) exports(pkgs []*packages.Package) (map[string]string, []string, error) {
	out := map[string]string{}
	var bad, pull []string
	pulled := map[string]bool{}
	badSeen := map[string]bool{}
	owners := map[string]map[string]string{} // type (or "") -> new name -> old key
	forEach(pkgs, func(p *packages.Package) {
		for id, obj := range p.TypesInfo.Defs {
			if f, ok := obj.(*types.Func); ok && m.movedObj(f) && f.Signature().Recv() != nil {
				if tn := recvTypeName(f); tn != nil && tn.Pkg() == f.Pkg() && !m.movedObj(tn) {
					msg := fmt.Sprintf("method %s.%s moves without its type", tn.Name(), id.Name)
					if !badSeen[msg] {
						badSeen[msg] = true
						bad = append(bad, msg)
					}
				}
			}
		}
		// Names the spec exports though only moved code uses them (the
		// types of exported fields).
		for id, obj := range p.TypesInfo.Defs {
			if obj != nil && m.movedObj(obj) && isPkgLevel(obj) && m.s.exports[id.Name] && !obj.Exported() {
				nn := m.s.names[id.Name]
				if nn == "" {
					nn = exportName(id.Name)
				}
				out[m.key(obj)] = nn
				m.word(id.Name, nn)
			}
		}
		for id, obj := range p.TypesInfo.Uses {
			if obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != m.s.from {
				continue
			}
			in := m.inside(id.Pos())
			if m.movedObj(obj) {
				if in || obj.Exported() {
					continue
				}
				if _, ok := obj.(*types.PkgName); ok {
					continue
				}
				k := m.key(obj)
				if _, ok := out[k]; ok {
					continue
				}
				nk := nameKey(obj)
				nn := m.s.names[nk]
				if nn == "" {
					nn = exportName(obj.Name())
				}
				out[k] = nn
				m.word(obj.Name(), nn)
				owner, _, _ := strings.Cut(nk, ".")
				if !strings.Contains(nk, ".") {
					owner = ""
				}
				if owners[owner] == nil {
					owners[owner] = map[string]string{}
				}
				owners[owner][nn] = nk
				continue
			}
			if in && !isUniverse(obj) {
				if _, ok := obj.(*types.PkgName); ok {
					continue
				}
				if aliasTarget(obj, m.s.from) != nil {
					continue // rewritten to what it aliases
				}
				where := m.fset.Position(id.Pos())
				msg := fmt.Sprintf("%s:%d: %s names %s, which stays", filepath.Base(where.Filename), where.Line, id.Name, nameKey(obj))
				if !badSeen[msg] {
					badSeen[msg] = true
					bad = append(bad, msg)
				}
				if n := obj.Name(); isPkgLevel(obj) && !m.s.keep[n] && !pulled[n] && !isTestFile(m.fset, obj.Pos()) {
					if _, ok := obj.(*types.PkgName); !ok {
						pulled[n] = true
						pull = append(pull, n)
					}
				}
			}
		}
	})
	if len(bad) > 0 && os.Getenv("MOVEDECL_FORCE") == "" {
		sort.Strings(bad)
		sort.Strings(pull)
		return nil, pull, fmt.Errorf("the moved code names what stays (an import cycle):\n\t%s", strings.Join(bad, "\n\t"))
	}
	// A new name must not collide with a name its type or package has.
	var clash []string
	for owner, names := range owners {
		for nn, nk := range names {
			if owner == "" {
				continue // the compiler tells a clash in the new package
			}
			if m.hasMember(pkgs, owner, nn) {
				clash = append(clash, fmt.Sprintf("%s -> %s collides with %s.%s", nk, nn, owner, nn))
			}
		}
	}
	if len(clash) > 0 {
		sort.Strings(clash)
		return nil, nil, fmt.Errorf("name collisions (add name lines):\n\t%s", strings.Join(clash, "\n\t"))
	}
	return out, nil, nil
}

func (m *mover) lookupFrom(pkgs []*packages.Package, name string) types.Object {
	for _, p := range pkgs {
		if p.PkgPath == m.s.from {
			if o := p.Types.Scope().Lookup(name); o != nil {
				return o
			}
		}
	}
	return nil
}

func (m *mover) hasMember(pkgs []*packages.Package, typ, name string) bool {
	tn, ok := m.lookupFrom(pkgs, typ).(*types.TypeName)
	if !ok {
		return false
	}
	obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(tn.Type()), true, tn.Pkg(), name)
	return obj != nil
}

func isUniverse(obj types.Object) bool { return obj.Parent() == types.Universe }

var initialisms = map[string]bool{"psn": true, "qp": true, "qpn": true, "sq": true, "rq": true, "cq": true,
	"srq": true, "mtu": true, "rto": true, "msn": true, "rnr": true, "nak": true, "ack": true, "id": true,
	"ip": true, "mac": true, "mr": true, "mw": true, "pd": true, "wr": true, "wc": true, "ud": true, "rc": true,
	"srtt": true, "rtt": true, "dma": true, "wqe": true, "ooo": true, "gid": true, "sip": true, "dip": true}

// exportName capitalises name, an initialism as a whole (sqBase: SQBase).
func exportName(name string) string {
	i := 0
	for i < len(name) && unicode.IsLower(rune(name[i])) {
		i++
	}
	if initialisms[name[:i]] {
		return strings.ToUpper(name[:i]) + name[i:]
	}
	r := []rune(name)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func (m *mover) add(fn string, e edit) {
	if m.edits[fn] == nil {
		m.edits[fn] = map[int]edit{}
	}
	m.edits[fn][e.start] = e
}

// rewrite records the renames and qualifications in every file.
func (m *mover) rewrite(pkgs []*packages.Package, exported map[string]string) error {
	forEach(pkgs, func(p *packages.Package) {
		// Selectors pkg.Name of a moved name become to.Name; a renamed
		// declaration's doc comment begins with its new name.
		sels := map[*ast.Ident]*ast.SelectorExpr{}
		docs := map[*ast.Ident]*ast.CommentGroup{}
		for _, f := range p.Syntax {
			ast.Inspect(f, func(n ast.Node) bool {
				switch d := n.(type) {
				case *ast.FuncDecl:
					docs[d.Name] = d.Doc
				case *ast.GenDecl:
					for _, sp := range d.Specs {
						doc := d.Doc
						switch sp := sp.(type) {
						case *ast.TypeSpec:
							if sp.Doc != nil || len(d.Specs) > 1 {
								doc = sp.Doc
							}
							docs[sp.Name] = doc
						case *ast.ValueSpec:
							if sp.Doc != nil || len(d.Specs) > 1 {
								doc = sp.Doc
							}
							if len(sp.Names) == 1 {
								docs[sp.Names[0]] = doc
							}
						}
					}
				case *ast.Field:
					if len(d.Names) == 1 {
						docs[d.Names[0]] = d.Doc
					}
				}
				if se, ok := n.(*ast.SelectorExpr); ok {
					if x, ok := se.X.(*ast.Ident); ok {
						if _, ok := p.TypesInfo.Uses[x].(*types.PkgName); ok {
							sels[se.Sel] = se
						}
					}
				}
				return true
			})
		}
		visit := func(id *ast.Ident, obj types.Object) {
			if t := aliasTarget(obj, m.s.from); t != nil && !m.movedObj(obj) && m.inside(id.Pos()) {
				pos := m.fset.Position(id.Pos())
				m.add(pos.Filename, edit{pos.Offset, pos.Offset + len(id.Name), t.Pkg().Name() + "." + t.Name()})
				d := m.destOf(pos.Filename)
				m.imports[d] = append(m.imports[d], t.Pkg().Path())
				return
			}
			if v, ok := obj.(*types.Var); ok && v.Embedded() {
				// A field embedding a moved type, in a struct that moves
				// or stays, is named after the type's new name: rename its
				// selections and composite literal keys (its declaration is
				// the type's use, renamed or qualified below).
				if tn := embeddedName(v); tn != nil && m.movedObj(tn) && p.TypesInfo.Uses[id] == obj {
					name := tn.Name()
					if nn, ok := exported[m.key(tn)]; ok {
						name = nn
					}
					if name != id.Name {
						pos := m.fset.Position(id.Pos())
						m.add(pos.Filename, edit{pos.Offset, pos.Offset + len(id.Name), name})
					}
				}
				return
			}
			if !m.movedObj(obj) {
				return
			}
			name := obj.Name()
			if nn, ok := exported[m.key(obj)]; ok {
				name = nn
			}
			pos := m.fset.Position(id.Pos())
			fn := pos.Filename
			if !isPkgLevel(obj) || m.inside(id.Pos()) {
				if name != id.Name {
					m.add(fn, edit{pos.Offset, pos.Offset + len(id.Name), name})
					if doc := docs[id]; doc != nil && strings.HasPrefix(doc.List[0].Text, "// "+id.Name+" ") {
						c := m.fset.Position(doc.List[0].Slash).Offset + 3
						m.add(fn, edit{c, c + len(id.Name), name})
					}
				}
				return
			}
			if se, ok := sels[id]; ok {
				s := m.fset.Position(se.Pos()).Offset
				m.add(fn, edit{s, pos.Offset + len(id.Name), m.toName + "." + name})
			} else {
				m.add(fn, edit{pos.Offset, pos.Offset + len(id.Name), m.toName + "." + name})
			}
			m.qualified[fn] = true
		}
		for id, obj := range p.TypesInfo.Uses {
			visit(id, obj)
		}
		for id, obj := range p.TypesInfo.Defs {
			if obj != nil {
				visit(id, obj)
			}
		}
		for _, f := range p.Syntax {
			fn := m.fset.File(f.Pos()).Name()
			if m.edits[fn] != nil || m.moved[fn] != nil {
				m.renameInComments(fn, f)
			}
			if m.src[fn] == nil {
				src, err := os.ReadFile(fn)
				if err == nil {
					m.src[fn] = src
				}
			}
		}
	})
	return nil
}

// embeddedName is the named type an embedded field v holds.
func embeddedName(v *types.Var) *types.TypeName {
	t := v.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj()
	}
	return nil
}

// apply rewrites src[s.start:s.end] with the file's edits.
func apply(src []byte, s span, edits []edit) []byte {
	var b bytes.Buffer
	at := s.start
	for _, e := range edits {
		if e.start < s.start || e.start >= s.end {
			continue
		}
		b.Write(src[at:e.start])
		b.WriteString(e.text)
		at = e.end
	}
	b.Write(src[at:s.end])
	return b.Bytes()
}

func (m *mover) write() error {
	dest := map[string]*bytes.Buffer{}
	destImports := map[string][]*ast.ImportSpec{}
	header := map[string]string{}
	var destOrder []string
	var names []string
	for fn := range m.edits {
		names = append(names, fn)
	}
	for fn := range m.moved {
		if m.edits[fn] == nil {
			names = append(names, fn)
		}
	}
	// A destination file begins with what came from the file of its own
	// name, then what other files send it.
	sort.SliceStable(names, func(i, j int) bool {
		own := func(fn string) bool { return m.s.files[filepath.Base(fn)] == "" }
		if own(names[i]) != own(names[j]) {
			return own(names[i])
		}
		return names[i] < names[j]
	})
	for _, fn := range names {
		src := m.src[fn]
		var edits []edit
		for _, e := range m.edits[fn] {
			edits = append(edits, e)
		}
		sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
		moved := m.moved[fn]
		sort.Slice(moved, func(i, j int) bool { return moved[i].start < moved[j].start })
		var kept bytes.Buffer
		at := 0
		base := filepath.Base(fn)
		db := m.s.files[base]
		if db == "" {
			db = base
		}
		dfn := filepath.Join(m.toDir, db)
		for _, sp := range moved {
			kept.Write(apply(src, span{at, sp.start}, edits))
			seg := apply(src, sp, edits)
			if dest[dfn] == nil {
				dest[dfn] = &bytes.Buffer{}
				destOrder = append(destOrder, dfn)
				// The new file opens with the file comment of the one
				// it is made from (a file that keeps some of its
				// declarations keeps it too).
				header[dfn] = fileComment(fn, src)
			}
			dest[dfn].Write(seg)
			dest[dfn].WriteString("\n")
			at = sp.end
		}
		kept.Write(apply(src, span{at, len(src)}, edits))
		if len(moved) > 0 {
			f, err := parser.ParseFile(token.NewFileSet(), fn, src, parser.ImportsOnly)
			if err != nil {
				return fmt.Errorf("parsing %s: %w", fn, err)
			}
			destImports[dfn] = append(destImports[dfn], f.Imports...)
		}
		if m.whole[fn] {
			if err := os.Remove(fn); err != nil {
				return fmt.Errorf("moving %s: %w", fn, err)
			}
			continue
		}
		if err := m.fix(fn, kept.Bytes(), nil, m.qualified[fn]); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(m.toDir, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", m.toDir, err)
	}
	for _, dfn := range destOrder {
		body := dest[dfn].Bytes()
		if bytes.HasPrefix(bytes.TrimSpace(body), []byte("package ")) || bytes.Contains(body, []byte("\npackage ")) {
			// A whole test file: only its package clause changes.
			body = replacePackage(body, m.toName)
		} else {
			body = append([]byte(header[dfn]+"package "+m.toName+"\n\n"), body...)
		}
		for _, path := range m.imports[dfn] {
			destImports[dfn] = append(destImports[dfn], &ast.ImportSpec{Path: &ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(path)}})
		}
		if err := m.fix(dfn, body, destImports[dfn], false); err != nil {
			return err
		}
	}
	return nil
}

// fileComment is the comment of the file fn above its package clause and
// apart from the package's doc comment, with the blank line after it, or
// "" if it has none.
func fileComment(fn string, src []byte) string {
	f, err := parser.ParseFile(token.NewFileSet(), fn, src, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, cg := range f.Comments {
		if cg.Pos() >= f.Package {
			break
		}
		if cg == f.Doc {
			continue
		}
		for _, c := range cg.List {
			b.WriteString(c.Text + "\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func replacePackage(src []byte, name string) []byte {
	lines := strings.SplitAfter(string(src), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "package ") {
			lines[i] = "package " + name + "\n"
			break
		}
	}
	return []byte(strings.Join(lines, ""))
}

// fix adds imports (the source file's, for moved code; the new package,
// where uses were qualified), drops unused ones, formats and writes fn,
// or removes it when no declaration is left.
func (m *mover) fix(fn string, src []byte, imports []*ast.ImportSpec, qualified bool) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, fn, src, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("parsing rewritten %s: %w\n%s", fn, err, src)
	}
	for _, is := range imports {
		path := strings.Trim(is.Path.Value, `"`)
		if is.Name != nil {
			astutil.AddNamedImport(fset, f, is.Name.Name, path)
		} else {
			astutil.AddImport(fset, f, path)
		}
	}
	if qualified {
		astutil.AddImport(fset, f, m.s.to)
	}
	for _, is := range slices.Clone(f.Imports) {
		path := strings.Trim(is.Path.Value, `"`)
		name := ""
		if is.Name != nil {
			name = is.Name.Name
		}
		if name == "_" || name == "." {
			continue
		}
		if !usesImport(f, is) {
			astutil.DeleteNamedImport(fset, f, name, path)
		}
	}
	ast.SortImports(fset, f)
	decls := 0
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			continue
		}
		decls++
	}
	if decls == 0 {
		if err := os.Remove(fn); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing %s: %w", fn, err)
		}
		fmt.Println("removed", fn)
		return nil
	}
	var b bytes.Buffer
	if err := format.Node(&b, fset, f); err != nil {
		return fmt.Errorf("printing %s: %w", fn, err)
	}
	out, err := format.Source(groupImports(b.Bytes()))
	if err != nil {
		return fmt.Errorf("formatting %s: %w", fn, err)
	}
	if err := os.WriteFile(fn, out, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", fn, err)
	}
	return nil
}

// usesImport reports whether f names the package is imports, by the name
// it is imported as (its path's last element unless renamed).
func usesImport(f *ast.File, is *ast.ImportSpec) bool {
	path := strings.Trim(is.Path.Value, `"`)
	name := filepath.Base(path)
	if is.Name != nil {
		name = is.Name.Name
	} else if strings.HasPrefix(name, "v") && strings.Count(path, "/") > 0 {
		// math/rand/v2 is imported as rand.
		if _, err := fmt.Sscanf(name, "v%d", new(int)); err == nil {
			name = filepath.Base(filepath.Dir(path))
		}
	}
	used := false
	ast.Inspect(f, func(n ast.Node) bool {
		if se, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := se.X.(*ast.Ident); ok && x.Name == name && x.Obj == nil {
				used = true
			}
		}
		return !used
	})
	return used
}

// forEach calls f for each package the patterns named (not their
// dependencies, which have no syntax).
func forEach(pkgs []*packages.Package, f func(*packages.Package)) {
	for _, p := range pkgs {
		if p.TypesInfo != nil {
			f(p)
		}
	}
}

func isTestFile(fset *token.FileSet, pos token.Pos) bool {
	return strings.HasSuffix(fset.Position(pos).Filename, "_test.go")
}

// keptMethod reports whether d is a method of a type the spec keeps.
func (m *mover) keptMethod(d ast.Decl) bool {
	fd, ok := d.(*ast.FuncDecl)
	return ok && fd.Recv != nil && m.s.keep[recvName(fd.Recv.List[0].Type)]
}

func recvTypeName(f *types.Func) *types.TypeName {
	t := f.Signature().Recv().Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj()
	}
	return nil
}

// word records that old, if camel-case, became new.
func (m *mover) word(old, new string) {
	if !camel.MatchString(old) {
		return
	}
	if prev, ok := m.words[old]; ok && prev != new {
		new = ""
	}
	m.words[old] = new
}

// camel matches a camel-case identifier that starts lower-case: a name
// distinctive enough that a comment naming it means it.
var camel = regexp.MustCompile(`\b[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b`)

// renameInComments makes f's comments name the exported names.
func (m *mover) renameInComments(fn string, f *ast.File) {
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			base := m.fset.Position(c.Slash).Offset
			for _, loc := range camel.FindAllStringIndex(c.Text, -1) {
				if nn := m.words[c.Text[loc[0]:loc[1]]]; nn != "" {
					m.add(fn, edit{base + loc[0], base + loc[1], nn})
				}
			}
		}
	}
}

// groupImports puts a file's standard-library imports in a group of their
// own before the others, as goimports does; src is gofmt'd Go.
func groupImports(src []byte) []byte {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ImportsOnly|parser.ParseComments)
	if err != nil || len(f.Imports) < 2 {
		return src
	}
	var decl *ast.GenDecl
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			if decl != nil || !g.Lparen.IsValid() {
				return src // several import declarations: leave them
			}
			decl = g
		}
	}
	start, end := fset.Position(decl.Pos()).Offset, fset.Position(decl.End()).Offset
	if strings.Contains(string(src[start:end]), "\n\n") {
		return src // grouped already
	}
	var std, other []string
	for _, is := range f.Imports {
		if is.Doc != nil || is.Comment != nil {
			return src
		}
		line := is.Path.Value
		if is.Name != nil {
			line = is.Name.Name + " " + line
		}
		path := strings.Trim(is.Path.Value, `"`)
		if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
			other = append(other, line)
		} else {
			std = append(std, line)
		}
	}
	var b strings.Builder
	b.WriteString("import (\n")
	for i, group := range [][]string{std, other} {
		if i == 1 && len(std) > 0 && len(other) > 0 {
			b.WriteString("\n")
		}
		for _, l := range group {
			b.WriteString("\t" + l + "\n")
		}
	}
	b.WriteString(")")
	return append(append(append([]byte{}, src[:start]...), b.String()...), src[end:]...)
}

// isDoc reports whether cg is the doc comment of one of f's declarations,
// or lies inside one.
func isDoc(f *ast.File, cg *ast.CommentGroup) bool {
	for _, d := range f.Decls {
		var doc *ast.CommentGroup
		switch d := d.(type) {
		case *ast.FuncDecl:
			doc = d.Doc
		case *ast.GenDecl:
			doc = d.Doc
		}
		if doc == cg || (cg.Pos() >= d.Pos() && cg.End() <= d.End()) {
			return true
		}
	}
	return false
}
