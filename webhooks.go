package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Webhook subscriptions, /v1/webhooks: a URL that the service POSTs the
// change feed's events to, signed (webhooks_deliver.go delivers them). The API
// manages the subscriptions and shows each one's log of delivery attempts.

// Limits of a subscription's fields.
const (
	maxWebhookURLBytes     = 2048
	maxWebhookDescription  = 500
	maxWebhookTypePatterns = 20
)

// listWebhooksSpec is what listWebhooks accepts.
var listWebhooksSpec = listSpec{operation: "listWebhooks", item: "webhook subscription", path: "/v1/webhooks", statuses: webhookStatuses}

// webhookJSON is a subscription as the API shows it. Secret is set only in
// the answers of a create and of a rotation.
type webhookJSON struct {
	ID           int64    `json:"id"`
	URL          string   `json:"url"`
	Types        []string `json:"types"`
	Description  string   `json:"description"`
	Status       string   `json:"status"`
	StatusReason *string  `json:"statusReason"`
	CreatedAt    string   `json:"createdAt"`
	Secret       string   `json:"secret,omitempty"`
}

// webhookView is w as the API shows it, with its secret when withSecret.
func webhookView(w webhook, withSecret bool) webhookJSON {
	v := webhookJSON{ID: w.ID, URL: w.URL, Types: w.Patterns, Description: w.Description, Status: w.Status,
		CreatedAt: w.CreatedAt.UTC().Format(timeLayout)}
	if w.StatusReason != "" {
		v.StatusReason = &w.StatusReason
	}
	if withSecret {
		v.Secret = w.secret
	}
	return v
}

// deliveryJSON is a delivery attempt as the API shows it.
type deliveryJSON struct {
	ID            int64   `json:"id"`
	EventID       int64   `json:"eventId"`
	Attempt       int     `json:"attempt"`
	StartedAt     string  `json:"startedAt"`
	DurationMS    int64   `json:"durationMs"`
	StatusCode    *int    `json:"statusCode"`
	Error         *string `json:"error"`
	NextAttemptAt *string `json:"nextAttemptAt"`
}

// deliveryView is d as the API shows it.
func deliveryView(d delivery) deliveryJSON {
	v := deliveryJSON{ID: d.ID, EventID: d.EventID, Attempt: d.Attempt, StartedAt: d.StartedAt.UTC().Format(timeLayout), DurationMS: d.Duration.Milliseconds()}
	if d.StatusCode != 0 {
		v.StatusCode = &d.StatusCode
	}
	if d.Error != "" {
		v.Error = &d.Error
	}
	if !d.NextAttemptAt.IsZero() {
		s := d.NextAttemptAt.UTC().Format(timeLayout)
		v.NextAttemptAt = &s
	}
	return v
}

// handleCreateWebhook serves createWebhook: POST /v1/webhooks with a
// NewWebhook body. It answers 201 with the subscription and its secret,
// which no other answer shows.
func handleCreateWebhook(log *slog.Logger, st *store, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readJSONBody(w, r)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		nw := newWebhook{Patterns: []string{"*"}}
		err = decodeObject(body, object{name: "NewWebhook", example: `{"url": "https://example.com/hooks/petstore"}`, fields: []field{
			{name: "url", required: true, decode: func(raw json.RawMessage) error { return decodeWebhookURL(raw, &nw.URL) }},
			{name: "types", decode: func(raw json.RawMessage) error { return decodeTypePatterns(raw, &nw.Patterns) }},
			{name: "description", decode: func(raw json.RawMessage) error { return decodeDescription(raw, &nw.Description) }},
		}})
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		if nw.Patterns, err = readablePatterns(r.Context(), nw.Patterns); err != nil {
			writeError(w, r, log, err)
			return
		}
		hook, err := st.createWebhook(r.Context(), nw, newWebhookSecret(), now())
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		w.Header().Set("Location", webhookPath(hook.ID))
		writeJSON(w, http.StatusCreated, webhookView(hook, true))
	})
}

