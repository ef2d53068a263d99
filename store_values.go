package main

import (
	"context"
	"database/sql"
	"math/bits"
	"strings"
)

// valuesInsert inserts many rows in a few statements of VALUES, on SQLite.
//
// A write batch inserts its staged pets and its events many rows at once.
// On PostgreSQL that is one statement reading the rows out of one JSON
// parameter: one round trip, whatever the count. On SQLite there is no
// round trip to save, and taking the JSON apart (a parse of the array, then
// of each row for each of its fields) cost more than the inserts
// themselves: a third of the writer's time per row. So there the rows are
// bound as parameters: one prepared statement of 2^k rows for each k up to
// 8 (256 rows, maxBatch), and n rows run as the statements of n's binary
// digits, largest first (37 rows: 32, 4 and 1); more than 256 rows (a
// batch's events can outnumber its jobs) take the largest as many times as
// it fits first.
//
// Only the one-row statement is prepared with the store. A larger one is
// prepared once a batch has needed it (see prepareWanted): until then that
// batch runs the largest prepared size as many times as it takes. Parsing
// all nine up front (511 rows of 4 values, twice: the pets' and the events')
// was three quarters of the time a store took to open, and a store that
// never writes more than a few rows at once never needs them.
type valuesInsert struct {
	cols    int
	db      *sql.DB
	queries [9]string
	stmts   [9]*sql.Stmt // stmts[k] inserts 1<<k rows, once prepared
	wanted  [9]bool      // a batch needed stmts[k] before it was prepared
}

// statements declares the statements for prepare: head is the INSERT up to
// VALUES, tail what follows the rows (a RETURNING clause, or nothing). Only
// the one-row statement is declared; the others wait for prepareWanted.
func (v *valuesInsert) statements(db *sql.DB, head string, cols int, tail string) []statement {
	v.cols, v.db = cols, db
	row := "(" + strings.Repeat("?, ", cols-1) + "?)"
	for k := range v.queries {
		v.queries[k] = head + " VALUES " + strings.Repeat(row+", ", 1<<k-1) + row + tail
	}
	return []statement{{db, &v.stmts[0], v.queries[0]}}
}

// each runs fn with the statement for each chunk of the rows in args (cols
// values per row), in the rows' order, and the chunk's values. A chunk whose
// statement is not prepared yet is asked for, and runs meanwhile as the
// largest prepared ones that fit. It runs in the writer's goroutine, as
// prepareWanted does.
func (v *valuesInsert) each(args []any, fn func(stmt *sql.Stmt, args []any) error) error {
	for len(args) > 0 {
		k := min(bits.Len(uint(len(args)/v.cols))-1, len(v.stmts)-1)
		chunk := args[:(1<<k)*v.cols]
		args = args[len(chunk):]
		if v.stmts[k] == nil {
			v.wanted[k] = true
		}
		for len(chunk) > 0 {
			j := bits.Len(uint(len(chunk)/v.cols)) - 1
			for v.stmts[j] == nil {
				j-- // the one-row statement is always there
			}
			n := (1 << j) * v.cols
			if err := fn(v.stmts[j], chunk[:n]); err != nil {
				return err
			}
			chunk = chunk[n:]
		}
	}
	return nil
}

// prepareWanted prepares the statements that batches needed and did not
// have, and returns them, for the store to close. The writer calls it
// between batches: the writer pool's one connection is then free, where
// inside a batch's transaction a prepare on the pool would wait for it
// forever. A statement that fails to prepare is asked for again by the next
// batch that needs it, which runs smaller ones meanwhile.
func (v *valuesInsert) prepareWanted(ctx context.Context, d dialect) ([]*sql.Stmt, error) {
	var prepared []*sql.Stmt
	for k, wanted := range v.wanted {
		if !wanted || v.stmts[k] != nil {
			continue
		}
		stmt, err := v.db.PrepareContext(ctx, d.sql(v.queries[k]))
		if err != nil {
			return prepared, err
		}
		v.stmts[k], v.wanted[k] = stmt, false
		prepared = append(prepared, stmt)
	}
	return prepared, nil
}

// exec inserts the rows of args and returns how many rows were inserted.
func (v *valuesInsert) exec(tx *txn, args []any) (int64, error) {
	var inserted int64
	err := v.each(args, func(stmt *sql.Stmt, args []any) error {
		res, err := tx.stmt(stmt).ExecContext(tx.ctx, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		inserted += n
		return err
	})
	return inserted, err
}

// queryIDs inserts the rows of args with statements whose tail is
// "RETURNING id", and appends the ids to ids (RETURNING promises no order).
func (v *valuesInsert) queryIDs(tx *txn, args []any, ids []int64) ([]int64, error) {
	err := v.each(args, func(stmt *sql.Stmt, args []any) error {
		rows, err := tx.stmt(stmt).QueryContext(tx.ctx, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	return ids, err
}
