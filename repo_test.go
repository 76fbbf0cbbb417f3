package dsspmesh_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

const module = "dsspmesh"

// mayImport is the layering of docs/design.md#dependency-direction: the
// packages of this module each package may import directly (module-relative
// paths; "" is the module root). What a package may reach transitively is
// the closure of this table. A package missing from it fails the test, so a
// new package is placed in the layering when it is added.
var mayImport = map[string][]string{
	"":                        nil,
	"balance":                 nil,
	"clock":                   nil,
	"cudaops":                 nil,
	"cudaops/cuda":            {"cudaops"},
	"internal/boundedmsgpack": nil,
	"internal/faults":         nil,
	"internal/headless":       nil,
	"internal/python":         nil,
	"internal/testlogger":     nil,
	"internal/golden":         nil,
	"internal/filegraph":      nil,
	"internal/wait":           nil,
	"internal/pace":           nil,
	"internal/chart":          nil,
	"mesh":                    {"internal/boundedmsgpack", "internal/wait"},
	"modelfile":               {"cudaops"},
	"modelfile/modelfiletest": {"modelfile", "cudaops", "internal/python"},
	"raftstore":               {"mesh", "internal/wait"},
	"shardapi":                {"clock", "mesh"},
	"shard":                   {"balance", "clock", "mesh", "raftstore", "shardapi", "internal/boundedmsgpack", "internal/faults", "internal/pace", "internal/wait"},
	"node/job":                {"clock", "cudaops", "modelfile", "shardapi"},
	"node/records":            {"mesh", "shardapi"},
	"node/worker":             {"node/records", "clock", "cudaops", "mesh", "shardapi"},
	"node/shards":             {"node/records", "clock", "mesh", "shardapi", "internal/faults"},
	"node/status":             {"node/records", "node/job", "mesh", "shardapi", "internal/pace"},
	"node/eval":               {"node/records", "clock", "cudaops", "mesh", "modelfile", "shardapi"},
	"node/join":               {"mesh"},
	"node/trainer":            {"node/job", "node/records", "cudaops", "modelfile"},
	"node/datadir":            {"node/job", "mesh"},
	"node/memlimit":           {"shardapi"},
	"node/trust":              {"node/datadir", "node/records", "clock", "mesh", "shardapi", "internal/pace"},
	"node":                    {"node/job", "node/join", "node/trainer", "node/datadir", "node/memlimit", "node/trust", "node/eval", "node/status", "node/shards", "node/worker", "node/records", "clock", "cudaops", "modelfile", "mesh", "shardapi"},
	"node/assemble":           {"node", "shard", "shardapi", "raftstore", "mesh"},
	"nodeclient":              {"node/status", "node/trust", "modelfile"},
	"node/launch":             {"nodeclient", "node", "mesh", "internal/chart"},
	// The lab: benchmarks, the simulator, the link lab.
	"lab/sim":    {"clock", "balance"},
	"lab/netlab": {"node/launch"},
	"lab/bench":  {"lab/netlab", "node/launch", "nodeclient", "node/assemble", "node", "shardapi", "mesh", "modelfile", "cudaops", "clock", "internal/python", "internal/wait"},
	"lab/cli":    {"lab/bench", "lab/netlab", "lab/sim", "cmd/dssp/upcmd", "node/launch", "node", "balance", "clock"},
	// The lab's binary: the lab's commands and, for the nodes its
	// benchmarks start, the product's `dssp node`.
	"cmd/dssp-lab": {"cmd/dssp/nodecmd", "lab/cli"},
	// The product binary, and `dssp node`, what a node process runs: no
	// lab (TestNodeRunPathHasNoLab).
	"cmd/dssp/nodecmd": {"node/assemble", "node", "cudaops/cuda"},
	"cmd/dssp/upcmd":   {"node/launch", "node"},
	"cmd/dssp":         {"cmd/dssp/nodecmd", "cmd/dssp/upcmd", "nodeclient", "node", "modelfile", "mesh", "cudaops/cuda", "cudaops"},
	"test":             {"lab/netlab", "nodeclient", "node/launch", "node", "mesh", "shardapi", "raftstore", "modelfile", "clock", "internal/faults"},
}

