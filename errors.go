package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// The error codes the API uses in the "code" field. This is the whole set;
// docs/api.md lists them (a test holds it to this block), and a client may
// switch on them.
const (
	codeUnauthorized         = "unauthorized"
	codeInsufficientScope    = "insufficient_scope"
	codeHTTPSRequired        = "https_required"
	codeInvalidBody          = "invalid_body"
	codeInvalidField         = "invalid_field"
	codeInvalidParameter     = "invalid_parameter"
	codeInvalidHeader        = "invalid_header"
	codeNotFound             = "not_found"
	codeMethodNotAllowed     = "method_not_allowed"
	codeGone                 = "gone"
	codeCursorExpired        = "cursor_expired"
	codePayloadTooLarge      = "payload_too_large"
	codeHeaderTooLarge       = "header_too_large"
	codeUnsupportedMediaType = "unsupported_media_type"
	codeInternal             = "internal"
	codeUnavailable          = "unavailable"
	codeReplicaUnavailable   = "replica_unavailable"
	codeIdempotencyConflict  = "idempotency_key_conflict"
	codeIdempotencyMismatch  = "idempotency_key_mismatch"
	codeRateLimited          = "rate_limited"
	codeUnknownPet           = "unknown_pet"
	codePetNotAvailable      = "pet_not_available"
	codeInvalidTransition    = "invalid_transition"
	codePetHasOpenOrder      = "pet_has_open_order"
	codePetHasOrders         = "pet_has_orders"
)

// statusOf maps each error code to its HTTP status: the one table that says
// which status a code travels with.
func statusOf(code string) int {
	switch code {
	case codeInvalidBody, codeInvalidField, codeInvalidParameter, codeInvalidHeader:
		return http.StatusBadRequest
	case codeUnauthorized:
		return http.StatusUnauthorized
	case codeInsufficientScope, codeHTTPSRequired:
		return http.StatusForbidden
	case codeNotFound:
		return http.StatusNotFound
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case codeGone, codeCursorExpired:
		return http.StatusGone
	case codePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeHeaderTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case codeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case codeUnavailable, codeReplicaUnavailable:
		return http.StatusServiceUnavailable
	case codeIdempotencyConflict, codePetNotAvailable, codeInvalidTransition, codePetHasOpenOrder, codePetHasOrders:
		return http.StatusConflict
	case codeIdempotencyMismatch, codeUnknownPet:
		return http.StatusUnprocessableEntity
	case codeRateLimited:
		return http.StatusTooManyRequests
	default:
		return http.StatusInternalServerError
	}
}

// unavailableRetryAfter is the Retry-After of a 503 that says nothing else.
const unavailableRetryAfter = "2"

// apiError is an error the client is meant to see. It is also the JSON error
// body of every non-2xx answer: {"code", "message", "status"}.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Status  int    `json:"status"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// errorf builds an apiError whose status follows from its code.
func errorf(code, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...), Status: statusOf(code)}
}

// apiErrorOf is the one table from what the lower layers report to what a
// client is told. An *apiError passes as it is; the store's errors become
// the codes below (and so, through statusOf, their statuses); anything else,
// a closed store included, is a failure of ours, for which it returns nil.
func apiErrorOf(err error) *apiError {
	if e, ok := errors.AsType[*apiError](err); ok {
		return e
	}
	if nf, ok := errors.AsType[*notFoundError](err); ok {
		return errorf(codeNotFound, "%s", nf.Error())
	}
	if rf, ok := errors.AsType[refusal](err); ok {
		return refusalError(rf)
	}
	if wl, ok := errors.AsType[*webhookLimitError](err); ok {
		return errorf(codeInvalidBody, "%d webhook subscriptions exist, the most the service keeps (all keys together); delete one (DELETE /v1/webhooks/{id}) before adding another", wl.max)
	}
	switch {
	case errors.Is(err, errUnwritable):
		return errorf(codeUnavailable, "the change was not stored: the database cannot be written right now (disk full or read-only storage); reads still work; retry later")
	case errors.Is(err, errReplicaUnavailable):
		return errorf(codeReplicaUnavailable, "the write may have been committed, but it could not be copied to the replica in time, so it is not acknowledged: retry it with the same Idempotency-Key to get its answer once the replica is reached (never a second resource); a change without one may be sent again as it is")
	case errors.Is(err, errUnavailable):
		return errorf(codeUnavailable, "the database did not answer, so the request may not have been carried out; retry it in a few seconds (a create with the same Idempotency-Key is never carried out twice)")
	}
	return nil
}

// refusalError says what the data's refusal of a write means to a client,
// and what the client can do about it: every refusal of the store, each a
// type of its own, is worded here.
func refusalError(rf refusal) *apiError {
	switch rf := rf.(type) {
	case *petHasOpenOrder:
		return errorf(codePetHasOpenOrder, "pet %d has order %d placed, so its status (%s) follows that order: deliver or cancel the order (PATCH %s) instead; its name and category can change",
			rf.petID, rf.orderID, rf.status, ordersResource.pathOf(rf.orderID))
	case *petHasOrders:
		hint := "a sold or returned pet can be given another status with PATCH instead"
		if rf.placedOrder != 0 {
			hint = fmt.Sprintf("its order %d is placed and decides its status: deliver or cancel that order (PATCH %s)", rf.placedOrder, ordersResource.pathOf(rf.placedOrder))
		}
		return errorf(codePetHasOrders, "pet %d is named by %s, its sales history, so it cannot be deleted; %s", rf.petID, plural(rf.orders, "order"), hint)
	case *unknownPet:
		return errorf(codeUnknownPet, "no pet has id %d; an order names an existing pet (see GET %s)", rf.petID, resourceSpecs[petsResource].collection)
	case *petNotAvailable:
		return errorf(codePetNotAvailable, "pet %d is %s, not available: only an available pet can be ordered", rf.petID, rf.status)
	case *invalidTransition:
		return errorf(codeInvalidTransition, "order %d is %s and cannot become %s: only a placed order changes, to delivered or to cancelled", rf.orderID, rf.from, rf.to)
	}
	return nil
}

