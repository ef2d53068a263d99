package main

import (
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
type valuesInsert struct {
	cols  int
	stmts [9]*sql.Stmt // stmts[k] inserts 1<<k rows
}

// statements declares the statements for prepare: head is the INSERT up to
// VALUES, tail what follows the rows (a RETURNING clause, or nothing).
func (v *valuesInsert) statements(db *sql.DB, head string, cols int, tail string) []statement {
	v.cols = cols
	row := "(" + strings.Repeat("?, ", cols-1) + "?)"
	out := make([]statement, len(v.stmts))
	for k := range v.stmts {
		out[k] = statement{db, &v.stmts[k], head + " VALUES " + strings.Repeat(row+", ", 1<<k-1) + row + tail}
	}
	return out
}

// each runs fn with the statement for each chunk of the rows in args (cols
// values per row), in the rows' order, and the chunk's values.
func (v *valuesInsert) each(args []any, fn func(stmt *sql.Stmt, args []any) error) error {
	for len(args) > 0 {
		k := min(bits.Len(uint(len(args)/v.cols))-1, len(v.stmts)-1)
		n := (1 << k) * v.cols
		if err := fn(v.stmts[k], args[:n]); err != nil {
			return err
		}
		args = args[n:]
	}
	return nil
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
