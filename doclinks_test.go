package dsspmesh_test

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDocLinksResolve: every doc link in the module's Go doc comments
// ([Name], [Recv.Name], [pkg.Name], [pkg.Recv.Name], [path/to/pkg.Name])
// names something that exists — a top-level identifier of the package, a
// method or field of one of its types, or the same in a package the link
// names (one the file imports, one of this module's, or the standard
// library's). A link to something renamed or deleted fails here instead of
// rendering as plain text in go doc.
func TestDocLinksResolve(t *testing.T) {
	bad, err := checkDocLinks(goTool(t), ".", module)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// TestDocLinksCatchesABrokenLink: the checker reports a link to a method
// that does not exist, and only that one, on a package written for it.
func TestDocLinksCatchesABrokenLink(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example\n\ngo 1.26\n")
	write("a/a.go", `// Package a is linked from b.
package a

// Client has [Client.Push], a field [Client.Addr] and an embedded [Base].
type Client struct {
	Base
	Addr string
}

// Base's method [Base.Close] is promoted: [Client.Close].
type Base struct{}

func (Base) Close() {}

// Push is linked as [Client.Push]; [Client.Encode] does not exist.
func (*Client) Push() {}
`)
	write("b/b.go", `// Package b links [a.Client.Push], [a.Client], [strings.Cut], [math],
// [net/http.Client.Do], [*a.Client], and wrongly [a.Client.Send] and
// [a.Gone]; the words [lo, hi) and [sic] are not links.
package b

import _ "example/a"
`)
	bad, err := checkDocLinks(goTool(t), dir, "example")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"[Client.Encode]", "[a.Client.Send]", "[a.Gone]"}
	if len(bad) != len(want) {
		t.Fatalf("reported %d broken links, want %d (%v): %q", len(bad), len(want), want, bad)
	}
	for i, w := range want {
		if !strings.Contains(bad[i], w) {
			t.Errorf("report %d = %q, want it to name %s", i, bad[i], w)
		}
	}
}

// symbols are what a package's doc links may name.
type symbols struct {
	name    string                     // the package name
	top     map[string]bool            // top-level identifiers
	members map[string]map[string]bool // type → its methods and fields
	embeds  map[string][]string        // type → embedded (or underlying) local types; "" for another package's
}

func (s *symbols) has(recv, name string) bool {
	if recv == "" {
		return s.top[name]
	}
	seen := map[string]bool{}
	var find func(typ string) bool
	find = func(typ string) bool {
		if seen[typ] {
			return false
		}
		seen[typ] = true
		if s.members[typ][name] {
			return true
		}
		for _, e := range s.embeds[typ] {
			// A member promoted from another package's type is not
			// followed: accept it rather than load that package.
			if e == "" || find(e) {
				return true
			}
		}
		return false
	}
	return s.top[recv] && find(recv)
}

// typeName is the local type an expression names ("" for another
// package's, "-" for no named type).
func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return typeName(x.X)
	case *ast.IndexExpr:
		return typeName(x.X)
	case *ast.IndexListExpr:
		return typeName(x.X)
	case *ast.SelectorExpr:
		return ""
	}
	return "-"
}

