package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// The pets' SQL. The list statements are keyset pages (see queryPage);
// TestListQueriesUseAnIndexRange checks their query plans.
const (
	petColumns          = "id, name, category_id, status"
	sqlInsertPet        = "INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?) RETURNING " + petColumns
	sqlSelectPet        = "SELECT " + petColumns + " FROM pets WHERE id = ?"
	sqlListPets         = "SELECT " + petColumns + " FROM pets WHERE id > ? ORDER BY id LIMIT ?"
	sqlListPetsByStatus = "SELECT " + petColumns + " FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?"
	sqlUpdatePet        = "UPDATE pets SET name = ?, category_id = ?, status = ? WHERE id = ? RETURNING " + petColumns
	sqlDeletePet        = "DELETE FROM pets WHERE id = ?"
	sqlHasPets          = "SELECT EXISTS (SELECT 1 FROM pets)"
)

// lastPetID is the statement that reads the last id handed to a pet (0
// when none was), which staged pets count on from (see batchState); it runs
// under the write lock, so no other writer takes an id meanwhile.
func (d dialect) lastPetID() string {
	if d == postgresDialect {
		return "SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence('pets', 'id')::regclass), 0)"
	}
	// AUTOINCREMENT keeps there the largest id the table ever held.
	return "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'pets'), 0)"
}

// sqlInsertPetsJSON inserts the staged pets of a batch on PostgreSQL, any
// number of them, with their ids, from one parameter holding a JSON array of
// [id, name, category_id, status] arrays (one round trip), returns the rows
// inserted, and moves the ids' sequence past them. SQLite inserts them with
// statements of VALUES (see valuesInsert), and its AUTOINCREMENT follows an
// explicit id by itself.
const sqlInsertPetsJSON = `WITH inserted AS (
	INSERT INTO pets (id, name, category_id, status)
	SELECT (e->>0)::bigint, e->>1, (e->>2)::bigint, e->>3 FROM json_array_elements(?::json) WITH ORDINALITY AS t(e, n) ORDER BY n
	RETURNING ` + petColumns + `)
SELECT ` + petColumns + ` FROM inserted
CROSS JOIN (SELECT setval(pg_get_serial_sequence('pets', 'id'), (SELECT max(id) FROM inserted))) AS moved`

// petStatements are the prepared statements of pets.
type petStatements struct {
	selectOne, selectOneTx, hasAny                  *sql.Stmt
	list, listByStatus, listByID, listByIDAndStatus *sql.Stmt
	lastID                                          *sql.Stmt
	// The writes of pets, which only the funnel runs (store_changes.go).
	insert, update, delete rowStatement
	insertMany             rowStatement // PostgreSQL's
	insertRows             rowValues    // SQLite's
}

// statements declares the pets' statements for prepare.
func (ps *petStatements) statements(s *store) []statement {
	out := []statement{
		{s.writer, &ps.insert, sqlInsertPet},
		{s.writer, &ps.lastID, s.dialect.lastPetID()},
		{s.reader, &ps.selectOne, sqlSelectPet},
		{s.writer, &ps.selectOneTx, sqlSelectPet},
		{s.writer, &ps.update, sqlUpdatePet},
		{s.writer, &ps.delete, sqlDeletePet},
		{s.writer, &ps.hasAny, sqlHasPets},
		{s.reader, &ps.list, sqlListPets},
		{s.reader, &ps.listByStatus, sqlListPetsByStatus},
		{s.reader, &ps.listByID, s.dialect.listPetsByID(false)},
		{s.reader, &ps.listByIDAndStatus, s.dialect.listPetsByID(true)},
	}
	if s.dialect == postgresDialect {
		return append(out, statement{s.writer, &ps.insertMany, sqlInsertPetsJSON})
	}
	return append(out, ps.insertRows.statements(s.writer, "INSERT INTO pets (id, name, category_id, status)", 4, "")...)
}

// listPetsByID is the statement of the id filter, with a status or without.
// The ids are one parameter, a JSON array, so that one prepared statement
// serves any number of them.
func (d dialect) listPetsByID(withStatus bool) string {
	q := "SELECT " + petColumns + " FROM pets WHERE id IN (" + d.idsOfJSONArray + ")"
	if withStatus {
		q += " AND status = ?"
	}
	return q + " AND id > ? ORDER BY id LIMIT ?"
}

