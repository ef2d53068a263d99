package main

import (
	"database/sql"
	"go/ast"
	"go/constant"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/go/packages"
)

// The write funnel (store_changes.go): a row of a resource is written only
// by the recording helpers, which record the change that the events and the
// caches follow. These tests hold it so, so that it is a mechanism, not a
// convention.

// funnelFiles are the files that may run a resource's writes: the recording
// helpers (store_changes.go) and the batch that runs the jobs and commits
// (store_write.go, which alone touches the transaction).
var funnelFiles = []string{"store_changes.go", "store_write.go"}

// bypass is a place where a file could write a resource's rows without
// recording the change.
type bypass struct {
	File, What string
}

// funnelBypasses finds, in the package's non-test files, every way past the
// funnel it can see: a read of a rowStatement's or a rowValues's statement,
// or of the job's transaction (txn.tx), outside the funnel's files; and a
// call of a database/sql method with a constant SQL text that writes a
// resource's table anywhere (store_copy.go aside: it fills another
// database, whose changes are no events of this one).
func funnelBypasses(t *testing.T, pkg *packages.Package) []bypass {
	t.Helper()
	var found []bypass
	for _, f := range pkg.Syntax {
		file := filepath.Base(pkg.Fset.File(f.Pos()).Name())
		inFunnel := slices.Contains(funnelFiles, file)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				sel := pkg.TypesInfo.Selections[n]
				if sel == nil || sel.Kind() != types.FieldVal || inFunnel {
					return true
				}
				recv := sel.Recv()
				if p, ok := recv.(*types.Pointer); ok {
					recv = p.Elem()
				}
				named, ok := recv.(*types.Named)
				if !ok {
					return true
				}
				switch field := named.Obj().Name() + "." + sel.Obj().Name(); field {
				case "rowStatement.stmt", "rowValues.values", "txn.tx":
					found = append(found, bypass{file, "reads " + field})
				}
			case *ast.CallExpr:
				fn, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || file == "store_copy.go" {
					return true
				}
				obj, ok := pkg.TypesInfo.Uses[fn.Sel].(*types.Func)
				if !ok || obj.Pkg() == nil || obj.Pkg().Path() != "database/sql" {
					return true
				}
				for _, arg := range n.Args {
					tv := pkg.TypesInfo.Types[arg]
					if tv.Value == nil || tv.Value.Kind() != constant.String {
						continue
					}
					if table, ok := writesResourceTable(constant.StringVal(tv.Value)); ok {
						found = append(found, bypass{file, obj.Name() + " of SQL that writes " + table})
					}
				}
			}
			return true
		})
	}
	return found
}

// TestOnlyTheFunnelWritesAResourceTable: no file past the funnel can run a
// statement that writes a pet or an order.
func TestOnlyTheFunnelWritesAResourceTable(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff([]bypass(nil), funnelBypasses(t, loadPackage(t))); diff != "" {
		t.Errorf("ways past the funnel (-want +got):\n%s", diff)
	}
}

// TestTheFunnelCheckFindsPlantedBypasses: an UPDATE of a pet through the
// funnel's own statement, one through the transaction, and one straight on
// the database, each in a store file of its own, are each found.
func TestTheFunnelCheckFindsPlantedBypasses(t *testing.T) {
	t.Parallel()
	pkg := withPlanted(t, map[string]string{
		"store_planted.go": `package main

import "context"

// plantedRename renames a pet through its update statement, unrecorded.
func (tx *txn) plantedRename(id int64) error {
	_, err := tx.exec("rename pet", tx.st.petStmts.update.stmt, "x", 1, "available", id)
	return err
}

// plantedSell sells a pet through the transaction itself.
func (tx *txn) plantedSell(id int64) error {
	_, err := tx.tx.ExecContext(tx.ctx, "UPDATE pets SET status = 'sold' WHERE id = ?", id)
	return err
}

// plantedWipe empties the orders on the database, outside any job.
func (s *store) plantedWipe(ctx context.Context) error {
	_, err := s.writer.ExecContext(ctx, "DELETE FROM orders")
	return err
}
`})
	want := []bypass{
		{"store_planted.go", "reads rowStatement.stmt"},
		{"store_planted.go", "ExecContext of SQL that writes pets"},
		{"store_planted.go", "reads txn.tx"},
		{"store_planted.go", "ExecContext of SQL that writes orders"},
	}
	if diff := cmp.Diff(want, funnelBypasses(t, pkg)); diff != "" {
		t.Errorf("bypasses found in the planted package (-want +got):\n%s", diff)
	}
}

// TestAStatementThatWritesAResourceMustBeTheFunnels: prepare refuses a
// statement that writes a resource's table declared as a plain *sql.Stmt,
// which tx.exec could run unrecorded; as a rowStatement it is taken.
func TestAStatementThatWritesAResourceMustBeTheFunnels(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		query string
		plain bool // declared as a *sql.Stmt
		err   string
	}{
		{"UPDATE pets SET name = ? WHERE id = ?", true, "it writes pets, a table of a resource"},
		{"  insert into ORDERS (pet_id) VALUES (?)", true, "it writes orders, a table of a resource"},
		{"WITH x AS (SELECT 1) DELETE FROM pets WHERE id = ?", true, "it writes pets, a table of a resource"},
		{"UPDATE pets SET name = ? WHERE id = ?", false, ""},
		{"SELECT id FROM pets WHERE id = ?", true, ""},
		{"UPDATE webhooks SET url = ? WHERE id = ?", true, ""},
		{"INSERT INTO events (type) VALUES (?)", true, ""},
	} {
		var plain *sql.Stmt
		var row rowStatement
		st := statement{query: tt.query, dst: &row}
		if tt.plain {
			st.dst = &plain
		}
		err := st.place(nil)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (tt.err == "") != (got == "") || !strings.Contains(got, tt.err) {
			t.Errorf("place(%q, plain %v) = %q, want an error mentioning %q", tt.query, tt.plain, got, tt.err)
		}
	}
}