// testSupport are packages for tests only: any package's tests may import
// them, no package's build may.
var testSupport = []string{"modelfile/modelfiletest", "internal/testlogger", "internal/headless", "internal/golden", "internal/filegraph"}

// xtestAssembles lets a package's external tests (package x_test) import
// the package that assembles it from real parts, and so that package's
// layer: node's in-process test runs node.Run on node/assemble's replicas.
var xtestAssembles = map[string]string{"node": "node/assemble"}

// forbidden lists, per package, the outside packages (path prefixes) it
// must not depend on, directly or not, in any build. "std" stands for every
// package outside the standard library.
var forbidden = map[string][]string{
	"balance": {"std"},
	"clock":   {"std"},
	"lab/sim": {"std"},
	// memberlist, quic-go and msgpack only: Raft sits above the mesh.
	"mesh": {"github.com/hashicorp/raft"},
	// A node is assembled from interfaces; raft is node/assemble's to wire.
	"node":          {"github.com/hashicorp/raft"},
	"node/eval":     {"github.com/hashicorp/raft"},
	"node/job":      {"github.com/hashicorp/raft"},
	"node/join":     {"github.com/hashicorp/raft"},
	"node/datadir":  {"github.com/hashicorp/raft"},
	"node/records":  {"github.com/hashicorp/raft"},
	"node/shards":   {"github.com/hashicorp/raft"},
	"node/status":   {"github.com/hashicorp/raft"},
	"node/worker":   {"github.com/hashicorp/raft"},
	"node/trainer":  {"github.com/hashicorp/raft"},
	"node/memlimit": {"github.com/hashicorp/raft"},
	"node/trust":    {"github.com/hashicorp/raft"},
	"shardapi":      {"github.com/hashicorp/raft"},
}

// defaultBuildForbidden may not be reached by any package without build
// tags: gorgonia.org/cu exits the process at init on a host without a GPU.
var defaultBuildForbidden = []string{"gorgonia.org/cu"}

// cgoAllowed are the only packages that may have cgo files (in any build).
var cgoAllowed = []string{"cudaops", "cudaops/cuda"}

// tagSets are the builds checked. Those marked optional need modules a
// default build never downloads (gorgonia.org/cu, netlib); when go list
// cannot load them the set is reported and skipped, not failed.
var tagSets = []struct {
	tags     string
	optional bool
}{
	{"", false},
	{"faultinject", false},
	{"chaos", false},
	{"shardlong", false},
	{"cuda openblas", true},
}

type listed struct {
	ImportPath   string
	Module       *struct{ Path string }
	Deps         []string
	Imports      []string
	TestImports  []string
	XTestImports []string
	CgoFiles     []string
	Error        *struct{ Err string }
	DepsErrors   []*struct{ Err string }
}

// goTool is the go command, or a skip where there is none.
func goTool(t *testing.T) string {
	t.Helper()
	g, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	return g
}

