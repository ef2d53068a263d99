package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"
)

// The store area: orders that sell pets (see store_orders.go for the rules
// that keep the catalogue and the orders in agreement).

// listOrdersSpec is what listOrders accepts.
var listOrdersSpec = listSpec{operation: "listOrders", item: "order", path: "/v1/store/orders", statuses: orderStatuses}

// placeOrder is the placeOrder operation, POST /v1/store/orders with a
// NewOrder body ({"petId": N}), as the create handler runs it (see
// idempotent). now stamps the order; placed counts the orders placed.
func placeOrder(now func() time.Time, placed func()) creator {
	return creator{operation: "placeOrder", path: "/v1/store/orders", onCreate: placed, decode: func(body []byte) (creation, error) {
		var petID int64
		err := decodeObject(body, object{name: "NewOrder", example: `{"petId": 1}`, fields: []field{
			{name: "petId", required: true, decode: func(raw json.RawMessage) error { return decodeID("petId", raw, &petID) }},
		}})
		if err != nil {
			return creation{}, err
		}
		return creation{
			fingerprint: func() [sha256.Size]byte { return fingerprintOf(petID) },
			write: func(tx *txn) (outcome[created], error) {
				o, err := tx.placeOrder(petID, now())
				if err != nil || o.refused != nil {
					return outcome[created]{refused: o.refused}, err
				}
				return outcome[created]{value: created{id: o.value.ID, body: orderBody(o.value)}}, nil
			},
		}, nil
	}}
}

// handleListOrders serves listOrders: GET /v1/store/orders?limit=&status=&after=.
// Pages are cached encoded (see http_cache.go).
func handleListOrders(log *slog.Logger, st *store) http.Handler {
	return handleList(log, listOrdersSpec, st.responseCache(ordersResource, resourceSpecs[ordersResource].listCache),
		func(ctx context.Context, q listQuery) (page[Order], error) {
			return st.listOrders(ctx, q.status, q.page)
		},
		ordersBody, func(o Order) int64 { return o.ID })
}

// handleGetOrder serves getOrder: GET /v1/store/orders/{orderId}. Found
// orders are cached encoded (see http_cache.go).
func handleGetOrder(log *slog.Logger, st *store) http.Handler {
	return handleItem(log, st.responseCache(ordersResource, resourceSpecs[ordersResource].itemCache), orderIDs.of, func(ctx context.Context, id int64) ([]byte, error) {
		o, err := st.getOrder(ctx, id)
		if err != nil {
			return nil, err
		}
		return orderBody(o), nil
	})
}

// handleUpdateOrder serves updateOrder: PATCH /v1/store/orders/{orderId} with
// {"status": "delivered"} or {"status": "cancelled"}, as JSON or as a JSON
// Merge Patch. now stamps the change; changed counts each transition.
func handleUpdateOrder(log *slog.Logger, st *store, now func() time.Time, changed func(from, to string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := orderIDs.of(w, r, log)
		if !ok {
			return
		}
		body, err := readJSONBody(w, r, mergePatchType)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		var to string
		err = decodeObject(body, object{name: "OrderUpdate", example: `{"status": "delivered"}`, fields: []field{
			{name: "status", required: true, decode: func(raw json.RawMessage) error { return decodeEnum("status", orderStatuses, raw, &to) }},
		}})
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		o, err := st.updateOrder(r.Context(), id, to, now())
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		if o.from != o.Status {
			changed(o.from, o.Status)
		}
		writeBody(w, http.StatusOK, orderBody(o.Order))
	})
}
