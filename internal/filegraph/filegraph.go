// Package filegraph is test support: the file graph of one Go package and
// the check that it has no file-to-file arrow back up. A file A has an
// arrow to file B when A uses something B declares at package level — a
// function, type, variable or constant, or a method or struct field of a
// type B declares — or declares a method on a type of B. An arrow goes
// back up when its files are in one cycle: no order of the files puts
// every file above the helpers it uses. Tests only (no package's build
// may import it); it type-checks the package from the build's export data
// (go list -export), and skips where there is no go command.
package filegraph

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Graph is a package's non-test files and their arrows: from → to → the
// names from uses of to.
type Graph struct {
	Files  []string
	Arrows map[string]map[string][]string
}

// Arrow is one arrow, from file → to file.
type Arrow struct{ From, To string }

// Check logs the arrows of the package in dir, named label, and fails the
// test on a cycle among its files once the arrows allowed (each with its
// reason, logged) are left out.
func Check(t *testing.T, label, dir string, allowed map[Arrow]string) {
	t.Helper()
	g := Of(t, dir)
	for a, why := range allowed {
		if _, ok := g.Arrows[a.From][a.To]; !ok {
			t.Errorf("%s: allowed arrow %s -> %s is gone: take it off the list", label, a.From, a.To)
			continue
		}
		t.Logf("%s: %s -> %s allowed: %s", label, a.From, a.To, why)
		delete(g.Arrows[a.From], a.To)
	}
	cyc := g.Cycles()
	inCycle := map[string]int{}
	for i, c := range cyc {
		for _, f := range c {
			inCycle[f] = i + 1
		}
	}
	total, back := 0, 0
	var lines []string
	for _, from := range slices.Sorted(maps.Keys(g.Arrows)) {
		for _, to := range slices.Sorted(maps.Keys(g.Arrows[from])) {
			total++
			mark := ""
			if inCycle[from] != 0 && inCycle[from] == inCycle[to] {
				back++
				mark = " (in a cycle)"
			}
			names := g.Arrows[from][to]
			sort.Strings(names)
			lines = append(lines, fmt.Sprintf("  %s -> %s%s: %s", from, to, mark, strings.Join(names, ", ")))
		}
	}
	t.Logf("%s: %d files, %d arrows (%d allowed left out), %d in cycles, cycles %v\n%s", label, len(g.Files), total, len(allowed), back, cyc, strings.Join(lines, "\n"))
	if len(cyc) > 0 {
		t.Errorf("%s: files in a cycle: %v", label, cyc)
	}
}

// Of type-checks the non-test Go files of dir (imports from the build's
// export data, go list -export) and returns their arrows.
func Of(t testing.TB, dir string) Graph {
	t.Helper()
	fset := token.NewFileSet()
	names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var files []string
	var asts []*ast.File
	for _, p := range names {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(dir, filepath.Base(p)); err != nil || !ok {
			continue // another platform's file (a build constraint)
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Base(p))
		asts = append(asts, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: exportImporter(t, fset, dir)}
	pkg, err := conf.Check(dir, fset, asts, info)
	if err != nil {
		t.Fatal(err)
	}
	g := Graph{Files: files, Arrows: map[string]map[string][]string{}}
	add := func(from, to, name string) {
		if from == to {
			return
		}
		if g.Arrows[from] == nil {
			g.Arrows[from] = map[string][]string{}
		}
		if !slices.Contains(g.Arrows[from][to], name) {
			g.Arrows[from][to] = append(g.Arrows[from][to], name)
		}
	}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		if v, ok := obj.(*types.Var); ok && !v.IsField() && obj.Parent() != pkg.Scope() {
			continue // a local variable
		}
		if obj.Parent() != nil && obj.Parent() != pkg.Scope() {
			continue // declared in a function
		}
		add(filepath.Base(fset.Position(id.Pos()).Filename), filepath.Base(fset.Position(obj.Pos()).Filename), obj.Name())
	}
	// A method declared in one file on a type of another is an arrow too.
	for id, obj := range info.Defs {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Type().(*types.Signature).Recv() == nil {
			continue
		}
		recv := fn.Type().(*types.Signature).Recv().Type()
		if p, ok := recv.(*types.Pointer); ok {
			recv = p.Elem()
		}
		if named, ok := recv.(*types.Named); ok {
			add(filepath.Base(fset.Position(id.Pos()).Filename), filepath.Base(fset.Position(named.Obj().Pos()).Filename), named.Obj().Name())
		}
	}
	return g
}

// exportImporter imports dir's dependencies from the export data go list
// -export builds.
func exportImporter(t testing.TB, fset *token.FileSet, dir string) types.Importer {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", "./"+dir).Output()
	if err != nil {
		t.Skipf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
}

// Cycles returns the strongly connected components of more than one file.
func (g Graph) Cycles() [][]string {
	index, low := map[string]int{}, map[string]int{}
	on := map[string]bool{}
	var stack []string
	var out [][]string
	next := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		on[v] = true
		for w := range g.Arrows[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var c []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				c = append(c, w)
				if w == v {
					break
				}
			}
			if len(c) > 1 {
				sort.Strings(c)
				out = append(out, c)
			}
		}
	}
	files := slices.Clone(g.Files)
	sort.Strings(files)
	for _, f := range files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	return out
}
