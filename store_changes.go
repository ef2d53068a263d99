package main

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
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

// changeKind is what a write did to a row.
type changeKind int

const (
	rowCreated changeKind = iota + 1
	rowUpdated
	rowDeleted
)

// String names the kind as events do: "created", "updated", "deleted".
func (k changeKind) String() string {
	switch k {
	case rowCreated:
		return "created"
	case rowUpdated:
		return "updated"
	case rowDeleted:
		return "deleted"
	}
	return "kind" + strconv.Itoa(int(k))
}

// change is the record of one row that a write changed.
type change struct {
	resource resource
	kind     changeKind
	id       int64
	row      any // a Pet or an Order: after the change, or before a delete
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
func insertRow[T any](tx *txn, res resource, stmt *sql.Stmt, scan rowScanner[T], idOf func(T) int64, args ...any) (row T, ok bool, err error) {
	return changeRow(tx, rowCreated, res, stmt, scan, idOf, args...)
}

// updateRow runs stmt, an UPDATE of at most one row of res that returns the
// row's columns as they are after it, and records the change. ok is false
// when stmt matched no row, and then nothing is recorded.
func updateRow[T any](tx *txn, res resource, stmt *sql.Stmt, scan rowScanner[T], idOf func(T) int64, args ...any) (row T, ok bool, err error) {
	return changeRow(tx, rowUpdated, res, stmt, scan, idOf, args...)
}

// changeRow is insertRow and updateRow.
func changeRow[T any](tx *txn, kind changeKind, res resource, stmt *sql.Stmt, scan rowScanner[T], idOf func(T) int64, args ...any) (row T, ok bool, err error) {
	err = scan(tx.queryRow(stmt, args...), &row)
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
func deleteRow[T any](tx *txn, res resource, stmt *sql.Stmt, id int64, before T) error {
	n, err := tx.exec("delete "+res.String(), stmt, id)
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
func stageRow[T any](tx *txn, res resource, id int64, row T) {
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
