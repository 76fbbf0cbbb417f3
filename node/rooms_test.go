package node

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The rooms' file arrows. For each room package (type-checked), a file A
// has an arrow to file B when A uses something B declares at package
// level — a function, type, variable or constant, or a method or struct
// field of a type B declares — or declares a method on a type of B. An
// arrow goes back up when its files are in one cycle: no order of the
// files puts every file above the helpers it uses. The test lists each
// room's arrows and cycles (go test -run TestRoomFileArrows -v ./node/)
// and fails on a cycle in any of them, node itself included.

// roomDirs are the room packages, relative to node/.
var roomDirs = []string{".", "worker", "shards", "status", "eval", "records", "job", "join", "datadir", "trainer", "memlimit", "trust"}

// acyclicRooms must keep an acyclic file graph: all of them.
var acyclicRooms = []string{".", "worker", "shards", "status", "eval", "records", "job", "join", "datadir", "trainer", "memlimit", "trust"}

type fileGraph struct {
	files  []string
	arrows map[string]map[string][]string // from → to → names
}

// fileArrows type-checks the non-test Go files of dir (imports from the
// build's export data, go list -export) and returns their arrows.
func fileArrows(t *testing.T, dir string) fileGraph {
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
	g := fileGraph{files: files, arrows: map[string]map[string][]string{}}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		if v, ok := obj.(*types.Var); ok && !v.IsField() {
			if obj.Parent() != pkg.Scope() {
				continue // a local variable
			}
		}
		if obj.Parent() != nil && obj.Parent() != pkg.Scope() {
			continue // declared in a function
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == to {
			continue
		}
		if g.arrows[from] == nil {
			g.arrows[from] = map[string][]string{}
		}
		if !slices.Contains(g.arrows[from][to], obj.Name()) {
			g.arrows[from][to] = append(g.arrows[from][to], obj.Name())
		}
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
		named, ok := recv.(*types.Named)
		if !ok {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(named.Obj().Pos()).Filename)
		if from != to {
			if g.arrows[from] == nil {
				g.arrows[from] = map[string][]string{}
			}
			if !slices.Contains(g.arrows[from][to], named.Obj().Name()) {
				g.arrows[from][to] = append(g.arrows[from][to], named.Obj().Name())
			}
		}
	}
	return g
}

// exportImporter imports dir's dependencies from the export data go list
// -export builds.
func exportImporter(t *testing.T, fset *token.FileSet, dir string) types.Importer {
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

// cycles returns the strongly connected components of more than one file.
func (g fileGraph) cycles() [][]string {
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
		for w := range g.arrows[v] {
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
	files := slices.Clone(g.files)
	sort.Strings(files)
	for _, f := range files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	return out
}

func TestRoomFileArrows(t *testing.T) {
	for _, dir := range roomDirs {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		g := fileArrows(t, dir)
		cyc := g.cycles()
		inCycle := map[string]int{}
		for i, c := range cyc {
			for _, f := range c {
				inCycle[f] = i + 1
			}
		}
		total, back := 0, 0
		var lines []string
		for _, from := range slices.Sorted(func(yield func(string) bool) {
			for f := range g.arrows {
				if !yield(f) {
					return
				}
			}
		}) {
			for _, to := range slices.Sorted(func(yield func(string) bool) {
				for f := range g.arrows[from] {
					if !yield(f) {
						return
					}
				}
			}) {
				total++
				mark := ""
				if inCycle[from] != 0 && inCycle[from] == inCycle[to] {
					back++
					mark = " (in a cycle)"
				}
				names := g.arrows[from][to]
				sort.Strings(names)
				lines = append(lines, fmt.Sprintf("  %s -> %s%s: %s", from, to, mark, strings.Join(names, ", ")))
			}
		}
		t.Logf("room node/%s: %d files, %d arrows, %d in cycles, cycles %v\n%s", dir, len(g.files), total, back, cyc, strings.Join(lines, "\n"))
		if slices.Contains(acyclicRooms, dir) && len(cyc) > 0 {
			t.Errorf("room node/%s: files in a cycle: %v", dir, cyc)
		}
	}
}