// errClientGone is what reading a request body returns when the client
// closed the connection before sending all of it.
var errClientGone = errors.New("the client closed the connection before the request was complete")

// clientGone reports whether err says that the client went away: it hung up
// while its body was being read, or its request's context ended (net/http
// cancels it when the connection closes) and the work was abandoned.
func clientGone(r *http.Request, err error) bool {
	return errors.Is(err, errClientGone) || (errors.Is(err, context.Canceled) && r.Context().Err() != nil)
}

// writeError answers with err as the JSON error body, translated by
// apiErrorOf. A failure of ours gets a bare 500 and its details go to the log
// only, so no SQL, path or stack ever reaches a client; a 5xx the client is
// told about (the disk is full) is logged as a warning with its cause. A
// client that went away is no failure of ours: nothing is sent, and the
// request is counted apart (statusClientGone).
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if clientGone(r, err) {
		if info := requestInfoFrom(r.Context()); info != nil {
			info.gone = true
		}
		return
	}
	e := apiErrorOf(err)
	switch {
	case e == nil:
		log.ErrorContext(r.Context(), "request failed", "method", abbreviate(r.Method), "path", abbreviate(r.URL.Path), "err", err)
		e = errorf(codeInternal, "the server failed to complete the request; the failure has been logged")
	case e.Status >= 500 && !errors.As(err, new(*apiError)):
		log.WarnContext(r.Context(), "request refused", "method", abbreviate(r.Method), "path", abbreviate(r.URL.Path), "code", e.Code, "err", err)
	}
	if refusedUnread(e.Code) && r.ContentLength != 0 {
		// The answer comes before the body was read: net/http would then
		// wait for up to 256 KiB of it, to discard it, before the
		// connection serves another request, so a caller without a key
		// could hold a connection slot for the whole read timeout by
		// announcing a body and never sending it. The connection is
		// closed after the answer instead, and the wait for the body is
		// cut to unreadBodyGrace: long enough for a client that did send
		// its body (closing with it unread could reset the connection
		// before the client reads the answer). A body over the limit
		// needs no deadline: net/http reads none of a declared length
		// that large, and stops a body cut by MaxBytesReader itself.
		w.Header().Set("Connection", "close")
		if e.Code != codePayloadTooLarge {
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(unreadBodyGrace))
		}
	}
	if e.Code == codeInsufficientScope {
		// Whoever answers it (requireScope, or a handler that finds the key
		// lacks a scope past the route's), a 403 for a scope the key lacks
		// has the outcome forbidden in the access log and the metrics (see
		// observe), and RFC 6750's header (section 3.1).
		if info := requestInfoFrom(r.Context()); info != nil {
			info.forbidden = true
		}
		if w.Header().Get("WWW-Authenticate") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope"`)
		}
	}
	if (e.Code == codeUnavailable || e.Code == codeReplicaUnavailable) && w.Header().Get("Retry-After") == "" {
		// RFC 9110, section 10.2.3: when to try again. The causes (a full
		// disk, a database restarting) last seconds to minutes.
		w.Header().Set("Retry-After", unavailableRetryAfter)
	}
	writeJSON(w, e.Status, e)
}

// writeInsufficientScope answers 403 insufficient_scope to a request whose
// key lacks need, naming the scope in the message, in the WWW-Authenticate
// header of RFC 6750, section 3.1, and in the metrics (the scope label of
// petstore_forbidden_total): the one way to refuse a key for its scope.
func writeInsufficientScope(w http.ResponseWriter, r *http.Request, log *slog.Logger, need scope) {
	if info := requestInfoFrom(r.Context()); info != nil {
		info.lacked = need
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope="%s"`, need))
	writeError(w, r, log, errorf(codeInsufficientScope, "this API key lacks the scope %s, which this operation needs; ask the operator for a key that holds it", need))
}

// unreadBodyGrace is how long a connection refused before its body was read
// waits for that body before it is closed (see writeError).
const unreadBodyGrace = 250 * time.Millisecond

// refusedUnread reports whether an error of this code is answered before the
// request's body is read: no key or an invalid one (and a repeated
// Authorization header), a scope the key lacks, a rate limit, a body
// refused by its declared size or media type, a header block too large, and
// a request to the plain listener beside HTTPS.
func refusedUnread(code string) bool {
	switch code {
	case codeUnauthorized, codeInvalidHeader, codeInsufficientScope, codeRateLimited, codePayloadTooLarge, codeHeaderTooLarge, codeUnsupportedMediaType, codeHTTPSRequired:
		return true
	}
	return false
}
