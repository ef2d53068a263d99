package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Habit 14 of the house style (/work/shared/STYLE.md): a function does one
// job you can name and fits on a screen, in steps with names. These tests
// hold every hand-written function of the module to that screen.

// maxFunctionLines is the most lines a function may take, from its func
// line to its closing brace, both counted (its doc comment is not).
const maxFunctionLines = 80

// longFunction is a function over maxFunctionLines.
type longFunction struct {
	file  string // from the module's root, with forward slashes
	line  int    // of its func keyword
	name  string // "name", or "Type.name" for a method
	lines int
}

// tooLongForNow are the functions still over the bound, each being split
// into steps. The list must stay empty: a function on it that is no longer
// over the bound (or is gone) fails TestNoFunctionIsOver80Lines until it is
// taken off, so the list cannot outlive what it excuses.
var tooLongForNow = []longFunction{}

// longFunctions parses every Go file of the module under root (the root
// package, bench/, soak/, internal/... : every directory but testdata/ and
// hidden ones), except tests and generated files (a "Code generated ... DO
// NOT EDIT." comment before the package clause, as client/client.gen.go
// has), and returns its functions over maxFunctionLines, by file and line.
func longFunctions(t *testing.T, root string) []longFunction {
	t.Helper()
	var long []longFunction
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		found, err := longFunctionsOf(path, filepath.ToSlash(rel))
		long = append(long, found...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return long
}

// longFunctionsOf parses the file at path, named file in what it returns,
// and returns its functions over maxFunctionLines; none when it is
// generated.
func longFunctionsOf(path, file string) ([]longFunction, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var long []longFunction
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		if lines := end - start + 1; lines > maxFunctionLines {
			long = append(long, longFunction{file: file, line: start, name: functionName(fn), lines: lines})
		}
	}
	return long, nil
}

// functionName is fn's name, after its receiver's type for a method
// ("dispatcher.run").
func functionName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	for {
		switch e := typ.(type) {
		case *ast.StarExpr:
			typ = e.X
		case *ast.IndexExpr: // a generic type's receiver, T[K]
			typ = e.X
		case *ast.IndexListExpr: // T[K, V]
			typ = e.X
		case *ast.Ident:
			return e.Name + "." + fn.Name.Name
		default:
			return fmt.Sprintf("%T.%s", typ, fn.Name.Name)
		}
	}
}

// TestNoFunctionIsOver80Lines holds habit 14: no function of the module is
// over maxFunctionLines lines, but for those of tooLongForNow, each of which
// must still be over them. A function over the bound is split into steps
// whose names say what they do; where the steps share state, a small struct
// holds it (bench's sizeBench, soak's soakRun).
func TestNoFunctionIsOver80Lines(t *testing.T) {
	t.Parallel()
	excused := map[longFunction]bool{}
	for _, f := range longFunctions(t, ".") {
		key := longFunction{file: f.file, name: f.name}
		if slices.Contains(tooLongForNow, key) {
			excused[key] = true
			continue
		}
		t.Errorf("%s:%d: %s is %d lines, over %d: split it into steps whose names say what they do", f.file, f.line, f.name, f.lines, maxFunctionLines)
	}
	for _, f := range tooLongForNow {
		if !excused[f] {
			t.Errorf("%s: %s is no longer over %d lines (or is gone): take it off tooLongForNow", f.file, f.name, maxFunctionLines)
		}
	}
}

// plantedFunction is the source of a function of n lines, from its func
// line to its closing brace, whose declaration (up to its opening brace)
// is decl.
func plantedFunction(decl string, n int) string {
	return decl + " {\n" + strings.Repeat("\tprintln()\n", n-2) + "}\n"
}

// TestTheLengthCheckFindsAPlantedFunction: in a tree of files shaped like
// the module's, the check finds the functions of 81 lines and more planted
// at the root, in bench/ and in internal/ (a method and a generic type's
// method named after their type), and only those: not one of 80 lines, nor
// a long one in a test, in a generated file or under testdata/. So the
// check above cannot pass for want of looking.
func TestTheLengthCheckFindsAPlantedFunction(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	planted := map[string]string{
		"long.go": "package main\n\n" + plantedFunction("func atTheBound()", 80) + "\n" +
			plantedFunction("func oneTooLong()", 81),
		"long_test.go":             "package main\n\n" + plantedFunction("func TestLong(t *testing.T)", 200),
		"bench/planted.go":         "package main\n\ntype planted struct{}\n\n" + plantedFunction("func (p *planted) run()", 81),
		"internal/deep/planted.go": "package deep\n\ntype stack[T any] []T\n\n" + plantedFunction("func (s stack[T]) push(v T)", 90),
		"client/planted.gen.go":    "// Package client is planted.\n//\n// Code generated by hand for a test. DO NOT EDIT.\npackage client\n\n" + plantedFunction("func generated()", 200),
		"testdata/planted.go":      "package main\n\n" + plantedFunction("func data()", 200),
	}
	for name, src := range planted {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := []longFunction{
		{file: "bench/planted.go", line: 5, name: "planted.run", lines: 81},
		{file: "internal/deep/planted.go", line: 5, name: "stack.push", lines: 90},
		{file: "long.go", line: 84, name: "oneTooLong", lines: 81},
	}
	got := longFunctions(t, root)
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(longFunction{})); diff != "" {
		t.Errorf("longFunctions() of the planted tree mismatch (-want +got):\n%s", diff)
	}
}
