package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fixture copies testdata/mod into a temporary directory, writes spec
// there, and makes it the working directory.
func fixture(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "mod"))); err != nil {
		t.Fatalf("copying the fixture: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spec"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	return dir
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMoveExportsAndQualifies: a type moves with its methods, what the
// rest of the package uses of it is exported (its doc comment too) and
// qualified, a constant it names is pulled along, and the module still
// builds; a package outside that used nothing moved is untouched.
func TestMoveExportsAndQualifies(t *testing.T) {
	dir := fixture(t, `from example.com/m/a
to example.com/m/b
load ./...
move counter
`)
	s, err := readSpec("spec")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(s); err != nil {
		t.Fatalf("run: %v", err)
	}
	b := read(t, filepath.Join(dir, "b", "a.go"))
	for _, want := range []string{"package b", "type Counter struct", "N        int", "Seen     map[string]bool",
		"// Add counts w once.", "func (c *Counter) Add(w string)", `import "strings"`, "const minLen = 1"} {
		if !strings.Contains(b, want) {
			t.Errorf("b/a.go lacks %q:\n%s", want, b)
		}
	}
	a := read(t, filepath.Join(dir, "a", "a.go"))
	for _, want := range []string{`"example.com/m/b"`, "&b.Counter{Seen: map[string]bool{}}", "c.Add(w)", "c.N + bonus", "// the comment names LastWord too"} {
		if !strings.Contains(a, want) {
			t.Errorf("a/a.go lacks %q:\n%s", want, a)
		}
	}
	if strings.Contains(a, "type counter") {
		t.Errorf("a/a.go still declares counter:\n%s", a)
	}
	if got := read(t, filepath.Join(dir, "c", "c.go")); !strings.Contains(got, "a.Loud(s)") {
		t.Errorf("c/c.go changed:\n%s", got)
	}
	if out, err := exec.Command("go", "vet", "./...").CombinedOutput(); err != nil {
		t.Fatalf("the moved module does not vet: %v\n%s", err, out)
	}
}

// TestRefusesACycle: moved code that names what stays (a function of the
// old package the spec keeps) is refused, naming the reference, and no
// file is written.
func TestRefusesACycle(t *testing.T) {
	dir := fixture(t, `from example.com/m/a
to example.com/m/b
load ./...
move loudCount
keep Words Loud
`)
	before := read(t, filepath.Join(dir, "a", "a.go"))
	s, err := readSpec("spec")
	if err != nil {
		t.Fatal(err)
	}
	err = run(s)
	if err == nil || !strings.Contains(err.Error(), "names what stays") || !strings.Contains(err.Error(), "Words") {
		t.Fatalf("run: %v, want the moved code's reference to Words refused", err)
	}
	if after := read(t, filepath.Join(dir, "a", "a.go")); after != before {
		t.Errorf("a/a.go changed on a refused move")
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Errorf("b was created on a refused move: %v", err)
	}
}

// TestEmbeddedFieldFollowsItsType: a struct that stays embeds a type that
// moves; the field's name is the type's, so its selections and composite
// literal keys take the exported name, in moved structs too; the new file
// opens with the old one's file comment, and the module still builds.
func TestEmbeddedFieldFollowsItsType(t *testing.T) {
	dir := fixture(t, `from example.com/m/e
to example.com/m/e/inner
load ./...
move tally pair newPair
`)
	s, err := readSpec("spec")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(s); err != nil {
		t.Fatalf("run: %v", err)
	}
	e := read(t, filepath.Join(dir, "e", "e.go"))
	for _, want := range []string{"*inner.Tally", "Tally: &inner.Tally{}", "c.Tally.N + c.N + inner.NewPair().Other", "c.Bump()"} {
		if !strings.Contains(e, want) {
			t.Errorf("e/e.go lacks %q:\n%s", want, e)
		}
	}
	in := read(t, filepath.Join(dir, "e", "inner", "e.go"))
	for _, want := range []string{"// A counter and the tally it shares.\n\npackage inner\n", "&pair{Tally: &Tally{}}", "p.Tally.Bump()", "p.Other = p.Tally.N"} {
		if !strings.Contains(in, want) {
			t.Errorf("e/inner/e.go lacks %q:\n%s", want, in)
		}
	}
	if out, err := exec.Command("go", "build", "./...").CombinedOutput(); err != nil {
		t.Fatalf("the module does not build after the move: %v\n%s", err, out)
	}
}
