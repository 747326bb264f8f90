// Package abi checks that xdproce's drop-in libraries (bin/lib) are the whole ABI of rdma-core 44's
// libibverbs.so.1, librdmacm.so.1, libmlx5.so.1 and libefa.so.1 as Debian 12 ships them, not the
// symbols one program imports: every symbol and version node is exported, every ELF of the Debian
// packages that link these libraries resolves against them with every symbol bound at load, and what
// xdproce does not implement fails as rdma-core fails it, never crashes.
package abi

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// debianLibDir holds Debian's rdma-core libraries (packages libibverbs1, librdmacm1,
// ibverbs-providers), the reference the tests compare against.
const debianLibDir = "/usr/lib/x86_64-linux-gnu"

// replaced are the libraries xdproce's replace, by soname.
func replaced() []string {
	return []string{"libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"}
}

// repoRoot is the module's root: tests run in their package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// providerLibs builds xdproce's libraries (make provider) and returns their directory.
func providerLibs(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	if out, err := exec.Command("make", "-C", root, "--no-print-directory", "provider").CombinedOutput(); err != nil {
		t.Fatalf("make provider: %v\n%s", err, out)
	}
	return filepath.Join(root, "bin", "lib")
}

// requireDebian fails (never skips: make test installs them with make deps-abi) unless the
// Debian packages the tests read are installed.
func requireDebian(t *testing.T) {
	t.Helper()
	need := []string{"/usr/bin/python3", "/usr/lib/python3/dist-packages/pyverbs", "/usr/bin/ucx_info", "/usr/bin/fi_info",
		"/usr/bin/mpirun", "/usr/bin/ib_write_bw"}
	for _, l := range replaced() {
		need = append(need, filepath.Join(debianLibDir, l))
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v (make deps-abi installs Debian's rdma-core, UCX, libfabric, pyverbs and Open MPI)", err)
		}
	}
}

// export is one defined dynamic symbol: its type (function or object), an object's size (a
// program's copy relocation takes that many bytes), and whether its version is the default one
// (name@@VERSION) or a hidden one (name@VERSION).
type export struct {
	typ    elf.SymType
	size   uint64
	hidden bool
}

// exports reads a shared object's defined dynamic symbols, keyed by "name@VERSION", and its
// version definitions, each with the node it inherits from ("" for none).
func exports(path string) (map[string]export, map[string]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: dynamic symbols: %w", path, err)
	}
	vers, err := f.DynamicVersions()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: version definitions: %w", path, err)
	}
	nodes := make(map[string]string)
	for _, v := range vers {
		if v.Flags&elf.VER_FLG_BASE != 0 {
			continue
		}
		parent := ""
		if len(v.Deps) > 0 {
			parent = v.Deps[0]
		}
		nodes[v.Name] = parent
	}
	out := make(map[string]export)
	for _, s := range syms {
		bind := elf.ST_BIND(s.Info)
		if s.Section == elf.SHN_UNDEF || (bind != elf.STB_GLOBAL && bind != elf.STB_WEAK) {
			continue
		}
		// A version node's own name is an absolute symbol of the node, not a symbol of the ABI.
		if s.Section == elf.SHN_ABS && s.Name == s.Version {
			continue
		}
		x := export{typ: elf.ST_TYPE(s.Info), hidden: s.HasVersion && s.VersionIndex.IsHidden()}
		if x.typ == elf.STT_OBJECT {
			x.size = s.Size
		}
		out[s.Name+"@"+s.Version] = x
	}
	return out, nodes, nil
}