// goList runs go list -e with tags and flags (such as -deps, -test) over
// the whole module. The error is the first package go list could not load.
func goList(t *testing.T, tags string, flags ...string) ([]listed, error) {
	t.Helper()
	args := append([]string{"list", "-e", "-tags", tags,
		"-json=ImportPath,Module,Deps,Imports,TestImports,XTestImports,CgoFiles,Error,DepsErrors"}, flags...)
	cmd := exec.Command(goTool(t), append(args, "./...")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(err.Error() + ": " + stderr.String())
	}
	var pkgs []listed
	var failed error
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		if p.Error != nil && failed == nil {
			failed = errors.New(p.ImportPath + ": " + p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			if failed == nil {
				failed = errors.New(p.ImportPath + ": " + e.Err)
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, failed
}

// rel is p relative to the module ("" for the root), ok false outside it.
func rel(p string) (string, bool) {
	if p == module {
		return "", true
	}
	r, ok := strings.CutPrefix(p, module+"/")
	return r, ok
}

func isStd(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

// closure is every module package pkg may reach through mayImport.
func closure(pkg string) map[string]bool {
	seen := map[string]bool{}
	var visit func(string)
	visit = func(p string) {
		for _, q := range mayImport[p] {
			if !seen[q] {
				seen[q] = true
				visit(q)
			}
		}
	}
	visit(pkg)
	return seen
}

func TestDependencyDirection(t *testing.T) {
	unknown := map[string]bool{}
	for _, ts := range tagSets {
		pkgs, err := goList(t, ts.tags)
		if err != nil {
			if ts.optional {
				t.Logf("tags %q not checked: %v", ts.tags, err)
				continue
			}
			t.Fatalf("go list -tags %q: %v", ts.tags, err)
		}
		for _, p := range pkgs {
			pkg, ok := rel(p.ImportPath)
			if !ok {
				continue
			}
			if _, ok := mayImport[pkg]; !ok {
				if !unknown[pkg] {
					t.Errorf("%s is not in the layering table of repo_test.go: add it there and to docs/design.md#dependency-direction", p.ImportPath)
				}
				unknown[pkg] = true
				continue
			}
			allowed := closure(pkg)
			check := func(what string, deps []string) {
				for _, d := range deps {
					dr, internal := rel(d)
					switch {
					case internal && dr != pkg && !allowed[dr]:
						t.Errorf("tags %q: %s %s %s, which its layer may not reach (may import: %v)", ts.tags, p.ImportPath, what, d, mayImport[pkg])
					case !internal && slices.Contains(forbidden[pkg], "std") && !isStd(d):
						t.Errorf("tags %q: %s %s %s; it may use the standard library only", ts.tags, p.ImportPath, what, d)
					case !internal:
						for _, f := range forbidden[pkg] {
							if d == f || strings.HasPrefix(d, f+"/") {
								t.Errorf("tags %q: %s %s %s, which it must not", ts.tags, p.ImportPath, what, d)
							}
						}
					}
					if ts.tags == "" && slices.ContainsFunc(defaultBuildForbidden, func(f string) bool { return d == f || strings.HasPrefix(d, f+"/") }) {
						t.Errorf("the default build of %s depends on %s", p.ImportPath, d)
					}
				}
			}
			check("depends on", p.Deps)
			for _, d := range p.Deps {
				if dr, _ := rel(d); slices.Contains(testSupport, dr) {
					t.Errorf("tags %q: %s depends on %s, which is for tests only", ts.tags, p.ImportPath, d)
				}
			}
			for _, sp := range testSupport {
				allowed[sp] = true
			}
			check("imports in its tests", p.TestImports)
			if a, ok := xtestAssembles[pkg]; ok {
				allowed[a] = true
				for q := range closure(a) {
					allowed[q] = true
				}
			}
			check("imports in its external tests", p.XTestImports)
			if len(p.CgoFiles) > 0 && !slices.Contains(cgoAllowed, pkg) {
				t.Errorf("tags %q: %s uses cgo (%v); only %v may", ts.tags, p.ImportPath, p.CgoFiles, cgoAllowed)
			}
		}
	}
}

// TestDesignNamesEveryPackage keeps the package map of docs/design.md in
// step with the layering table (and so with the packages that exist).
func TestDesignNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range mayImport {
		if pkg != "" && !bytes.Contains(doc, []byte("`"+pkg+"/`")) {
			t.Errorf("docs/design.md does not name package `%s/`", pkg)
		}
	}
}

// outside are texts that point at files outside the repository (the design
// brief the project started from lived beside it). Built by concatenation
// so this file does not match itself.
var outside = []string{".." + "/shared", "shared" + "/DESIGN", "DESIGN" + ".md"}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docRef  = regexp.MustCompile(`\b((?:docs/)?[\w./-]+\.md)(#[\w-]+)?`)
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
	// repoPath is a file path named in text ("shard/fsm.go"), tickedDir a
	// folder named in Markdown code ("`clock/sim/`").
	repoPath  = regexp.MustCompile(`(?:^|[^\w./-])([a-z][\w-]*/[\w./-]*\.(?:go|md))\b`)
	tickedDir = regexp.MustCompile("`([a-z][\\w-]*/(?:[\\w.-]+/)*)`")
)

// repoFiles are the .go and .md files of the repository, relative to its
// root (this package's folder), hidden folders and ignored outputs skipped.
func repoFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "report" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md") {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllSubmatch(fence.ReplaceAll(md, nil), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(string(m[1])) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		for i := 1; out[a]; i++ {
			a = b.String() + "-" + string(rune('0'+i))
		}
		out[a] = true
	}
	return out
}

