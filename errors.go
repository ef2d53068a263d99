package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// The error codes the API uses in the "code" field. This is the whole set;
// docs/api.md lists them (a test holds it to this block), and a client may
// switch on them.
const (
	codeUnauthorized         = "unauthorized"
	codeInsufficientScope    = "insufficient_scope"
	codeInvalidBody          = "invalid_body"
	codeInvalidField         = "invalid_field"
	codeInvalidParameter     = "invalid_parameter"
	codeInvalidHeader        = "invalid_header"
	codeNotFound             = "not_found"
	codeMethodNotAllowed     = "method_not_allowed"
	codeGone                 = "gone"
	codeCursorExpired        = "cursor_expired"
	codePayloadTooLarge      = "payload_too_large"
	codeUnsupportedMediaType = "unsupported_media_type"
	codeInternal             = "internal"
	codeUnavailable          = "unavailable"
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
	case codeInsufficientScope:
		return http.StatusForbidden
	case codeNotFound:
		return http.StatusNotFound
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case codeGone, codeCursorExpired:
		return http.StatusGone
	case codePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case codeUnavailable:
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
	if rf, ok := errors.AsType[*refusal](err); ok {
		return refusalError(rf)
	}
	if wl, ok := errors.AsType[*webhookLimitError](err); ok {
		return errorf(codeInvalidBody, "%d webhook subscriptions exist, the most the service keeps (all keys together); delete one (DELETE /v1/webhooks/{id}) before adding another", wl.max)
	}
	switch {
	case errors.Is(err, errUnwritable):
		return errorf(codeUnavailable, "the change was not stored: the database cannot be written right now (disk full or read-only storage); reads still work; retry later")
	case errors.Is(err, errUnavailable):
		return errorf(codeUnavailable, "the database did not answer, so the request may not have been carried out; retry it in a few seconds (a create with the same Idempotency-Key is never carried out twice)")
	}
	return nil
}

// refusalError says what the data's refusal of a write means to a client,
// and what the client can do about it.
func refusalError(rf *refusal) *apiError {
	switch rf.reason {
	case petHasOpenOrder:
		return errorf(codePetHasOpenOrder, "pet %d has order %d placed, so its status (%s) follows that order: deliver or cancel the order (PATCH %s) instead; its name and category can change",
			rf.petID, rf.orderID, rf.status, ordersResource.pathOf(rf.orderID))
	case petHasOrders:
		hint := "a sold or returned pet can be given another status with PATCH instead"
		if rf.orderID != 0 {
			hint = fmt.Sprintf("its order %d is placed and decides its status: deliver or cancel that order (PATCH %s)", rf.orderID, ordersResource.pathOf(rf.orderID))
		}
		return errorf(codePetHasOrders, "pet %d is named by %s, its sales history, so it cannot be deleted; %s", rf.petID, plural(rf.orders, "order"), hint)
	case unknownPet:
		return errorf(codeUnknownPet, "no pet has id %d; an order names an existing pet (see GET %s)", rf.petID, resourceSpecs[petsResource].collection)
	case petNotAvailable:
		return errorf(codePetNotAvailable, "pet %d is %s, not available: only an available pet can be ordered", rf.petID, rf.status)
	case invalidTransition:
		return errorf(codeInvalidTransition, "order %d is %s and cannot become %s: only a placed order changes, to delivered or to cancelled", rf.orderID, rf.status, rf.to)
	}
	return nil
}

// plural says n things: "1 order", "3 orders".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
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
	if e.Code == codeUnavailable && w.Header().Get("Retry-After") == "" {
		// RFC 9110, section 10.2.3: when to try again. The causes (a full
		// disk, a database restarting) last seconds to minutes.
		w.Header().Set("Retry-After", unavailableRetryAfter)
	}
	writeJSON(w, e.Status, e)
}

// unreadBodyGrace is how long a connection refused before its body was read
// waits for that body before it is closed (see writeError).
const unreadBodyGrace = 250 * time.Millisecond

// refusedUnread reports whether an error of this code is answered before the
// request's body is read: no key or an invalid one (and a repeated
// Authorization header), a scope the key lacks, a rate limit, and a body
// refused by its declared size or media type.
func refusedUnread(code string) bool {
	switch code {
	case codeUnauthorized, codeInvalidHeader, codeInsufficientScope, codeRateLimited, codePayloadTooLarge, codeUnsupportedMediaType:
		return true
	}
	return false
}