// indexDir reads the symbols of the package in dir from its non-test Go
// files, whatever their build constraints (a link may name what only a
// tagged build compiles). ok is false when dir holds no such file.
func indexDir(fset *token.FileSet, dir string) (*symbols, map[string]*ast.File, bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, false, err
	}
	s := &symbols{top: map[string]bool{}, members: map[string]map[string]bool{}, embeds: map[string][]string{}}
	files := map[string]*ast.File{}
	member := func(typ, name string) {
		if s.members[typ] == nil {
			s.members[typ] = map[string]bool{}
		}
		s.members[typ][name] = true
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		p := filepath.Join(dir, n)
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, false, err
		}
		if f.Name.Name == "documentation" {
			continue
		}
		s.name = f.Name.Name
		files[p] = f
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					s.top[d.Name.Name] = true
				} else if len(d.Recv.List) == 1 {
					member(typeName(d.Recv.List[0].Type), d.Name.Name)
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.ValueSpec:
						for _, id := range sp.Names {
							s.top[id.Name] = true
						}
					case *ast.TypeSpec:
						typ := sp.Name.Name
						s.top[typ] = true
						var fields *ast.FieldList
						switch u := sp.Type.(type) {
						case *ast.StructType:
							fields = u.Fields
						case *ast.InterfaceType:
							fields = u.Methods
						default:
							if tn := typeName(u); tn != "-" {
								s.embeds[typ] = append(s.embeds[typ], tn)
							}
						}
						if fields == nil {
							continue
						}
						for _, fl := range fields.List {
							for _, id := range fl.Names {
								member(typ, id.Name)
							}
							if len(fl.Names) == 0 {
								tn := typeName(fl.Type)
								if tn != "-" {
									s.embeds[typ] = append(s.embeds[typ], tn)
								}
								if tn != "" && tn != "-" {
									member(typ, tn)
								} else if sel, ok := fl.Type.(*ast.SelectorExpr); ok {
									member(typ, sel.Sel.Name)
								} else if st, ok := fl.Type.(*ast.StarExpr); ok {
									if sel, ok := st.X.(*ast.SelectorExpr); ok {
										member(typ, sel.Sel.Name)
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return s, files, len(files) > 0, nil
}

// docComments are a file's doc comments: the package's, each declaration's
// and spec's, and each documented field or interface method.
func docComments(f *ast.File) []*ast.CommentGroup {
	var out []*ast.CommentGroup
	add := func(g *ast.CommentGroup) {
		if g != nil {
			out = append(out, g)
		}
	}
	add(f.Doc)
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			add(d.Doc)
		case *ast.GenDecl:
			add(d.Doc)
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.ValueSpec:
					add(sp.Doc)
				case *ast.TypeSpec:
					add(sp.Doc)
					var fields *ast.FieldList
					switch u := sp.Type.(type) {
					case *ast.StructType:
						fields = u.Fields
					case *ast.InterfaceType:
						fields = u.Methods
					}
					if fields != nil {
						for _, fl := range fields.List {
							add(fl.Doc)
						}
					}
				}
			}
		}
	}
	return out
}

// docLinks are the doc links of one parsed comment, in order.
func docLinks(d *comment.Doc) []*comment.DocLink {
	var out []*comment.DocLink
	var texts func([]comment.Text)
	texts = func(ts []comment.Text) {
		for _, t := range ts {
			switch t := t.(type) {
			case *comment.DocLink:
				out = append(out, t)
			case *comment.Link:
				texts(t.Text)
			case *comment.Italic, comment.Plain:
			}
		}
	}
	var blocks func([]comment.Block)
	blocks = func(bs []comment.Block) {
		for _, b := range bs {
			switch b := b.(type) {
			case *comment.Paragraph:
				texts(b.Text)
			case *comment.Heading:
				texts(b.Text)
			case *comment.List:
				for _, it := range b.Items {
					blocks(it.Content)
				}
			}
		}
	}
	blocks(d.Content)
	return out
}

// isIdent reports whether s is a Go identifier.
func isIdent(s string) bool {
	return token.IsIdentifier(s)
}

// importName is the name a file refers to an import by.
func importName(spec *ast.ImportSpec) (name, importPath string) {
	importPath, _ = strconv.Unquote(spec.Path.Value)
	if spec.Name != nil {
		return spec.Name.Name, importPath
	}
	elems := strings.Split(importPath, "/")
	name = elems[len(elems)-1]
	if len(elems) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = elems[len(elems)-2] // a major version suffix: .../msgpack/v5
	}
	name = strings.TrimPrefix(name, "go-")
	if i := strings.IndexAny(name, ".-"); i >= 0 {
		name = name[:i] // gopkg.in/yaml.v3, go-metrics
	}
	return name, importPath
}

