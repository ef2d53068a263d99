package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/types"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/packages"
)

// The layers of the one package, by file name, as docs/development.md's
// table lists them (bottom first): a file may use what its own layer and the
// layers below declare, never what a layer above declares.

// layer is one row of the table: its name and the file patterns it holds.
type layer struct {
	name     string
	patterns []string
}

// layersOfDocs reads the table of layers from docs/development.md: the rows
// after the heading "The layers", whose second column names the files in
// backquotes (`store_*.go`). The rows are listed top first; the result is
// bottom first.
func layersOfDocs(t *testing.T) []layer {
	t.Helper()
	doc, err := os.ReadFile("docs/development.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "### The layers")
	if !ok {
		t.Fatal("docs/development.md has no section \"The layers\"")
	}
	var layers []layer
	quoted := regexp.MustCompile("`([^`]+)`")
	inTable := false
	for line := range strings.SplitSeq(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "layer" {
			continue
		}
		l := layer{name: strings.TrimSpace(cells[1])}
		for _, m := range quoted.FindAllStringSubmatch(cells[2], -1) {
			if strings.HasSuffix(m[1], ".go") {
				l.patterns = append(l.patterns, m[1])
			}
		}
		layers = append(layers, l)
	}
	slices.Reverse(layers)
	if len(layers) < 3 {
		t.Fatalf("docs/development.md's table of layers has %d rows", len(layers))
	}
	return layers
}

// layerOf is the index of the layer of file (a base name) in layers, and
// false when no layer names it.
func layerOf(layers []layer, file string) (int, bool) {
	for i, l := range layers {
		for _, p := range l.patterns {
			if ok, _ := path.Match(p, file); ok {
				return i, true
			}
		}
	}
	return 0, false
}

// upwardUse is a use, in one file, of a name another file of a higher layer
// declares.
type upwardUse struct {
	file, name, declaredIn string
}

// upwardUses returns every identifier of the package's files that resolves
// to a declaration of this package in a file of a higher layer than the
// file that uses it. Every file must be in a layer.
func upwardUses(t *testing.T, pkg *packages.Package, layers []layer) []upwardUse {
	t.Helper()
	var uses []upwardUse
	for _, f := range pkg.Syntax {
		file := filepath.Base(pkg.Fset.File(f.Pos()).Name())
		from, ok := layerOf(layers, file)
		if !ok {
			t.Errorf("%s is in no layer of docs/development.md's table", file)
			continue
		}
		seen := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := pkg.TypesInfo.Uses[id]
			if obj == nil || obj.Pkg() != pkg.Types || !obj.Pos().IsValid() {
				return true
			}
			if v, ok := obj.(*types.Var); ok && !v.IsField() && obj.Parent() != pkg.Types.Scope() {
				return true // a local variable or parameter
			}
			declared := filepath.Base(pkg.Fset.File(obj.Pos()).Name())
			to, ok := layerOf(layers, declared)
			if ok && to > from && !seen[declared+"."+id.Name] {
				seen[declared+"."+id.Name] = true
				uses = append(uses, upwardUse{file: file, name: id.Name, declaredIn: declared})
			}
			return true
		})
	}
	return uses
}

// thePackage is the package of the working directory, its non-test files
// with their syntax and types, loaded once per test binary and shared by
// the checks that read it (the layers, the funnel): a load is go list and a
// type check, seconds of CPU under the race detector. The checks only read
// it.
var thePackage struct {
	once sync.Once
	pkg  *packages.Package
	err  error
}

// loadPackage returns thePackage, loading it on first use.
func loadPackage(t *testing.T) *packages.Package {
	t.Helper()
	thePackage.once.Do(func() {
		cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo, Dir: "."}
		pkgs, err := packages.Load(cfg, ".")
		switch {
		case err != nil:
			thePackage.err = err
		case len(pkgs) != 1:
			thePackage.err = fmt.Errorf("%d packages, want 1", len(pkgs))
		case len(pkgs[0].Errors) > 0:
			thePackage.err = fmt.Errorf("%v", pkgs[0].Errors)
		default:
			thePackage.pkg = pkgs[0]
		}
	})
	if thePackage.err != nil {
		t.Fatalf("loading the package: %v", thePackage.err)
	}
	return thePackage.pkg
}