// TestDocsReferOnlyInsideTheRepository: no file names a place outside the
// repository; every relative Markdown link resolves to a file in it; every
// "docs/….md#anchor" a comment or doc names exists with that heading; and
// every path into the module's folders that a doc or comment names (a file
// moved or deleted since) exists.
func TestDocsReferOnlyInsideTheRepository(t *testing.T) {
	files := repoFiles(t)
	texts := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = b
	}
	anchorsOf := map[string]map[string]bool{}
	// A Markdown link is relative to its file; a path named in text or a
	// comment ("docs/design.md#packages") is relative to the repository.
	checkRef := func(from string, line int, ref string, link bool) {
		file, anchor, _ := strings.Cut(ref, "#")
		switch {
		case file == "":
			file = from
		case link:
			file = path.Join(path.Dir(from), file)
		}
		if strings.HasPrefix(file, "../") || path.IsAbs(file) {
			t.Errorf("%s:%d: %q points outside the repository", from, line, ref)
			return
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s:%d: %q: no file %s in the repository", from, line, ref, file)
			return
		}
		if anchor == "" || !strings.HasSuffix(file, ".md") {
			return
		}
		if anchorsOf[file] == nil {
			anchorsOf[file] = anchors(texts[file])
		}
		if !anchorsOf[file][anchor] {
			t.Errorf("%s:%d: %q: %s has no heading with anchor #%s", from, line, ref, file, anchor)
		}
	}
	// A path into one of the module's top-level folders must exist.
	tops := map[string]bool{"docs": true}
	for pkg := range mayImport {
		if pkg != "" {
			top, _, _ := strings.Cut(pkg, "/")
			tops[top] = true
		}
	}
	checkPath := func(from string, line int, p string) {
		top, _, _ := strings.Cut(p, "/")
		if !tops[top] {
			return
		}
		if _, err := os.Stat(strings.TrimSuffix(p, "/")); err != nil {
			t.Errorf("%s:%d: names %s, which is not in the repository", from, line, p)
		}
	}
	for _, f := range files {
		for i, line := range strings.Split(string(texts[f]), "\n") {
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				checkPath(f, i+1, m[1])
			}
			if strings.HasSuffix(f, ".md") {
				for _, m := range tickedDir.FindAllStringSubmatch(line, -1) {
					checkPath(f, i+1, m[1])
				}
			}
			for _, o := range outside {
				if strings.Contains(line, o) {
					t.Errorf("%s:%d: refers to a file outside the repository (%q): %s", f, i+1, o, strings.TrimSpace(line))
				}
			}
			if strings.HasSuffix(f, ".md") {
				for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
					if ref := m[1]; !strings.Contains(ref, "://") && !strings.HasPrefix(ref, "mailto:") {
						checkRef(f, i+1, ref, true)
					}
				}
			}
			for _, m := range docRef.FindAllStringSubmatch(line, -1) {
				if strings.HasPrefix(m[1], "docs/") && !strings.Contains(line, "]("+m[1]) {
					checkRef(f, i+1, m[1]+m[2], false)
				}
			}
		}
	}
}