// checkDocLinks returns one line per doc link in root's packages (modulePath
// being root's module) that names nothing, as "file:line: [link] ..."; goCmd
// finds the standard library and other modules' packages.
func checkDocLinks(goCmd, root, modulePath string) ([]string, error) {
	fset := token.NewFileSet()
	type pkg struct {
		dir   string
		syms  *symbols
		files map[string]*ast.File
	}
	var pkgs []*pkg
	byPath := map[string]*symbols{} // import path → symbols, loaded on demand
	byName := map[string][]string{} // a module package's name → its import paths
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || n == "vendor") {
			return filepath.SkipDir
		}
		syms, files, ok, err := indexDir(fset, p)
		if err != nil || !ok {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		ip := modulePath
		if rel != "." {
			ip = path.Join(modulePath, filepath.ToSlash(rel))
		}
		pkgs = append(pkgs, &pkg{dir: p, syms: syms, files: files})
		byPath[ip] = syms
		byName[syms.name] = append(byName[syms.name], ip)
		return nil
	})
	if err != nil {
		return nil, err
	}

	// load finds a package outside the module: the standard library's in
	// GOROOT, any other through go list (a missing one is nil).
	goroot := runtime.GOROOT()
	if out, err := exec.Command(goCmd, "env", "GOROOT").Output(); err == nil {
		goroot = strings.TrimSpace(string(out))
	}
	load := func(importPath string) *symbols {
		if s, ok := byPath[importPath]; ok {
			return s
		}
		var dir string
		first, _, _ := strings.Cut(importPath, "/")
		if !strings.Contains(first, ".") {
			dir = filepath.Join(goroot, "src", filepath.FromSlash(importPath))
		} else {
			cmd := exec.Command(goCmd, "list", "-e", "-f", "{{.Dir}}", importPath)
			cmd.Dir = root
			if out, err := cmd.Output(); err == nil {
				dir = strings.TrimSpace(string(out))
			}
		}
		var s *symbols
		if dir != "" {
			if syms, _, ok, err := indexDir(token.NewFileSet(), dir); err == nil && ok {
				s = syms
			}
		}
		byPath[importPath] = s
		return s
	}

	var bad []string
	for _, pk := range pkgs {
		names := make([]string, 0, len(pk.files))
		for n := range pk.files {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, fname := range names {
			f := pk.files[fname]
			imports := map[string]string{}
			for _, spec := range f.Imports {
				n, ip := importName(spec)
				imports[n] = ip
			}
			// resolve gives the packages a link's package part may mean.
			resolve := func(ref string) []*symbols {
				if strings.Contains(ref, "/") {
					return []*symbols{load(ref)}
				}
				if ip, ok := imports[ref]; ok {
					return []*symbols{load(ip)}
				}
				var out []*symbols
				for _, ip := range byName[ref] {
					out = append(out, byPath[ip])
				}
				if len(out) == 0 {
					if s := load(ref); s != nil {
						out = append(out, s)
					}
				}
				return out
			}
			p := comment.Parser{
				// Every [Name] and [Recv.Name] is taken for a link, so
				// that one naming nothing is seen; a package part
				// is resolved below.
				LookupSym: func(recv, name string) bool { return true },
				LookupPackage: func(name string) (string, bool) {
					return name, isIdent(name)
				},
			}
			for _, g := range docComments(f) {
				raw := g.Text()
				from := 0 // where the next link's text is looked for in raw
				for _, l := range docLinks(p.Parse(raw)) {
					text := strings.Join(slices.DeleteFunc([]string{l.ImportPath, l.Recv, l.Name}, func(s string) bool { return s == "" }), ".")
					at := from
					for _, form := range []string{"[" + text + "]", "[*" + text + "]"} {
						if i := strings.Index(raw[from:], form); i >= 0 {
							at = from + i
							from = at + len(form)
							break
						}
					}
					var ok bool
					switch {
					case strings.ToUpper(text) == text:
						// [LEVEL], [WARN]: a log line's tag in prose,
						// not a Go name.
						ok = true
					case l.ImportPath == "":
						ok = pk.syms.has(l.Recv, l.Name)
					case l.Name == "":
						// [word] alone: a package if it resolves,
						// else ordinary bracketed prose.
						ok = true
					default:
						for _, s := range resolve(l.ImportPath) {
							if s != nil && s.has(l.Recv, l.Name) {
								ok = true
								break
							}
						}
					}
					if ok {
						continue
					}
					line := fset.Position(g.Pos()).Line + strings.Count(raw[:at], "\n")
					rel, _ := filepath.Rel(root, fname)
					bad = append(bad, fmt.Sprintf("%s:%d: doc link [%s] names nothing that exists", filepath.ToSlash(rel), line, text))
				}
			}
		}
	}
	return bad, nil
}