// outcome is the result of a write that the data may refuse: either value,
// or refused, which says why nothing was written (a *notFoundError or a
// refusal, which errors.go translates). A refusal is an answer for the
// client, not a failure of the job: its batch goes on undisturbed.
type outcome[T any] struct {
	value   T
	refused error
}

// refuse is the outcome of a write refused for err.
func refuse[T any](err error) (outcome[T], error) { return outcome[T]{refused: err}, nil }

// result returns the outcome's value, or its refusal as the error; err, the
// write's own failure, comes first.
func (o outcome[T]) result(err error) (T, error) {
	if err != nil {
		var zero T
		return zero, err
	}
	return o.value, o.refused
}

// scanPet reads a row of petColumns.
func scanPet(rows interface{ Scan(...any) error }, p *Pet) error {
	return rows.Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status)
}

// getPet returns the pet with the given id, or a *notFoundError.
func (s *store) getPet(ctx context.Context, id int64) (Pet, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	var p Pet
	err := scanPet(s.petStmts.selectOne.QueryRowContext(ctx, id), &p)
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
		return queryPage(ctx, s, "list pets", s.petStmts.list, pr, scanPet)
	}
	return queryPage(ctx, s, "list pets", s.petStmts.listByStatus, pr, scanPet, status)
}

// listPetsByID returns a page of the pets among ids that exist, of the
// given status unless it is "".
func (s *store) listPetsByID(ctx context.Context, ids []int64, status string, pr pageRequest) (page[Pet], error) {
	idArray, _ := json.Marshal(ids) // integers always encode
	if status == "" {
		return queryPage(ctx, s, "list pets by id", s.petStmts.listByID, pr, scanPet, idArray)
	}
	return queryPage(ctx, s, "list pets by id", s.petStmts.listByIDAndStatus, pr, scanPet, idArray, status)
}

// sqlCountPets sums the shards of the pets' counts (migration 0005): 48 rows
// whatever the size of the catalogue (TestListQueriesUseAnIndexRange checks
// its plan). The sum is cast so that every database answers an integer
// (PostgreSQL's sum of bigints is a numeric).
const sqlCountPets = "SELECT status, CAST(sum(n) AS BIGINT) FROM pet_counts GROUP BY status"

// countByStatus counts the pets of each status, for the metrics.
func (s *store) countByStatus(ctx context.Context) (map[string]int64, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	rows, err := s.reader.QueryContext(ctx, sqlCountPets)
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
	return writeInserts(ctx, s, func(tx *txn) (Pet, error) { return tx.insertPet(p) })
}

