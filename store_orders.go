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

// The order statuses, and the pet statuses they imply.
const (
	orderPlaced    = "placed"
	orderDelivered = "delivered"
	orderCancelled = "cancelled"
)

// orderStatuses are the values of OrderStatus.
var orderStatuses = []string{orderPlaced, orderDelivered, orderCancelled}

// petStatusAfter is the status an order's change gives its pet.
var petStatusAfter = map[string]string{
	orderPlaced:    "pending",
	orderDelivered: "sold",
	orderCancelled: statusAvailable,
}

const (
	orderColumns          = "id, pet_id, status, placed_at, updated_at"
	sqlInsertOrder        = "INSERT INTO orders (pet_id, status, placed_at, updated_at) VALUES (?, 'placed', ?, ?) RETURNING id"
	sqlSelectOrder        = "SELECT " + orderColumns + " FROM orders WHERE id = ?"
	sqlUpdateOrder        = "UPDATE orders SET status = ?, updated_at = ? WHERE id = ?"
	sqlListOrders         = "SELECT " + orderColumns + " FROM orders WHERE id > ? ORDER BY id LIMIT ?"
	sqlListOrdersByStatus = "SELECT " + orderColumns + " FROM orders WHERE status = ? AND id > ? ORDER BY id LIMIT ?"
	// sqlClaimPet takes an available pet for an order in one statement:
	// whatever runs around it, one order only can take a pet.
	sqlClaimPet = "UPDATE pets SET status = 'pending' WHERE id = ? AND status = 'available'"
	// sqlSettlePet gives a pending pet the status its order's change implies.
	sqlSettlePet      = "UPDATE pets SET status = ? WHERE id = ? AND status = 'pending'"
	sqlPlacedOrderOf  = "SELECT id FROM orders WHERE pet_id = ? AND status = 'placed'"
	sqlCountOrdersOf  = "SELECT count(*) FROM orders WHERE pet_id = ?"
	sqlPetStatusOfOne = "SELECT status FROM pets WHERE id = ?"
)

// orderStatements are the prepared statements of orders.
type orderStatements struct {
	insert, selectOne, selectOneTx, update, claimPet, settlePet, placedOf, countOf, list, listByState *sql.Stmt
}

// Order is an order as the API returns it.
type Order struct {
	ID        int64
	PetID     int64
	Status    string
	PlacedAt  time.Time
	UpdatedAt time.Time
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

// placeOrder places an order for the pet petID at the instant at: the pet
// goes from available to pending. It refuses a pet that does not exist (the
// request names something that is not there) and a pet that is not
// available, writing nothing.
func (tx *txn) placeOrder(petID int64, at time.Time) (outcome[Order], error) {
	res, err := tx.tx.StmtContext(tx.ctx, tx.st.orderStmts.claimPet).ExecContext(tx.ctx, petID)
	if err != nil {
		return outcome[Order]{}, tx.st.failedWrite("claim pet", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return outcome[Order]{}, tx.st.failed("claim pet", err)
		}
		var status string
		err := tx.tx.QueryRowContext(tx.ctx, tx.st.dialect.sql(sqlPetStatusOfOne), petID).Scan(&status)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return refuse[Order](errorf(codeUnknownPet, "no pet has id %d; an order names an existing pet (see GET /v1/pets)", petID))
		case err != nil:
			return outcome[Order]{}, tx.st.failed("read pet status", err)
		}
		return refuse[Order](errorf(codePetNotAvailable, "pet %d is %s, not available: only an available pet can be ordered", petID, status))
	}
	ms := at.UnixMilli()
	o := Order{PetID: petID, Status: orderPlaced, PlacedAt: time.UnixMilli(ms).UTC(), UpdatedAt: time.UnixMilli(ms).UTC()}
	if err := tx.tx.StmtContext(tx.ctx, tx.st.orderStmts.insert).QueryRowContext(tx.ctx, petID, ms, ms).Scan(&o.ID); err != nil {
		return outcome[Order]{}, tx.st.failedWrite("insert order", err)
	}
	tx.changes.changedIn(petsResource, petID)
	tx.changes.appendedTo(ordersResource)
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
	err := scanOrder(tx.tx.StmtContext(tx.ctx, tx.st.orderStmts.selectOneTx).QueryRowContext(tx.ctx, id), &o)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return refuse[orderChange](&notFoundError{what: "order", id: id})
	case err != nil:
		return outcome[orderChange]{}, tx.st.failed("select order", err)
	case o.Status == to:
		return outcome[orderChange]{value: orderChange{Order: o, from: o.Status}}, nil
	case o.Status != orderPlaced || to == orderPlaced:
		return refuse[orderChange](errorf(codeInvalidTransition, "order %d is %s and cannot become %s: only a placed order changes, to delivered or to cancelled", id, o.Status, to))
	}
	res, err := tx.tx.StmtContext(tx.ctx, tx.st.orderStmts.settlePet).ExecContext(tx.ctx, petStatusAfter[to], o.PetID)
	if err != nil {
		return outcome[orderChange]{}, tx.st.failedWrite("settle pet", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		// A placed order's pet is pending: nothing else can change it.
		return outcome[orderChange]{}, fmt.Errorf("order %d is placed but its pet %d is not pending (%d rows, %v): the catalogue and the orders disagree", id, o.PetID, n, err)
	}
	// A wall clock stepped back never makes an order change before it was
	// placed.
	ms := max(at.UnixMilli(), o.PlacedAt.UnixMilli())
	if _, err := tx.tx.StmtContext(tx.ctx, tx.st.orderStmts.update).ExecContext(tx.ctx, to, ms, id); err != nil {
		return outcome[orderChange]{}, tx.st.failedWrite("update order", err)
	}
	tx.changes.changedIn(petsResource, o.PetID)
	tx.changes.changedIn(ordersResource, id)
	from := o.Status
	o.Status, o.UpdatedAt = to, time.UnixMilli(ms).UTC()
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
	err := tx.tx.StmtContext(tx.ctx, tx.st.orderStmts.placedOf).QueryRowContext(tx.ctx, petID).Scan(&id)
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
	if err := tx.tx.StmtContext(tx.ctx, tx.st.orderStmts.countOf).QueryRowContext(tx.ctx, petID).Scan(&n); err != nil {
		return 0, tx.st.failed("count orders", err)
	}
	return n, nil
}
