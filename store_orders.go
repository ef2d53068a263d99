package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The orders' SQL. An order sells one pet, and every change of an order
// changes its pet in the same transaction, so that the catalogue and the
// orders always agree: a placed order's pet is pending, a delivered
// order's pet was sold by it, a cancelled order gave its pet back.

const (
	orderColumns = "id, pet_id, status, placed_at, updated_at"
	// sqlInsertOrder places an order for a pet only while the pet is
	// available, in one statement: whatever runs around it, one order only
	// can take a pet.
	sqlInsertOrder        = "INSERT INTO orders (pet_id, status, placed_at, updated_at) SELECT id, 'placed', ?, ? FROM pets WHERE id = ? AND status = 'available' RETURNING " + orderColumns
	sqlSelectOrder        = "SELECT " + orderColumns + " FROM orders WHERE id = ?"
	sqlUpdateOrder        = "UPDATE orders SET status = ?, updated_at = ? WHERE id = ? RETURNING " + orderColumns
	sqlListOrders         = "SELECT " + orderColumns + " FROM orders WHERE id > ? ORDER BY id LIMIT ?"
	sqlListOrdersByStatus = "SELECT " + orderColumns + " FROM orders WHERE status = ? AND id > ? ORDER BY id LIMIT ?"
	// sqlClaimPet makes the pet of a new order pending.
	sqlClaimPet = "UPDATE pets SET status = 'pending' WHERE id = ? AND status = 'available' RETURNING " + petColumns
	// sqlSettlePet gives a pending pet the status its order's change implies.
	sqlSettlePet      = "UPDATE pets SET status = ? WHERE id = ? AND status = 'pending' RETURNING " + petColumns
	sqlPlacedOrderOf  = "SELECT id FROM orders WHERE pet_id = ? AND status = 'placed'"
	sqlCountOrdersOf  = "SELECT count(*) FROM orders WHERE pet_id = ?"
	sqlPetStatusOfOne = "SELECT status FROM pets WHERE id = ?"
)

// orderStatements are the prepared statements of orders.
type orderStatements struct {
	selectOne, selectOneTx, placedOf, countOf, petStatusOf, list, listByState *sql.Stmt
	// The writes of orders and of their pets, which only the funnel runs
	// (store_changes.go).
	insert, update, claimPet, settlePet rowStatement
}

// statements declares the orders' statements for prepare.
func (ost *orderStatements) statements(s *store) []statement {
	return []statement{
		{s.writer, &ost.insert, sqlInsertOrder},
		{s.reader, &ost.selectOne, sqlSelectOrder},
		{s.writer, &ost.selectOneTx, sqlSelectOrder},
		{s.writer, &ost.update, sqlUpdateOrder},
		{s.writer, &ost.claimPet, sqlClaimPet},
		{s.writer, &ost.settlePet, sqlSettlePet},
		{s.writer, &ost.placedOf, sqlPlacedOrderOf},
		{s.writer, &ost.countOf, sqlCountOrdersOf},
		{s.writer, &ost.petStatusOf, sqlPetStatusOfOne},
		{s.reader, &ost.list, sqlListOrders},
		{s.reader, &ost.listByState, sqlListOrdersByStatus},
	}
}

// scanOrder reads a row of orderColumns.
func scanOrder(row interface{ Scan(...any) error }, o *Order) error {
	var placed, updated int64
	if err := row.Scan(&o.ID, &o.PetID, &o.Status, &placed, &updated); err != nil {
		return err
	}
	o.PlacedAt, o.UpdatedAt = time.UnixMilli(placed).UTC(), time.UnixMilli(updated).UTC()
	return nil
}

// getOrder returns the order with the given id, or a *notFoundError.
func (s *store) getOrder(ctx context.Context, id int64) (Order, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	var o Order
	err := scanOrder(s.orderStmts.selectOne.QueryRowContext(ctx, id), &o)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, &notFoundError{what: "order", id: id}
	}
	if err != nil {
		return Order{}, s.failed("select order", err)
	}
	return o, nil
}

// listOrders returns a page of orders, of the given status unless it is "".
func (s *store) listOrders(ctx context.Context, status string, pr pageRequest) (page[Order], error) {
	if status == "" {
		return queryPage(ctx, s, "list orders", s.orderStmts.list, pr, scanOrder)
	}
	return queryPage(ctx, s, "list orders", s.orderStmts.listByState, pr, scanOrder, status)
}

// unknownPet refuses an order for a pet that does not exist.
type unknownPet struct{ petID int64 }

func (e *unknownPet) Error() string { return fmt.Sprintf("refused: no pet has id %d", e.petID) }

func (*unknownPet) isRefusal() {}

// petNotAvailable refuses an order for a pet that is not available.
type petNotAvailable struct {
	petID  int64
	status string // the pet's
}