// seed stores pets in one transaction when the database holds no pet yet,
// and reports how many it stored (0 when the database was not empty), so
// that restarting with the same -seed never adds them twice.
func (s *store) seed(ctx context.Context, pets []newPet) (int, error) {
	return write(ctx, s, func(tx *txn) (int, error) {
		var hasPets bool
		if err := tx.queryRow(tx.st.petStmts.hasAny).Scan(&hasPets); err != nil {
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
// id before it (AUTOINCREMENT on SQLite; on PostgreSQL a sequence, and ids
// commit in their order, see writeLock). In a batch that stages, the pet is
// staged (petStage) and inserted with the others of the batch.
func (tx *txn) insertPet(p newPet) (Pet, error) {
	if b := tx.batch; b != nil && b.stage {
		stage := stageOf(tx, petsResource, func() *petStage { return &petStage{} })
		if stage.nextID == 0 {
			var last int64
			if err := tx.queryRow(tx.st.petStmts.lastID).Scan(&last); err != nil {
				return Pet{}, tx.st.failedWrite("read the last pet id", err)
			}
			stage.nextID = last + 1
		}
		pet := Pet{ID: stage.nextID, Name: p.Name, CategoryID: p.CategoryID, Status: p.Status}
		stage.nextID++
		stage.rows = append(stage.rows, pet)
		stageRow(tx, petsResource, pet.ID, pet)
		return pet, nil
	}
	pet, ok, err := insertRow(tx, petsResource, tx.st.petStmts.insert, scanPet, Pet.rowID, p.Name, p.CategoryID, p.Status)
	if err == nil && !ok {
		err = fmt.Errorf("insert pet: no row returned")
	}
	return pet, err
}

// petStage is the pets a batch's creates staged (see batchState): their
// ids taken in order from the last one, read once per batch.
type petStage struct {
	rows   []Pet // in id order
	nextID int64 // the id the next staged pet takes; 0 until read
}

func (ps *petStage) resource() resource { return petsResource }
func (ps *petStage) pending() bool      { return len(ps.rows) > 0 }

// write inserts the staged pets and checks that the rows inserted are the
// rows staged: on SQLite, that as many rows were inserted (the values are
// bound as they are, into STRICT columns); on PostgreSQL, where they go
// through JSON and casts, that the rows returned are those staged.
func (ps *petStage) write(tx *txn) error {
	staged := ps.rows
	ps.rows = nil
	if tx.st.dialect == postgresDialect {
		return writePetsJSON(tx, staged)
	}
	args := make([]any, 0, 4*len(staged))
	for _, p := range staged {
		args = append(args, p.ID, p.Name, p.CategoryID, p.Status)
	}
	n, err := tx.insertStaged(&tx.st.petStmts.insertRows, args)
	if err != nil {
		return tx.st.failedWrite("insert pets", err)
	}
	if n != int64(len(staged)) {
		return fmt.Errorf("insert pets: %d rows inserted for the %d staged", n, len(staged))
	}
	return nil
}

// writePetsJSON is petStage.write on PostgreSQL: one statement.
func writePetsJSON(tx *txn, staged []Pet) error {
	rows, err := tx.queryStaged(tx.st.petStmts.insertMany, string(appendPetRows(make([]byte, 0, 64*len(staged)), staged)))
	if err != nil {
		return tx.st.failedWrite("insert pets", err)
	}
	defer rows.Close()
	inserted := make([]Pet, 0, len(staged))
	for rows.Next() {
		var p Pet
		if err := scanPet(rows, &p); err != nil {
			return tx.st.failedWrite("insert pets", err)
		}
		inserted = append(inserted, p)
	}
	if err := rows.Err(); err != nil {
		return tx.st.failedWrite("insert pets", err)
	}
	// RETURNING promises no order.
	slices.SortFunc(inserted, func(a, b Pet) int { return cmp.Compare(a.ID, b.ID) })
	if !slices.Equal(inserted, staged) {
		return fmt.Errorf("insert pets: %d rows inserted are not the %d staged", len(inserted), len(staged))
	}
	return nil
}

// appendPetRows appends pets as the JSON array of [id, name, category_id,
// status] arrays that sqlInsertPetsJSON reads.
func appendPetRows(dst []byte, pets []Pet) []byte {
	dst = append(dst, '[')
	for i, p := range pets {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		dst = strconv.AppendInt(dst, p.ID, 10)
		dst = append(dst, ',')
		dst = appendJSONString(dst, p.Name)
		dst = append(dst, ',')
		dst = strconv.AppendInt(dst, p.CategoryID, 10)
		dst = append(dst, ',')
		dst = appendJSONString(dst, p.Status)
		dst = append(dst, ']')
	}
	return append(dst, ']')
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
// exists without a second query. On PostgreSQL the limit is written into a
// statement of its own (see store_pages.go).
func queryPage[T any](ctx context.Context, s *store, what string, stmt *sql.Stmt, pr pageRequest, scan func(interface{ Scan(...any) error }, *T) error, args ...any) (page[T], error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	args = append(args, pr.after)
	if page, sized := s.pageStatement(ctx, stmt, pr.limit+1); sized {
		stmt = page
	} else {
		args = append(args, pr.limit+1)
	}
	rows, err := stmt.QueryContext(ctx, args...)
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

// petPatch is a validated merge patch of a pet: the fields to set, nil for
// those to keep.
type petPatch struct {
	Name       *string
	CategoryID *int64
	Status     *string
}

// getPet reads the pet id inside the transaction, nil when there is none.
func (tx *txn) getPet(id int64) (*Pet, error) {
	var p Pet
	err := scanPet(tx.queryRow(tx.st.petStmts.selectOneTx, id), &p)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, tx.st.failed("select pet", err)
	}
	return &p, nil
}

// petHasOpenOrder refuses a change of a pet's status while an order of the
// pet is placed: that order decides the status.
type petHasOpenOrder struct {
	petID, orderID int64  // the pet, and its placed order
	status         string // the pet's status, which the order holds
}

func (e *petHasOpenOrder) Error() string {
	return fmt.Sprintf("refused: pet %d has order %d placed, and keeps its status %q", e.petID, e.orderID, e.status)
}

func (*petHasOpenOrder) isRefusal() {}

// petHasOrders refuses the delete of a pet that orders name: the sales
// history stays whole.
type petHasOrders struct {
	petID       int64
	orders      int64 // how many orders name the pet
	placedOrder int64 // the order of the pet that is placed, 0 when none
}

func (e *petHasOrders) Error() string {
	return fmt.Sprintf("refused: pet %d is named by %d orders (placed: %d)", e.petID, e.orders, e.placedOrder)
}

func (*petHasOrders) isRefusal() {}

// updatePet applies patch to the pet id and returns the pet as it is then.
// It refuses a pet that does not exist, and a change of status while an
// order of the pet is placed: that order decides the pet's status.
func (tx *txn) updatePet(id int64, patch petPatch) (outcome[Pet], error) {
	p, err := tx.getPet(id)
	if err != nil || p == nil {
		return outcome[Pet]{refused: &notFoundError{what: "pet", id: id}}, err
	}
	next := *p
	if patch.Name != nil {
		next.Name = *patch.Name
	}
	if patch.CategoryID != nil {
		next.CategoryID = *patch.CategoryID
	}
	if patch.Status != nil {
		next.Status = *patch.Status
	}
	if next == *p {
		return outcome[Pet]{value: next}, nil
	}
	if next.Status != p.Status {
		order, err := tx.placedOrderOf(id)
		if err != nil {
			return outcome[Pet]{}, err
		}
		if order != 0 {
			return refuse[Pet](&petHasOpenOrder{petID: id, orderID: order, status: p.Status})
		}
	}
	updated, ok, err := updateRow(tx, petsResource, tx.st.petStmts.update, scanPet, Pet.rowID, next.Name, next.CategoryID, next.Status, id)
	if err == nil && !ok {
		err = fmt.Errorf("update pet %d: the row read in this transaction is gone", id)
	}
	return outcome[Pet]{value: updated}, err
}

// deletePet deletes the pet id. It refuses a pet that does not exist, and
// one that an order names: the sales history stays whole.
func (tx *txn) deletePet(id int64) (outcome[struct{}], error) {
	p, err := tx.getPet(id)
	if err != nil || p == nil {
		return outcome[struct{}]{refused: &notFoundError{what: "pet", id: id}}, err
	}
	n, err := tx.countOrdersOf(id)
	if err != nil {
		return outcome[struct{}]{}, err
	}
	if n > 0 {
		order, err := tx.placedOrderOf(id)
		if err != nil {
			return outcome[struct{}]{}, err
		}
		return refuse[struct{}](&petHasOrders{petID: id, orders: n, placedOrder: order})
	}
	return outcome[struct{}]{}, deleteRow(tx, petsResource, tx.st.petStmts.delete, id, *p)
}

// updatePet applies patch to the pet id; see txn.updatePet.
func (s *store) updatePet(ctx context.Context, id int64, patch petPatch) (Pet, error) {
	o, err := write(ctx, s, func(tx *txn) (outcome[Pet], error) { return tx.updatePet(id, patch) })
	return o.result(err)
}

// deletePet deletes the pet id; see txn.deletePet.
func (s *store) deletePet(ctx context.Context, id int64) error {
	o, err := write(ctx, s, func(tx *txn) (outcome[struct{}], error) { return tx.deletePet(id) })
	_, err = o.result(err)
	return err
}
