package verbs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestAPIHasNoModeBranches: the API's methods do not know which provider
// answers them. Only the constructors name one (NewMultiQueueDevice the
// in-process provider, Dial the daemon's client); every other function of
// the package (tests aside) reaches the device through its ops interfaces,
// never through a provider's package or by asking which provider it holds
// (a type assertion or switch on an ops value, or Attached).
func TestAPIHasNoModeBranches(t *testing.T) {
	constructors := map[string]bool{"NewMultiQueueDevice": true, "Dial": true}
	providers := map[string]bool{"inproc": true, "attached": true, "transport": true, "sharedring": true}
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || constructors[fn.Name.Name] {
				continue
			}
			checked++
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && providers[id.Name] {
						t.Errorf("%s: %s names the provider's package: %s.%s", fset.Position(n.Pos()), fn.Name.Name, id.Name, n.Sel.Name)
					}
				case *ast.CallExpr:
					// Only the API's own Attached asks which kind of provider answers.
					if s, ok := n.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Attached" && fn.Name.Name != "Attached" {
						t.Errorf("%s: %s branches on the provider's kind", fset.Position(n.Pos()), fn.Name.Name)
					}
				case *ast.TypeAssertExpr:
					if s, ok := n.X.(*ast.SelectorExpr); ok && s.Sel.Name == "ops" {
						t.Errorf("%s: %s asks which provider it holds", fset.Position(n.Pos()), fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	if checked < 50 {
		t.Fatalf("only %d functions checked: is the test in the API's package?", checked)
	}
}