// webhookPath is the path of the subscription id.
func webhookPath(id int64) string { return "/v1/webhooks/" + strconv.FormatInt(id, 10) }

// handleListWebhooks serves listWebhooks: GET /v1/webhooks?limit=&status=&after=.
func handleListWebhooks(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := parseListQuery(r.URL.RawQuery, listWebhooksSpec)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		p, err := st.listWebhooks(r.Context(), q.status, q.page, webhooksOf(r.Context()))
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		views := make([]webhookJSON, 0, len(p.items))
		for _, hook := range p.items {
			views = append(views, webhookView(hook, false))
		}
		if p.more {
			w.Header().Set("Link", listWebhooksSpec.nextLink(q, p.items[len(p.items)-1].ID))
		}
		writeJSON(w, http.StatusOK, views)
	})
}

// handleGetWebhook serves getWebhook: GET /v1/webhooks/{webhookId}.
func handleGetWebhook(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := webhookIDs.of(w, r, log)
		if !ok {
			return
		}
		hook, err := st.getWebhook(r.Context(), id, webhooksOf(r.Context()))
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeJSON(w, http.StatusOK, webhookView(hook, false))
	})
}

// handleUpdateWebhook serves updateWebhook: PATCH /v1/webhooks/{webhookId}
// with a JSON Merge Patch of url, types, description and status (active or
// paused). types and description may be null: every type, no description.
func handleUpdateWebhook(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := webhookIDs.of(w, r, log)
		if !ok {
			return
		}
		body, err := readJSONBody(w, r, mergePatchType)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		var patch webhookPatch
		var u, description, status string
		err = decodeObject(body, object{name: "WebhookPatch", example: `{"status": "paused"}`, fields: []field{
			{name: "url", decode: func(raw json.RawMessage) error { patch.URL = &u; return decodeWebhookURL(raw, &u) }},
			{name: "types", decode: func(raw json.RawMessage) error {
				if string(raw) == "null" {
					patch.Patterns = []string{"*"}
					return nil
				}
				return decodeTypePatterns(raw, &patch.Patterns)
			}},
			{name: "description", decode: func(raw json.RawMessage) error {
				patch.Description = &description
				if string(raw) == "null" {
					return nil
				}
				return decodeDescription(raw, &description)
			}},
			{name: "status", decode: func(raw json.RawMessage) error {
				patch.Status = &status
				if string(raw) == `"failing"` {
					return errorf(codeInvalidField, "field status can be set to active or paused; failing is set by the service when deliveries stop")
				}
				return decodeEnum("status", webhookStatuses[:2], raw, &status)
			}},
		}})
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		if patch.Patterns != nil {
			if patch.Patterns, err = readablePatterns(r.Context(), patch.Patterns); err != nil {
				writeError(w, r, log, err)
				return
			}
		}
		hook, err := st.updateWebhook(r.Context(), id, patch, webhooksOf(r.Context()))
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeJSON(w, http.StatusOK, webhookView(hook, false))
	})
}