// TestExportedSymbols compares the exported symbol tables of xdproce's libraries with Debian's:
// every symbol of rdma-core's, in the same version node, default or hidden as there, function or
// object as there; every version node, inheriting from the same node. A missing symbol is what
// made libuct_ib.so (mlx5dv_devx_*), libfabric (efadv_create_cq@EFA_1.2) and pyverbs' provider
// modules (efadv_create_driver_qp@EFA_1.0) fail to load. xdproce may export more.
func TestExportedSymbols(t *testing.T) {
	requireDebian(t)
	lib := providerLibs(t)
	for _, name := range replaced() {
		t.Run(name, func(t *testing.T) {
			want, wantNodes, err := exports(filepath.Join(debianLibDir, name))
			if err != nil {
				t.Fatal(err)
			}
			got, gotNodes, err := exports(filepath.Join(lib, name))
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 || len(wantNodes) == 0 {
				t.Fatalf("Debian's %s exports no versioned symbol: not rdma-core 44's", name)
			}
			var missing, wrong []string
			for _, k := range slices.Sorted(maps.Keys(want)) {
				w := want[k]
				g, ok := got[k]
				switch {
				case !ok:
					missing = append(missing, k)
				case g.hidden != w.hidden:
					wrong = append(wrong, fmt.Sprintf("%s: hidden %v, want %v", k, g.hidden, w.hidden))
				case g.typ != w.typ || g.size != w.size:
					wrong = append(wrong, fmt.Sprintf("%s: %v of %d bytes, want %v of %d", k, g.typ, g.size, w.typ, w.size))
				}
			}
			for _, n := range slices.Sorted(maps.Keys(wantNodes)) {
				parent, ok := gotNodes[n]
				switch {
				case !ok:
					missing = append(missing, "version node "+n)
				case parent != wantNodes[n]:
					wrong = append(wrong, fmt.Sprintf("version node %s inherits from %q, want %q", n, parent, wantNodes[n]))
				}
			}
			if len(missing) > 0 || len(wrong) > 0 {
				t.Fatalf("%s: %d of Debian's %d symbols and nodes missing:\n  %s\nwrong:\n  %s", name, len(missing),
					len(want)+len(wantNodes), strings.Join(missing, "\n  "), strings.Join(wrong, "\n  "))
			}
			t.Logf("%s: all %d symbols and %d version nodes of Debian's (xdproce exports %d symbols)", name,
				len(want), len(wantNodes), len(got))
		})
	}
}

// debianPackages lists the installed Debian packages that link rdma-core's libraries: those
// depending on libibverbs1, librdmacm1 or ibverbs-providers (rdma-core's own, perftest, qperf,
// pyverbs, UCX, libfabric, Open MPI's library), and those depending on these (ucx-utils,
// libfabric-bin, openmpi-bin, ...), whose programs reach the libraries through them.
func debianPackages(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Depends}\n").Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-query: %w", err)
	}
	type pkg struct{ name, deps string }
	var all []pkg
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) == 3 && strings.HasPrefix(f[0], "ii") {
			all = append(all, pkg{f[1], f[2]})
		}
	}
	dependsOn := func(deps string, names []string) bool {
		for d := range strings.SplitSeq(deps, ",") {
			for alt := range strings.SplitSeq(d, "|") {
				n, _, _ := strings.Cut(strings.TrimSpace(alt), " ")
				n, _, _ = strings.Cut(n, ":")
				if slices.Contains(names, n) {
					return true
				}
			}
		}
		return false
	}
	roots := []string{"libibverbs1", "librdmacm1", "ibverbs-providers"}
	var first []string
	for _, p := range all {
		if slices.Contains(roots, p.name) || dependsOn(p.deps, roots) {
			first = append(first, p.name)
		}
	}
	set := slices.Clone(first)
	for _, p := range all {
		if !slices.Contains(set, p.name) && dependsOn(p.deps, first) {
			set = append(set, p.name)
		}
	}
	slices.Sort(set)
	return set, nil
}

// debianELFs returns the ELF files (programs and shared objects) of the packages.
func debianELFs(ctx context.Context, pkgs []string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "dpkg", append([]string{"-L"}, pkgs...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg -L: %w", err)
	}
	var files []string
	for p := range strings.SplitSeq(string(out), "\n") {
		if !strings.HasPrefix(p, "/usr/") || strings.HasPrefix(p, "/usr/lib/debug/") || slices.Contains(files, p) {
			continue
		}
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		f.Close()
		files = append(files, p)
	}
	slices.Sort(files)
	return files, nil
}

// resolution is what the dynamic loader reports for one ELF file with every symbol bound (ldd -r):
// where each replaced library came from, and its problems (undefined symbols, missing versions or
// libraries), each a line of its report.
type resolution struct {
	from     map[string]string
	problems []string
}

