package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The one mutation point of the store. Every row of a resource (a pet, an
// order) that a write adds, changes or deletes goes through insertRow,
// updateRow or deleteRow below, and each of them records a change: which
// resource, which id, what happened, and the row as it is after the change
// (before it, for a delete). Nothing else touches the transaction: a job
// sees only the txn's methods (store_*.go), and those call these helpers.
//
// What depends on changes is derived from the records in one place,
// finishJob: the event rows written in the same transaction (so an event
// exists exactly when its change committed) and the response caches'
// invalidation published after the commit (see http_cache.go). A write cannot
// change a row and forget either.

// rowStatement is a prepared statement that writes rows of a resource.
// Only the recording helpers below run it: its statement is read nowhere
// else (TestOnlyTheFunnelWritesAResourceTable holds that), and tx.exec,
// tx.query and tx.queryRow take a *sql.Stmt, not a rowStatement. prepare
// refuses a statement that writes a resource's table and is not declared
// as one (see place).
type rowStatement struct{ stmt *sql.Stmt }

// rowValues is a valuesInsert of a resource's rows (the staged pets on
// SQLite), which only flushStaged runs.
type rowValues struct{ values valuesInsert }

// funnelStmt is where prepare puts a statement of a rowValues.
type funnelStmt struct{ dst **sql.Stmt }

// statements declares the statements of rv for prepare, as
// valuesInsert.statements does.
func (rv *rowValues) statements(db *sql.DB, head string, cols int, tail string) []statement {
	out := rv.values.statements(db, head, cols, tail)
	for i := range out {
		out[i].dst = funnelStmt{out[i].dst.(**sql.Stmt)}
	}
	return out
}

// prepareWanted prepares the statements that batches needed, as
// valuesInsert.prepareWanted does.
func (rv *rowValues) prepareWanted(ctx context.Context, d dialect) ([]*sql.Stmt, error) {
	return rv.values.prepareWanted(ctx, d)
}

// place puts stmt where st says. A statement that writes a resource's table
// (a table of a resource's declaration) must go to the funnel's types: it
// is refused as a plain *sql.Stmt, which any store file could run with
// tx.exec and record nothing.
func (st statement) place(stmt *sql.Stmt) error {
	switch dst := st.dst.(type) {
	case *rowStatement:
		dst.stmt = stmt
	case funnelStmt:
		*dst.dst = stmt
	case **sql.Stmt:
		if table, ok := writesResourceTable(st.query); ok {
			return fmt.Errorf("prepare %q: it writes %s, a table of a resource, so it must be a rowStatement, which only the recording helpers of store_changes.go run", st.query, table)
		}
		*dst = stmt
	default:
		return fmt.Errorf("prepare %q: no place for the statement (%T)", st.query, st.dst)
	}
	return nil
}

// resourceWrite finds a write of a table: INSERT INTO, UPDATE or DELETE
// FROM, and the table's name.
var resourceWrite = regexp.MustCompile(`(?is)\b(?:insert\s+into|update|delete\s+from)\s+"?([a-z_]+)`)

// writesResourceTable reports whether query writes a table of a resource's
// declaration, and which.
func writesResourceTable(query string) (string, bool) {
	for _, m := range resourceWrite.FindAllStringSubmatch(query, -1) {
		for _, spec := range resourceSpecs {
			for _, t := range spec.tables {
				if strings.EqualFold(m[1], t.name) {
					return t.name, true
				}
			}
		}
	}
	return "", false
}

// rowScanner reads one row of a statement's result into a T.
type rowScanner[T any] func(row interface{ Scan(...any) error }, dst *T) error

// stmt is stmt bound to the transaction, once per batch: binding makes a
// statement of the transaction's own and looks up the connection's
// prepared one, which every job of a batch would otherwise pay again for
// the same few statements.
func (tx *txn) stmt(stmt *sql.Stmt) *sql.Stmt {
	if tx.batch == nil {
		return tx.tx.StmtContext(tx.ctx, stmt)
	}
	b, ok := tx.batch.bound[stmt]
	if !ok {
		b = tx.tx.StmtContext(tx.ctx, stmt)
		tx.batch.bound[stmt] = b
	}
	return b
}

// queryRow runs stmt, a read of at most one row, inside the transaction.
func (tx *txn) queryRow(stmt *sql.Stmt, args ...any) *sql.Row {
	return tx.stmt(stmt).QueryRowContext(tx.ctx, args...)
}

// query runs stmt, a read of any number of rows, inside the transaction.
func (tx *txn) query(stmt *sql.Stmt, args ...any) (*sql.Rows, error) {
	return tx.stmt(stmt).QueryContext(tx.ctx, args...)
}

// exec runs stmt inside the transaction for the store's own bookkeeping
// rows (idempotency records, events, the prune marks), which are no
// resource of the API and so record no change. It returns how many rows
// stmt changed.
func (tx *txn) exec(what string, stmt *sql.Stmt, args ...any) (int64, error) {
	res, err := tx.stmt(stmt).ExecContext(tx.ctx, args...)
	if err != nil {
		return 0, tx.st.failedWrite(what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, tx.st.failed(what, err)
	}
	return n, nil
}

// insertRow runs stmt, an INSERT of at most one row of res that returns the
// row's columns, and records its creation. ok is false when stmt inserted
// no row (an INSERT ... SELECT whose condition did not hold), and then
// nothing is recorded.
func insertRow[T eventRow](tx *txn, res resource, stmt rowStatement, scan rowScanner[T], idOf func(T) int64, args ...any) (row T, ok bool, err error) {
	return changeRow(tx, rowCreated, res, stmt, scan, idOf, args...)
}

// updateRow runs stmt, an UPDATE of at most one row of res that returns the
// row's columns as they are after it, and records the change. ok is false
// when stmt matched no row, and then nothing is recorded.
func updateRow[T eventRow](tx *txn, res resource, stmt rowStatement, scan rowScanner[T], idOf func(T) int64, args ...any) (row T, ok bool, err error) {
	return changeRow(tx, rowUpdated, res, stmt, scan, idOf, args...)
}

// changeRow is insertRow and updateRow.
func changeRow[T eventRow](tx *txn, kind changeKind, res resource, stmt rowStatement, scan rowScanner[T], idOf func(T) int64, args ...any) (row T, ok bool, err error) {
	err = scan(tx.queryRow(stmt.stmt, args...), &row)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return row, false, nil
	case err != nil:
		verb := "update "
		if kind == rowCreated {
			verb = "insert "
		}
		return row, false, tx.st.failedWrite(verb+res.String(), err)
	}
	tx.record(change{resource: res, kind: kind, id: idOf(row), row: row})
	return row, true, nil
}

// deleteRow runs stmt, a DELETE of the row id of res, whose content before
// the delete was before, and records the deletion.
func deleteRow[T eventRow](tx *txn, res resource, stmt rowStatement, id int64, before T) error {
	n, err := tx.exec("delete "+res.String(), stmt.stmt, id)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("delete %s %d: %d rows deleted, 1 expected", res, id, n)
	}
	tx.record(change{resource: res, kind: rowDeleted, id: id, row: before})
	return nil
}