// withPlanted returns thePackage with the files of planted (name: source)
// added, type-checked again: a package a check must fail on. The package's
// own files are shared, not parsed again (go/types only reads them), and a
// planted file may import only what the package imports, which is taken
// from the load, without another go list.
func withPlanted(t *testing.T, planted map[string]string) *packages.Package {
	t.Helper()
	pkg := loadPackage(t)
	files := slices.Clone(pkg.Syntax)
	for _, name := range slices.Sorted(maps.Keys(planted)) {
		f, err := parser.ParseFile(pkg.Fset, name, planted[name], parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	imports := map[string]*types.Package{}
	for _, p := range pkg.Types.Imports() {
		imports[p.Path()] = p
	}
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if p, ok := imports[path]; ok {
				return p, nil
			}
			return nil, fmt.Errorf("%s: the package does not import it", path)
		}),
		Sizes: types.SizesFor("gc", runtime.GOARCH),
	}
	info := &types.Info{
		Types:        map[ast.Expr]types.TypeAndValue{},
		Defs:         map[*ast.Ident]types.Object{},
		Uses:         map[*ast.Ident]types.Object{},
		Implicits:    map[ast.Node]types.Object{},
		Instances:    map[*ast.Ident]types.Instance{},
		Selections:   map[*ast.SelectorExpr]*types.Selection{},
		Scopes:       map[ast.Node]*types.Scope{},
		FileVersions: map[*ast.File]string{},
	}
	tpkg, err := conf.Check(pkg.PkgPath, pkg.Fset, files, info)
	if err != nil {
		t.Fatalf("type-checking the package with %v planted: %v", slices.Sorted(maps.Keys(planted)), err)
	}
	return &packages.Package{ID: pkg.ID, Name: pkg.Name, PkgPath: pkg.PkgPath, Fset: pkg.Fset, Syntax: files, Types: tpkg, TypesInfo: info}
}

// importerFunc is a types.Importer.
type importerFunc func(path string) (*types.Package, error)

// Import imports the package at path.
func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// TestNoFileUsesALayerAboveItsOwn holds the layers of docs/development.md:
// every non-test file is in one, and none uses a name that a file of a
// higher layer declares. A type, function, method, field or constant one
// layer too high is moved down to where its users are.
func TestNoFileUsesALayerAboveItsOwn(t *testing.T) {
	t.Parallel()
	layers := layersOfDocs(t)
	for _, u := range upwardUses(t, loadPackage(t), layers) {
		from, _ := layerOf(layers, u.file)
		to, _ := layerOf(layers, u.declaredIn)
		t.Errorf("%s (%s) uses %s, declared in %s (%s, a layer above)", u.file, layers[from].name, u.name, u.declaredIn, layers[to].name)
	}
}

// TestTheLayerCheckFindsAPlantedBreak: a copy of the package in which a
// store file uses a name a handler file declares fails the check, so the
// check above cannot pass for want of looking.
func TestTheLayerCheckFindsAPlantedBreak(t *testing.T) {
	t.Parallel()
	pkg := withPlanted(t, map[string]string{"store_planted.go": "package main\n\n// plantedBreak uses a handler's name from the store layer.\nvar plantedBreak = listPetsSpec\n"})
	uses := upwardUses(t, pkg, layersOfDocs(t))
	want := upwardUse{file: "store_planted.go", name: "listPetsSpec", declaredIn: "pets.go"}
	if !slices.Contains(uses, want) {
		t.Errorf("the planted use %+v is not found among %d upward uses", want, len(uses))
	}
	if len(uses) != 1 {
		t.Errorf("the copy has %d upward uses, want the planted one only: %v", len(uses), fmt.Sprint(uses))
	}
}