// resolve runs ldd -r on file, with libDir first in the search path when it is not "".
func resolve(ctx context.Context, file, libDir string) (resolution, error) {
	cmd := exec.CommandContext(ctx, "ldd", "-r", file)
	cmd.Env = os.Environ()
	if libDir != "" {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+libDir)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// ldd exits non-zero for unresolved symbols, and for an object it cannot trace; the report says which.
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return resolution{}, fmt.Errorf("ldd -r %s: %w", file, err)
	}
	r := resolution{from: make(map[string]string)}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, path, ok := strings.Cut(line, " => "); ok && slices.Contains(replaced(), name) {
			path, _, _ = strings.Cut(path, " (")
			r.from[name] = path
		}
		if strings.Contains(line, "undefined symbol") || strings.Contains(line, "not found") ||
			strings.Contains(line, "not defined") || strings.Contains(line, "version `") {
			r.problems = append(r.problems, line)
		}
	}
	return r, sc.Err()
}

// TestDebianELFsResolve binds every symbol (ldd -r, as LD_BIND_NOW does) of every ELF of the
// Debian packages that link rdma-core's libraries, on xdproce's libraries: none may have a
// problem it does not have on Debian's (Python's extension modules, for one, leave Python's own
// symbols to the interpreter on both).
func TestDebianELFsResolve(t *testing.T) {
	requireDebian(t)
	lib := providerLibs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	pkgs, err := debianPackages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files, err := debianELFs(ctx, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ELF files in %d packages: %s", len(files), len(pkgs), strings.Join(pkgs, " "))
	checked := 0
	for _, file := range files {
		base, err := resolve(ctx, file, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(base.from) == 0 {
			continue // links none of the replaced libraries
		}
		ours, err := resolve(ctx, file, lib)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, name := range needed(t, file) {
			if got := ours.from[name]; filepath.Dir(got) != lib {
				t.Errorf("%s: %s came from %q, not xdproce's %s", file, name, got, lib)
			}
		}
		for _, p := range ours.problems {
			if !slices.Contains(base.problems, p) {
				t.Errorf("%s: %s", file, p)
			}
		}
	}
	if checked < 60 {
		t.Fatalf("checked %d ELF files that link rdma-core's libraries, want at least 60", checked)
	}
	t.Logf("%d ELF files that link rdma-core's libraries resolve on xdproce's", checked)
}

// TestDebianSharedObjectsLoad loads (dlopen RTLD_NOW, constructors run) every shared object of
// those packages that links rdma-core's libraries, each in a process of its own: rdma-core's
// providers, whose constructors register with libibverbs' private interface; UCX's libuct_ib,
// libfabric, Open MPI's verbs components, librspreload, rdma-core's libmlx4 and libmana. Each
// must load on xdproce's libraries wherever it loads on Debian's, and none may crash.
func TestDebianSharedObjectsLoad(t *testing.T) {
	requireDebian(t)
	lib := providerLibs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	pkgs, err := debianPackages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files, err := debianELFs(ctx, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, file := range files {
		// Python's extension modules need the interpreter: TestPyverbsImports imports them.
		if strings.Contains(filepath.Base(file), ".cpython-") || isProgram(t, file) {
			continue
		}
		r, err := resolve(ctx, file, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.from) > 0 {
			objs = append(objs, file)
		}
	}
	check := filepath.Join(t.TempDir(), "dlopen_check")
	if out, err := exec.CommandContext(ctx, "cc", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-o", check,
		filepath.Join(repoRoot(t), "provider", "test", "dlopen_check.c"), "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("cc dlopen_check.c: %v\n%s", err, out)
	}
	base := loadAll(ctx, t, check, "", objs)
	ours := loadAll(ctx, t, check, lib, objs)
	loaded := 0
	for _, o := range objs {
		switch {
		case ours[o] == "" && base[o] == "":
			loaded++
		case ours[o] != "" && base[o] == "":
			t.Errorf("%s: loads on Debian's libraries, not on xdproce's: %s", o, ours[o])
		case strings.Contains(ours[o], "signal"):
			t.Errorf("%s: %s", o, ours[o])
		default:
			t.Logf("%s: does not load on Debian's libraries either: %s", o, base[o])
		}
	}
	if loaded < 20 {
		t.Fatalf("%d of %d shared objects loaded, want at least 20", loaded, len(objs))
	}
	t.Logf("%d of %d shared objects that link rdma-core's libraries load on xdproce's", loaded, len(objs))
}

// needed lists the replaced libraries file names in its DT_NEEDED entries.
func needed(t *testing.T, file string) []string {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return slices.DeleteFunc(libs, func(l string) bool { return !slices.Contains(replaced(), l) })
}

// isProgram reports whether file is an executable (it names a program interpreter).
func isProgram(t *testing.T, file string) bool {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
}

// loadAll runs dlopen_check over objs with libDir first in the search path (when not ""), and
// returns each object's failure ("" when it loaded).
func loadAll(ctx context.Context, t *testing.T, check, libDir string, objs []string) map[string]string {
	t.Helper()
	cmd := exec.CommandContext(ctx, check, objs...)
	cmd.Env = os.Environ()
	if libDir != "" {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+libDir)
	}
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("dlopen_check: %v", err)
	}
	res := make(map[string]string)
	n := 0
	for line := range strings.SplitSeq(string(out), "\n") {
		if p, ok := strings.CutPrefix(line, "OK "); ok {
			res[p] = ""
			n++
		} else if rest, ok := strings.CutPrefix(line, "FAIL "); ok {
			p, reason, _ := strings.Cut(rest, ": ")
			res[p] = reason
			n++
		}
	}
	if n != len(objs) {
		t.Fatalf("dlopen_check (LD_LIBRARY_PATH=%q) reported %d of %d objects:\n%s", libDir, n, len(objs), out)
	}
	return res
}

// TestPyverbsImports imports every module of Debian's pyverbs (python3-pyverbs, rdma-core 44's),
// its mlx5 and efa provider modules included, with every symbol bound at load (LD_BIND_NOW=1) on
// xdproce's libraries, as rdma-core's test suite does before it runs a test.
func TestPyverbsImports(t *testing.T) {
	requireDebian(t)
	lib := providerLibs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Walk the files: pyverbs' providers directories are namespace packages, which pkgutil does not walk.
	const script = `
import importlib, os, pyverbs
root = pyverbs.__path__[0]
n = 0
for d, _, files in sorted(os.walk(root)):
    for f in sorted(files):
        if not (f.endswith(".py") or f.endswith(".so")) or f.startswith("__init__"):
            continue
        rel = os.path.relpath(os.path.join(d, f.split(".")[0]), os.path.dirname(root))
        name = rel.replace(os.sep, ".")
        try:
            importlib.import_module(name)
            n += 1
        except Exception as e:
            print("FAIL", name, e)
print(n, "imported")
`
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", script)
	cmd.Env = append(os.Environ(), "LD_BIND_NOW=1", "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("FAIL")) {
		t.Fatalf("pyverbs modules fail to import on xdproce's libraries:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^(\d+) imported$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("python3 did not finish:\n%s", out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 35 {
		t.Fatalf("imported %d pyverbs modules, want at least 35:\n%s", n, out)
	}
	t.Logf("pyverbs: %s", bytes.TrimSpace(out))
}

// TestStubsFail calls once each entry point xdproce's libraries export but do not implement
// (provider/test/stubs_check.c: libmlx5's and libefa's, libibverbs' private and 1.0 interfaces,
// the verbs of misc.c) and checks each fails as rdma-core fails it on a device that is not the
// library's: the errno, -1 or NULL with errno EOPNOTSUPP, false, or nothing done; never a crash.
func TestStubsFail(t *testing.T) {
	requireDebian(t)
	lib := providerLibs(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	check := filepath.Join(t.TempDir(), "stubs_check")
	if out, err := exec.CommandContext(ctx, "cc", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-o", check,
		filepath.Join(repoRoot(t), "provider", "test", "stubs_check.c"), "-libverbs", "-lmlx5", "-lefa").CombinedOutput(); err != nil {
		t.Fatalf("cc stubs_check.c: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, check)
	cmd.Env = append(os.Environ(), "LD_BIND_NOW=1", "LD_LIBRARY_PATH="+lib)
	out, err := cmd.CombinedOutput()
	t.Logf("stubs_check:\n%s", out)
	if err != nil {
		t.Fatalf("stubs_check: %v", err)
	}
	m := regexp.MustCompile(`(?m)^(\d+) checks, 0 failed$`).FindSubmatch(out)
	if m == nil {
		t.Fatal("stubs_check failed or did not finish")
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 200 {
		t.Fatalf("stubs_check ran %d checks, want at least 200", n)
	}
}