// writeJSON encodes v as the response body with the given status. The body is
// encoded before anything is sent, so an encoding failure can still become a
// clean 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := encodeJSON(v)
	if err != nil {
		writeBody(w, http.StatusInternalServerError, []byte(`{"code":"internal","message":"the server failed to encode its answer","status":500}`+"\n"))
		return
	}
	writeBody(w, status, body)
}

// encodeJSON encodes v as every response body of the API is encoded.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The API is not HTML: "<API key>" reads better than "\u003cAPI key\u003e",
	// and nosniff (in writeBody) keeps browsers from treating the body as a page.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeBody sends an already encoded JSON body.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	// What h.Set would do, with the names already canonical and both
	// values in one allocation rather than two: every answer pays it.
	h := w.Header()
	values := []string{"application/json", "nosniff"}
	h["Content-Type"], h["X-Content-Type-Options"] = values[0:1:1], values[1:2:2]
	w.WriteHeader(status)
	w.Write(body)
}

// recoverPanics turns a panic in a handler into a logged 500 with the standard
// error body, instead of a dropped connection.
func recoverPanics(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v) // the handler asked net/http to abort the response on purpose
			}
			writeError(w, r, log, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
		}()
		next.ServeHTTP(w, r)
	})
}

// routeErrors serves r through mux, answering in JSON where the mux itself
// would answer in plain text: an unknown path (404), a known path with the
// wrong method (405, keeping the mux's Allow header) and a path that is not
// in canonical form, which the mux would redirect (a redirect would turn a
// POST into a GET in most clients, so it is a 404 here instead). Those
// answers, too, go through auth: a caller without a key learns nothing about
// which paths exist.
func routeErrors(log *slog.Logger, mux *http.ServeMux, auth func(http.Handler) http.Handler) http.Handler {
	unrouted := auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		shown := abbreviate(r.URL.EscapedPath()) // as sent: /a%2Fb is not /a/b
		if p == "" || p[0] != '/' || path.Clean(p) != p {
			writeError(w, r, log, errorf(codeNotFound, "no resource at path %q; paths have no empty, '.' or '..' segments and no trailing slash", shown))
			return
		}
		// Let the mux's own handler decide between 404 and 405 (and set
		// Allow), then replace its plain-text body with ours.
		h, _ := mux.Handler(r)
		rec := &statusRecorder{header: w.Header()}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			writeError(w, r, log, errorf(codeMethodNotAllowed, "method %s is not allowed on %q; allowed: %s", abbreviate(r.Method), shown, w.Header().Get("Allow")))
			return
		}
		if p == "/v1" || strings.HasPrefix(p, "/v1/") {
			writeError(w, r, log, errorf(codeNotFound, "no resource at path %q; GET /v1/openapi.json lists every path of the API", shown))
			return
		}
		writeError(w, r, log, errorf(codeNotFound, "no resource at path %q; the API lives under /v1, for example /v1/pets (GET /v1/openapi.json lists every path)", shown))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != "" && p[0] == '/' && path.Clean(p) == p {
			// The mux routes the request once (asking it first with
			// mux.Handler, then serving, looked the route up twice: 9% of
			// a cached getPet's CPU). It sets r.Pattern before it calls
			// what it found; "" means its own plain-text answer, which
			// routedOnly throws away for unrouted to answer instead.
			if info := requestInfoFrom(r.Context()); info != nil {
				defer func() { info.route = r.Pattern }() // a panic too is counted under its route
			}
			mux.ServeHTTP(&routedOnly{ResponseWriter: w, r: r}, r)
			if r.Pattern != "" {
				return
			}
		}
		unrouted.ServeHTTP(w, r)
	})
}

// routedOnly passes to the real writer the answer of a handler that the mux
// routed r to, and throws away the answer the mux itself gives when it found
// none (r.Pattern is "" then), headers included.
type routedOnly struct {
	http.ResponseWriter
	r       *http.Request
	discard http.Header
}

func (w *routedOnly) Header() http.Header {
	if w.r.Pattern != "" {
		return w.ResponseWriter.Header()
	}
	if w.discard == nil {
		w.discard = http.Header{}
	}
	return w.discard
}

func (w *routedOnly) Write(b []byte) (int, error) {
	if w.r.Pattern != "" {
		return w.ResponseWriter.Write(b)
	}
	return len(b), nil
}

func (w *routedOnly) WriteHeader(status int) {
	if w.r.Pattern != "" {
		w.ResponseWriter.WriteHeader(status)
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *routedOnly) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusRecorder records the status a handler writes and throws its body
// away. Its header map is the real response's, so headers such as Allow
// survive.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header { return s.header }

func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }

func (s *statusRecorder) WriteHeader(status int) { s.status = status }