// TestGoModMarksDirectDependencies: a module this module's packages (or
// their tests, in any build checked) import is required without
// "// indirect", and every other requirement is marked indirect — what go
// mod tidy writes, checked without the network.
func TestGoModMarksDirectDependencies(t *testing.T) {
	out, err := exec.Command(goTool(t), "mod", "edit", "-json").Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	direct := map[string]bool{}
	complete := true // every build listed: an unused direct requirement is then an error
	for _, ts := range tagSets {
		pkgs, err := goList(t, ts.tags, "-deps", "-test")
		if err != nil {
			if ts.optional {
				t.Logf("tags %q not checked: %v", ts.tags, err)
				complete = false
				continue
			}
			t.Fatalf("go list -tags %q: %v", ts.tags, err)
		}
		moduleOf := map[string]string{}
		for _, p := range pkgs {
			if p.Module != nil {
				moduleOf[p.ImportPath] = p.Module.Path
			}
		}
		for _, p := range pkgs {
			if p.Module == nil || p.Module.Path != module {
				continue
			}
			for _, imp := range p.Imports {
				if m := moduleOf[imp]; m != "" && m != module {
					direct[m] = true
				}
			}
		}
	}
	for _, r := range mod.Require {
		switch {
		case direct[r.Path] && r.Indirect:
			t.Errorf("go.mod marks %s indirect, but this module imports it (go mod tidy)", r.Path)
		case !direct[r.Path] && !r.Indirect && !complete:
			t.Logf("go.mod requires %s as a direct dependency; not checked, a build was not listed", r.Path)
		case !direct[r.Path] && !r.Indirect:
			t.Errorf("go.mod requires %s as a direct dependency, but no package of this module imports it (go mod tidy)", r.Path)
		}
		delete(direct, r.Path)
	}
	for m := range direct {
		t.Errorf("this module imports %s, which go.mod does not require (go mod tidy)", m)
	}
}

// nodeRunPath is the package that implements `dssp node` (package main
// only adds its command): its dependencies are what a node process runs.
const nodeRunPath = module + "/cmd/dssp/nodecmd"

// runPathForbidden are what the product binary and a node's run path must
// not reach: the lab, and a plotting library (the lab's).
var runPathForbidden = []string{module + "/lab", "gonum.org/v1/plot"}

// TestNodeRunPathHasNoLab: the dependencies of the product binary
// (cmd/dssp) and of the package that runs `dssp node` hold no package of
// lab/ and no plotting library, in every build checked, and cmd/dssp
// dispatches `node` to that package. By hand:
//
//	go list -deps ./cmd/dssp | grep -E '^dsspmesh/lab/|^gonum.org/v1/plot'   # prints nothing
//	go list -deps ./cmd/dssp/nodecmd | grep -c '^dsspmesh/'                 # the module's packages a node runs
//
// Every package linked into a binary runs its init at start-up: the lab's
// binary starts itself as the nodes of its benchmarks, so the test also
// checks that no file under lab/ declares an init.
func TestNodeRunPathHasNoLab(t *testing.T) {
	g := goTool(t)
	for _, ts := range tagSets {
		for _, pkg := range []string{"./cmd/dssp", "./cmd/dssp/nodecmd"} {
			out, err := exec.Command(g, "list", "-tags", ts.tags, "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
			if err != nil {
				if ts.optional {
					t.Logf("tags %q not checked: %v: %s", ts.tags, err, out)
					continue
				}
				t.Fatalf("go list -tags %q -deps %s: %v: %s", ts.tags, pkg, err, out)
			}
			deps := strings.Fields(string(out))
			if !slices.Contains(deps, nodeRunPath) || !slices.Contains(deps, module+"/node") {
				t.Fatalf("tags %q: go list -deps %s did not list the node: %v", ts.tags, pkg, deps)
			}
			for _, d := range deps {
				for _, f := range runPathForbidden {
					if d == f || strings.HasPrefix(d, f+"/") {
						t.Errorf("tags %q: %s depends on %s", ts.tags, pkg, d)
					}
				}
			}
		}
	}
	pkgs, err := goList(t, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if p.ImportPath == module+"/cmd/dssp" && !slices.Contains(p.Imports, nodeRunPath) {
			t.Errorf("cmd/dssp does not import %s: `dssp node` runs elsewhere, and this test checks the wrong package", nodeRunPath)
		}
	}
	initDecl := regexp.MustCompile(`(?m)^func init\(\)`)
	for _, f := range repoFiles(t) {
		if strings.HasPrefix(f, "lab/") && strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go") {
			if b, err := os.ReadFile(f); err == nil && initDecl.Match(b) {
				t.Errorf("%s declares an init, which would run in every dssp-lab process, the nodes its benchmarks start included", f)
			}
		}
	}
}
