package main

import (
	"context"
	"database/sql"
	"errors"
)

// The pets' SQL. The list statements are keyset pages (see queryPage);
// TestListQueriesUseAnIndexRange checks their query plans.
const (
	petColumns          = "id, name, category_id, status"
	sqlInsertPet        = "INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?) RETURNING id"
	sqlSelectPet        = "SELECT " + petColumns + " FROM pets WHERE id = ?"
	sqlListPets         = "SELECT " + petColumns + " FROM pets WHERE id > ? ORDER BY id LIMIT ?"
	sqlListPetsByStatus = "SELECT " + petColumns + " FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?"
)

// scanPet reads a row of petColumns.
func scanPet(rows interface{ Scan(...any) error }, p *Pet) error {
	return rows.Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status)
}

// getPet returns the pet with the given id, or a *notFoundError.
func (s *store) getPet(ctx context.Context, id int64) (Pet, error) {
	var p Pet
	err := scanPet(s.selectPet.QueryRowContext(readContext(ctx), id), &p)
	if errors.Is(err, sql.ErrNoRows) {
		return Pet{}, &notFoundError{what: "pet", id: id}
	}
	if err != nil {
		return Pet{}, s.failed("select pet", err)
	}
	return p, nil
}

// listPets returns a page of pets, of the given status unless it is "".
func (s *store) listPets(ctx context.Context, status string, pr pageRequest) (page[Pet], error) {
	if status == "" {
		return queryPage(ctx, s, "list pets", s.listAll, pr, scanPet)
	}
	return queryPage(ctx, s, "list pets", s.listByState, pr, scanPet, status)
}

// countByStatus counts the pets of each status, for the metrics.
func (s *store) countByStatus(ctx context.Context) (map[string]int64, error) {
	rows, err := s.reader.QueryContext(ctx, "SELECT status, count(*) FROM pets GROUP BY status")
	if err != nil {
		return nil, s.failed("count pets", err)
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			return nil, s.failed("count pets", err)
		}
		counts[status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, s.failed("count pets", err)
	}
	return counts, nil
}

// createPet stores p and returns it with its new id. It returns only once the
// row is committed, and with synchronous=FULL, on disk.
func (s *store) createPet(ctx context.Context, p newPet) (Pet, error) {
	return write(ctx, s, func(tx *txn) (Pet, error) { return tx.insertPet(p) })
}

// seed stores pets in one transaction when the database holds no pet yet,
// and reports how many it stored (0 when the database was not empty), so
// that restarting with the same -seed never adds them twice.
func (s *store) seed(ctx context.Context, pets []newPet) (int, error) {
	return write(ctx, s, func(tx *txn) (int, error) {
		var hasPets bool
		if err := tx.tx.QueryRowContext(tx.ctx, "SELECT EXISTS (SELECT 1 FROM pets)").Scan(&hasPets); err != nil {
			return 0, tx.st.failed("seed", err)
		}
		if hasPets {
			return 0, nil
		}
		for _, p := range pets {
			if _, err := tx.insertPet(p); err != nil {
				return 0, err
			}
		}
		return len(pets), nil
	})
}

// insertPet adds p and returns it with its id, which is greater than every
// id before it (AUTOINCREMENT).
func (tx *txn) insertPet(p newPet) (Pet, error) {
	var id int64
	if err := tx.tx.StmtContext(tx.ctx, tx.st.insertPet).QueryRowContext(tx.ctx, p.Name, p.CategoryID, p.Status).Scan(&id); err != nil {
		return Pet{}, tx.st.failedWrite("insert pet", err)
	}
	tx.changes.appendedTo(petsResource)
	return Pet{ID: id, Name: p.Name, CategoryID: p.CategoryID, Status: p.Status}, nil
}

// pageRequest asks for one keyset page: up to limit rows with an id greater
// than after, in ascending id order.
type pageRequest struct {
	after int64
	limit int
}

// page is one page of a keyset-paginated list.
type page[T any] struct {
	items []T
	more  bool // more rows match after the last one in items
}

// queryPage runs a list statement whose last two parameters are after and
// the row limit, with args before them, and scans each row with scan. It asks
// for one row more than the page holds, which tells whether another page
// exists without a second query.
func queryPage[T any](ctx context.Context, s *store, what string, stmt *sql.Stmt, pr pageRequest, scan func(interface{ Scan(...any) error }, *T) error, args ...any) (page[T], error) {
	rows, err := stmt.QueryContext(readContext(ctx), append(args, pr.after, pr.limit+1)...)
	if err != nil {
		return page[T]{}, s.failed(what, err)
	}
	defer rows.Close()
	items := make([]T, 0, pr.limit+1)
	for rows.Next() {
		var item T
		if err := scan(rows, &item); err != nil {
			return page[T]{}, s.failed(what, err)
		}
		items = append(items, item)
	}
	if err := rows.Err(); err != nil {
		return page[T]{}, s.failed(what, err)
	}
	if len(items) > pr.limit {
		return page[T]{items: items[:pr.limit], more: true}, nil
	}
	return page[T]{items: items}, nil
}
