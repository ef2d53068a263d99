package main

import (
	"fmt"
	"go/ast"
	"go/types"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// upwardUses loads the package's non-test files with their types and
// returns every identifier that resolves to a declaration of this package in
// a file of a higher layer than the file that uses it. Every file must be in
// a layer.
func upwardUses(t *testing.T, dir string, layers []layer) []upwardUse {
	t.Helper()
	pkg := loadPackage(t, dir)
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

// loadPackage loads the non-test files of the package in dir with their
// syntax and types.
func loadPackage(t *testing.T, dir string) *packages.Package {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo, Dir: dir}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || len(pkgs[0].Errors) > 0 {
		t.Fatalf("loading the package: %v", pkgs[0].Errors)
	}
	return pkgs[0]
}

// copyOfPackage copies the package's non-test files, and what they embed,
// to a new directory, with the files of planted added: a package a check
// must fail on.
func copyOfPackage(t *testing.T, planted map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && (strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") || name == "go.mod" || name == "go.sum" || strings.HasSuffix(name, ".sql") || name == "openapi.json") {
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sub := range []string{"migrations", "reference", "docs", "internal"} {
		if err := os.CopyFS(filepath.Join(dir, sub), os.DirFS(sub)); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range planted {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestNoFileUsesALayerAboveItsOwn holds the layers of docs/development.md:
// every non-test file is in one, and none uses a name that a file of a
// higher layer declares. A type, function, method, field or constant one
// layer too high is moved down to where its users are.
func TestNoFileUsesALayerAboveItsOwn(t *testing.T) {
	t.Parallel()
	layers := layersOfDocs(t)
	for _, u := range upwardUses(t, ".", layers) {
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
	dir := copyOfPackage(t, map[string]string{"store_planted.go": "package main\n\n// plantedBreak uses a handler's name from the store layer.\nvar plantedBreak = listPetsSpec\n"})
	uses := upwardUses(t, dir, layersOfDocs(t))
	want := upwardUse{file: "store_planted.go", name: "listPetsSpec", declaredIn: "pets.go"}
	if !slices.Contains(uses, want) {
		t.Errorf("the planted use %+v is not found among %d upward uses", want, len(uses))
	}
	if len(uses) != 1 {
		t.Errorf("the copy has %d upward uses, want the planted one only: %v", len(uses), fmt.Sprint(uses))
	}
}