// stageRow records the creation of row, the row id of res, which the batch
// inserts later with the other rows staged beside it (see batchState): the
// record is the same as insertRow's, since the row inserted is the row
// staged (flushStaged checks it).
func stageRow[T eventRow](tx *txn, res resource, id int64, row T) {
	tx.record(change{resource: res, kind: rowCreated, id: id, row: row})
}

// record adds ch to the job's changes.
func (tx *txn) record(ch change) { tx.changes = append(tx.changes, ch) }

// finishJob derives, from the changes the job recorded, what depends on
// them: the job's changes in the caches' terms, published once the batch
// commits, and one event per change, in the order the changes were made.
// The events are written by the batch (see attemptBatch), all of them in
// one statement inside the batch's transaction, after its last job: so an
// event still commits exactly when its change does, and a job undone (by a
// failure, or its savepoint) leaves no event, since its events are never
// handed to the batch.
func (tx *txn) finishJob(at time.Time) (changeSet, []Event) {
	var cs changeSet
	events := make([]Event, 0, len(tx.changes))
	for _, ch := range tx.changes {
		switch ch.kind {
		case rowCreated:
			cs.appendedTo(ch.resource)
		default:
			cs.changedIn(ch.resource, ch.id)
		}
		events = append(events, eventOf(ch, at))
	}
	return cs, events
}

// rowStage is the rows of one resource that a batch's insert-only jobs
// staged (see batchState), written together by the funnel. A resource
// whose creates stage their rows implements it in its store file, with the
// statement that inserts them all.
type rowStage interface {
	// resource is the resource whose rows are staged.
	resource() resource
	// pending reports whether staged rows wait to be written.
	pending() bool
	// write inserts the rows staged so far, in one statement, checks that
	// the rows inserted are the rows staged, and empties the stage.
	write(tx *txn) error
}

// stageOf returns the batch's stage of res's rows, which newStage makes on
// first use. Staging is the funnel's: a row staged is recorded by stageRow
// when staged, and written by flushStaged.
func stageOf[S rowStage](tx *txn, res resource, newStage func() S) S {
	b := tx.batch
	for _, st := range b.stages {
		if st.resource() == res {
			return st.(S)
		}
	}
	st := newStage()
	b.stages = append(b.stages, st)
	return st
}

// insertStaged runs values, the statement that inserts a stage's rows,
// with args, the rows stageRow recorded when they were staged, and returns
// how many it inserted.
func (tx *txn) insertStaged(values *rowValues, args []any) (int64, error) {
	return values.values.exec(tx, args)
}

// queryStaged runs stmt, a statement that inserts a stage's rows, given in
// args as they were recorded, and returns the rows inserted, for the stage
// to check against those it staged.
func (tx *txn) queryStaged(stmt rowStatement, args ...any) (*sql.Rows, error) {
	return tx.query(stmt.stmt, args...)
}

// hasStaged reports whether rows staged by the batch's jobs wait to be
// written.
func (b *batchState) hasStaged() bool {
	for _, st := range b.stages {
		if st.pending() {
			return true
		}
	}
	return false
}

// flushStaged inserts the rows the batch's jobs staged so far, each
// resource's in one statement, in the order the stages began (so that a
// staged row's references were staged, or written, before it).
func (tx *txn) flushStaged() error {
	for _, st := range tx.batch.stages {
		if !st.pending() {
			continue
		}
		if err := st.write(tx); err != nil {
			return err
		}
	}
	return nil
}