// handleDeleteWebhook serves deleteWebhook: DELETE /v1/webhooks/{webhookId},
// answering 204. Its delivery log goes with it; an attempt in progress ends
// unrecorded.
func handleDeleteWebhook(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := webhookIDs.of(w, r, log)
		if !ok {
			return
		}
		if err := st.deleteWebhook(r.Context(), id, webhooksOf(r.Context())); err != nil {
			writeError(w, r, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// handleRotateWebhookSecret serves rotateWebhookSecret: POST
// /v1/webhooks/{webhookId}/secret, without a body. It answers 200 with the
// subscription and its new secret; the previous one still signs, beside it,
// for secretOverlap.
func handleRotateWebhookSecret(log *slog.Logger, st *store, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := webhookIDs.of(w, r, log)
		if !ok {
			return
		}
		hook, err := st.rotateWebhookSecret(r.Context(), id, newWebhookSecret(), now().Add(secretOverlap), webhooksOf(r.Context()))
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeJSON(w, http.StatusOK, webhookView(hook, true))
	})
}

// handleListWebhookDeliveries serves listWebhookDeliveries: GET
// /v1/webhooks/{webhookId}/deliveries?limit=&before=, the attempts newest
// first.
func handleListWebhookDeliveries(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := webhookIDs.of(w, r, log)
		if !ok {
			return
		}
		limit, before, err := parseDeliveriesQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		p, err := st.listDeliveries(r.Context(), id, before, limit, webhooksOf(r.Context()))
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		views := make([]deliveryJSON, 0, len(p.items))
		for _, d := range p.items {
			views = append(views, deliveryView(d))
		}
		if p.more {
			w.Header().Set("Link", "<"+webhookPath(id)+"/deliveries?limit="+strconv.Itoa(limit)+"&before="+strconv.FormatInt(p.items[len(p.items)-1].ID, 10)+`>; rel="next"`)
		}
		writeJSON(w, http.StatusOK, views)
	})
}

// parseDeliveriesQuery reads the query of listWebhookDeliveries: limit (1
// to maxLimit, default defaultLimit) and before, the id the page ends below
// (a newest-first list pages backwards).
func parseDeliveriesQuery(raw string) (limit int, before int64, err error) {
	limit, before = defaultLimit, int64(1<<63-1)
	err = parseQuery(raw, queryParams{operation: "listWebhookDeliveries", names: "limit and before"}, func(name, v string) (known bool, err error) {
		switch name {
		case "limit":
			limit, err = parseLimit(v, maxLimit)
		case "before":
			n, ok := parseDecimal(v)
			if !ok || n < 1 {
				return true, errorf(codeInvalidParameter, "parameter before must be a delivery id: an integer from 1 to 9223372036854775807")
			}
			before = n
		default:
			return false, nil
		}
		return true, err
	})
	return limit, before, err
}

// decodeWebhookURL accepts the URL deliveries are POSTed to: an absolute
// http or https URL with a host, without user info (a password in a URL
// ends up in logs; put a token in the path or query instead) and without
// a fragment (never sent), of at most maxWebhookURLBytes. Its address is
// checked when connecting, not here (see webhooks_dialguard.go).
func decodeWebhookURL(raw json.RawMessage, dst *string) error {
	if kind := jsonKind(raw); kind != "string" {
		return errorf(codeInvalidField, "field url must be a JSON string, not %s", withArticle(kind))
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return errorf(codeInvalidField, "field url must be a JSON string")
	}
	if len(s) > maxWebhookURLBytes {
		return errorf(codeInvalidField, "field url must be at most %d bytes; it has %d", maxWebhookURLBytes, len(s))
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || strings.ContainsFunc(s, unicode.IsSpace) || strings.ContainsFunc(s, unicode.IsControl):
		return errorf(codeInvalidField, "field url is not a valid URL; give an absolute http or https URL such as https://example.com/hooks/petstore")
	case u.Scheme != "http" && u.Scheme != "https":
		return errorf(codeInvalidField, "field url must be an absolute http or https URL, such as https://example.com/hooks/petstore")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return errorf(codeInvalidField, "field url must name a host, such as https://example.com/hooks/petstore")
	case u.User != nil:
		return errorf(codeInvalidField, "field url must not hold user info (user:password@): put a token in the path or the query instead")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return errorf(codeInvalidField, "field url must not hold a fragment (#...): it is never sent")
	}
	if p := u.Port(); p != "" {
		if n, ok := parseDecimal(p); !ok || n < 1 || n > 65535 {
			return errorf(codeInvalidField, "field url has port %q; a port is a number from 1 to 65535", abbreviate(p))
		}
	}
	*dst = s
	return nil
}