func (e *petNotAvailable) Error() string {
	return fmt.Sprintf("refused: pet %d is %s, not available", e.petID, e.status)
}

func (*petNotAvailable) isRefusal() {}

// invalidTransition refuses moving an order to a status it cannot take
// (orderMayMove).
type invalidTransition struct {
	orderID  int64
	from, to string // the order's status, and the one asked for
}

func (e *invalidTransition) Error() string {
	return fmt.Sprintf("refused: order %d cannot move from %s to %s", e.orderID, e.from, e.to)
}

func (*invalidTransition) isRefusal() {}

// placeOrder places an order for the pet petID at the instant at: the pet
// goes from available to pending. It refuses a pet that does not exist (the
// request names something that is not there) and a pet that is not
// available, writing nothing.
func (tx *txn) placeOrder(petID int64, at time.Time) (outcome[Order], error) {
	// The order first, then its pet: the records, and so the events, say
	// the cause before its consequence.
	ms := at.UnixMilli()
	o, ok, err := insertRow(tx, ordersResource, tx.st.orderStmts.insert, scanOrder, Order.rowID, ms, ms, petID)
	if err != nil {
		return outcome[Order]{}, err
	}
	if !ok {
		var status string
		err := tx.queryRow(tx.st.orderStmts.petStatusOf, petID).Scan(&status)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return refuse[Order](&unknownPet{petID: petID})
		case err != nil:
			return outcome[Order]{}, tx.st.failed("read pet status", err)
		}
		return refuse[Order](&petNotAvailable{petID: petID, status: status})
	}
	if _, ok, err := updateRow(tx, petsResource, tx.st.orderStmts.claimPet, scanPet, Pet.rowID, petID); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("order %d placed for pet %d, which is no longer available: the catalogue and the orders disagree", o.ID, petID)
		}
		return outcome[Order]{}, err
	}
	return outcome[Order]{value: o}, nil
}

// orderChange is an order after a change, and the status it had before.
type orderChange struct {
	Order
	from string // == Status when nothing changed
}

// updateOrder moves the order id to the status to at the instant at, and
// its pet with it: placed to delivered makes the pet sold, placed to
// cancelled makes it available. Asking for the status the order has changes
// nothing. It refuses an order that does not exist and any other
// transition.
func (tx *txn) updateOrder(id int64, to string, at time.Time) (outcome[orderChange], error) {
	var o Order
	err := scanOrder(tx.queryRow(tx.st.orderStmts.selectOneTx, id), &o)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return refuse[orderChange](&notFoundError{what: "order", id: id})
	case err != nil:
		return outcome[orderChange]{}, tx.st.failed("select order", err)
	case o.Status == to:
		return outcome[orderChange]{value: orderChange{Order: o, from: o.Status}}, nil
	case !orderMayMove(o.Status, to):
		return refuse[orderChange](&invalidTransition{orderID: id, from: o.Status, to: to})
	}
	// A wall clock stepped back never makes an order change before it was
	// placed.
	ms := max(at.UnixMilli(), o.PlacedAt.UnixMilli())
	from := o.Status
	o, ok, err := updateRow(tx, ordersResource, tx.st.orderStmts.update, scanOrder, Order.rowID, to, ms, id)
	if err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("update order %d: the row read in this transaction is gone", id)
		}
		return outcome[orderChange]{}, err
	}
	if _, ok, err := updateRow(tx, petsResource, tx.st.orderStmts.settlePet, scanPet, Pet.rowID, petStatusAfter[to], o.PetID); err != nil || !ok {
		if err == nil {
			// A placed order's pet is pending: nothing else can change it.
			err = fmt.Errorf("order %d is placed but its pet %d is not pending: the catalogue and the orders disagree", id, o.PetID)
		}
		return outcome[orderChange]{}, err
	}
	return outcome[orderChange]{value: orderChange{Order: o, from: from}}, nil
}

// updateOrder moves the order id to the status to; see txn.updateOrder.
func (s *store) updateOrder(ctx context.Context, id int64, to string, at time.Time) (orderChange, error) {
	o, err := write(ctx, s, func(tx *txn) (outcome[orderChange], error) { return tx.updateOrder(id, to, at) })
	return o.result(err)
}

// placedOrderOf returns the id of the pet's placed order, 0 when it has none.
func (tx *txn) placedOrderOf(petID int64) (int64, error) {
	var id int64
	err := tx.queryRow(tx.st.orderStmts.placedOf, petID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, tx.st.failed("find placed order", err)
	}
	return id, nil
}

// countOrdersOf counts the orders that name the pet.
func (tx *txn) countOrdersOf(petID int64) (int64, error) {
	var n int64
	if err := tx.queryRow(tx.st.orderStmts.countOf, petID).Scan(&n); err != nil {
		return 0, tx.st.failed("count orders", err)
	}
	return n, nil
}
