package main

import (
	"strconv"
	"time"
)

// The domain of orders: the Order, its statuses, the state machine that
// moves an order and, with it, its pet, its events and its wire form.

// The order statuses, and the pet statuses they imply.
const (
	orderPlaced    = "placed"
	orderDelivered = "delivered"
	orderCancelled = "cancelled"
)

// orderStatuses are the values of OrderStatus.
var orderStatuses = []string{orderPlaced, orderDelivered, orderCancelled}

// petStatusAfter is the status an order's change gives its pet: the pet
// status machine that orders drive (placed: pending; delivered: sold;
// cancelled: available again).
var petStatusAfter = map[string]string{
	orderPlaced:    "pending",
	orderDelivered: "sold",
	orderCancelled: statusAvailable,
}

// orderMayMove reports whether an order of status from may be moved to
// status to: only a placed order moves, to delivered or cancelled; both are
// final. Asking for the status an order has is no move (and no error).
func orderMayMove(from, to string) bool {
	return from == orderPlaced && (to == orderDelivered || to == orderCancelled)
}

// Order is an order as the API returns it.
type Order struct {
	ID        int64
	PetID     int64
	Status    string
	PlacedAt  time.Time
	UpdatedAt time.Time
}

// The events of orders. An order is never deleted; its events name what
// became of it: its status after the change.
const (
	eventOrderPlaced    = "order.placed"
	eventOrderDelivered = "order.delivered"
	eventOrderCancelled = "order.cancelled"
)

// eventType is the type of the event a change to o makes: its status.
func (o Order) eventType(changeKind) string { return "order." + o.Status }

// appendJSON appends o as GET returns it, for its events.
func (o Order) appendJSON(dst []byte) []byte { return appendOrder(dst, o) }

// appendOrder appends o as a JSON object. Its strings are a status and
// timestamps, which need no escaping.
func appendOrder(dst []byte, o Order) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, o.ID, 10)
	dst = append(dst, `,"petId":`...)
	dst = strconv.AppendInt(dst, o.PetID, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, o.Status...)
	dst = append(dst, `","placedAt":"`...)
	dst = o.PlacedAt.UTC().AppendFormat(dst, timeLayout)
	dst = append(dst, `","updatedAt":"`...)
	dst = o.UpdatedAt.UTC().AppendFormat(dst, timeLayout)
	return append(dst, `"}`...)
}

// rowID is the id of o, as the change records take it.
func (o Order) rowID() int64 { return o.ID }