// webhooksOf is the filter of the subscriptions that the caller's key may
// see, change, rotate, delete and read the deliveries of: those whose every
// event type it may read (a key holding pets:read and orders:read, or *,
// sees them all). Any other is answered as if it did not exist (404, and
// absent from the list): otherwise a key holding only webhooks:write could
// point another key's subscription at its own receiver and read there what
// its scopes refuse it, or read the URL, with any token in it.
func webhooksOf(ctx context.Context) webhookFilter {
	return func(patterns []string) bool {
		types, _, _ := expandEventTypes(patterns, true) // checked when stored
		readable := readableTypes(ctx, types)
		return readable == nil || len(readable) == len(types)
	}
}

// readablePatterns narrows a subscription's type patterns to the event
// types that the key creating (or changing) it may read: pet.* with
// pets:read, order.* with orders:read. A subscription delivers what that
// key could read then, whatever key later reads it. Patterns the key may
// read whole are kept as given; otherwise they become the readable types,
// listed, so that the subscription reads back as what it delivers. A key
// that may read none of them is refused.
func readablePatterns(ctx context.Context, patterns []string) ([]string, error) {
	types, _, _ := expandEventTypes(patterns, true) // decodeTypePatterns checked them
	readable := readableTypes(ctx, types)
	switch {
	case readable == nil || len(readable) == len(types):
		return patterns, nil
	case len(readable) == 0:
		return nil, errorf(codeInvalidField, "field types: this API key may read none of these events (%s), so the subscription would deliver nothing", eventReadScopes())
	}
	return readable, nil
}

// decodeTypePatterns accepts the types of a subscription: a JSON array of 1
// to maxWebhookTypePatterns event types or patterns (pet.*, order.*, or *
// for every type). Repeats are dropped; the order is kept.
func decodeTypePatterns(raw json.RawMessage, dst *[]string) error {
	known := strings.Join(slices.Concat(eventTypes, eventPatterns), ", ") + " and *"
	if kind := jsonKind(raw); kind != "array" {
		return errorf(codeInvalidField, "field types must be a JSON array of event types or patterns (%s), not %s", known, withArticle(kind))
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return errorf(codeInvalidField, "field types must be a JSON array of strings")
	}
	switch {
	case len(items) == 0:
		return errorf(codeInvalidField, "field types is empty; name at least one type, or leave the field out for every type")
	case len(items) > maxWebhookTypePatterns:
		return errorf(codeInvalidField, "field types has %d items; the limit is %d", len(items), maxWebhookTypePatterns)
	}
	patterns := make([]string, 0, len(items))
	for i, item := range items {
		var p string
		if jsonKind(item) != "string" || json.Unmarshal(item, &p) != nil {
			return errorf(codeInvalidField, "field types: item %d is %s, not a string", i+1, withArticle(jsonKind(item)))
		}
		if _, unknown, ok := expandEventTypes([]string{p}, true); !ok {
			return errorf(codeInvalidField, "field types: %q is not an event type or pattern; use %s", abbreviate(unknown), known)
		}
		if !slices.Contains(patterns, p) {
			patterns = append(patterns, p)
		}
	}
	*dst = patterns
	return nil
}

// decodeDescription accepts a description: a JSON string of at most
// maxWebhookDescription characters, without control characters.
func decodeDescription(raw json.RawMessage, dst *string) error {
	if kind := jsonKind(raw); kind != "string" {
		return errorf(codeInvalidField, "field description must be a JSON string, not %s", withArticle(kind))
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return errorf(codeInvalidField, "field description must be a JSON string")
	}
	if n := utf8.RuneCountInString(s); n > maxWebhookDescription {
		return errorf(codeInvalidField, "field description must be at most %d characters; it has %d", maxWebhookDescription, n)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return errorf(codeInvalidField, "field description must not contain control characters")
	}
	*dst = s
	return nil
}
