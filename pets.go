package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of the API; the README's decision table states each of them.
const (
	defaultLimit    = 20
	maxLimit        = 100
	maxNameRunes    = 100
	maxBodyBytes    = 1 << 20 // 1 MiB
	statusAvailable = "available"
)

// getPet is deprecated: these are the instants in its Deprecation and Sunset
// headers. From sunset on, it answers 410 Gone.
var (
	getPetDeprecated = time.Date(2026, time.November, 21, 0, 0, 0, 0, time.UTC)
	getPetSunset     = time.Date(2030, time.December, 5, 0, 0, 0, 0, time.UTC)
)

// Pet is an animal as the API returns it.
type Pet struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	CategoryID int64  `json:"categoryId"`
	Status     string `json:"status"`
}

// newPet is a validated createPet request body (a NewPet, with the default
// status filled in).
type newPet struct {
	Name       string
	CategoryID int64
	Status     string
}

// validStatus reports whether s is a PetStatus value.
func validStatus(s string) bool {
	return s == "available" || s == "pending" || s == "sold"
}

// handleListPets serves listPets: GET /v1/pets?limit=&status=&after=. Pages
// are cached encoded (see cache.go).
func handleListPets(log *slog.Logger, st *store) http.Handler {
	cache := newResponseCache(listCacheSlots)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := parseListQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		key := cacheKey{id: q.After, limit: q.Limit, status: q.Status}
		at := st.versions.now() // before the query: see cache.go
		e, ok := cache.get(key, at)
		if !ok {
			page, err := st.listPets(r.Context(), q)
			if err != nil {
				writeError(w, r, log, err)
				return
			}
			e = &cacheEntry{key: key, at: at, appendSafe: page.More, body: petsBody(page.Pets)}
			if page.More {
				e.link = nextLink(q, page.Pets[len(page.Pets)-1].ID)
			}
			cache.put(e)
		}
		if e.link != "" {
			w.Header().Set("Link", e.link)
		}
		writeBody(w, http.StatusOK, e.body)
	})
}

// listQuery is the validated query string of listPets.
type listQuery struct {
	Limit  int
	Status string // "" means no filter
	After  int64  // only pets with a greater id are listed
}

// parseListQuery validates the query string of listPets. A value out of
// range is an error, never silently corrected: a client asking for 500 pets
// and getting 100 would think it had them all.
func parseListQuery(raw string) (listQuery, error) {
	q := listQuery{Limit: defaultLimit}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return q, errorf(codeInvalidParameter, "the query string is not valid URL encoding; parameters are limit, status and after, joined with '&'")
	}
	for name, vs := range values {
		if len(vs) > 1 {
			return q, errorf(codeInvalidParameter, "parameter %s is given %d times; give it at most once", name, len(vs))
		}
		v := vs[0]
		switch name {
		case "limit":
			n, ok := parseDecimal(v)
			if !ok || n < 1 || n > maxLimit {
				return q, errorf(codeInvalidParameter, "parameter limit must be an integer from 1 to %d", maxLimit)
			}
			q.Limit = int(n)
		case "status":
			if !validStatus(v) {
				return q, errorf(codeInvalidParameter, "parameter status must be one of available, pending, sold")
			}
			q.Status = v
		case "after":
			n, ok := parseDecimal(v)
			if !ok {
				return q, errorf(codeInvalidParameter, "parameter after must be a pet id: an integer from 0 to 9223372036854775807")
			}
			q.After = n
		default:
			return q, errorf(codeInvalidParameter, "unknown parameter %q; listPets takes limit, status and after", name)
		}
	}
	return q, nil
}

// parseDecimal parses a non-negative int64 written in plain decimal digits:
// no sign, no spaces, no exponent.
func parseDecimal(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// nextLink is the RFC 8288 Link header that points at the page after the pet
// with id last, with the same limit and filter.
func nextLink(q listQuery, last int64) string {
	var b strings.Builder
	b.WriteString("</v1/pets?limit=")
	b.WriteString(strconv.Itoa(q.Limit))
	if q.Status != "" {
		b.WriteString("&status=")
		b.WriteString(q.Status)
	}
	b.WriteString("&after=")
	b.WriteString(strconv.FormatInt(last, 10))
	b.WriteString(`>; rel="next"`)
	return b.String()
}

// handleCreatePet serves createPet: POST /v1/pets with a NewPet body, and an
// optional Idempotency-Key header (see idempotency.go).
func handleCreatePet(log *slog.Logger, idem *idempotency) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKeyOf(r.Header)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		body, err := readJSONBody(w, r)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		np, err := decodeNewPet(body)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		ans, replayed, err := idem.createPet(r.Context(), key, np)
		if errors.Is(err, errUnwritable) {
			log.WarnContext(r.Context(), "create refused: the database cannot be written", "err", err)
			err = errorf(codeUnavailable, "the pet was not stored: the database cannot be written right now (disk full or read-only storage); reads still work; retry later")
		}
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		ans.write(w, replayed)
	})
}

// readJSONBody checks the media type and reads the whole body, refusing more
// than maxBodyBytes.
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, errorf(codeUnsupportedMediaType, "the request body must be JSON, sent with Content-Type: application/json")
		}
	}
	if r.ContentLength > maxBodyBytes {
		return nil, errorf(codePayloadTooLarge, "the request body is %d bytes; the limit is %d bytes (1 MiB)", r.ContentLength, maxBodyBytes)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, errorf(codePayloadTooLarge, "the request body is larger than the limit of %d bytes (1 MiB)", maxBodyBytes)
		}
		return nil, errorf(codeInvalidBody, "the request body could not be read completely")
	}
	return body, nil
}

// decodeNewPet parses and validates a NewPet. It walks the object token by
// token rather than unmarshalling into a struct, because encoding/json would
// quietly accept what the API refuses: keys in the wrong case, a repeated key
// (last one wins), a number written as a string into a json.Number, and
// fractions or exponents truncated into an integer.
func decodeNewPet(body []byte) (newPet, error) {
	np := newPet{Status: statusAvailable}
	if len(bytes.TrimSpace(body)) == 0 {
		return np, errorf(codeInvalidBody, `the request body is empty; send a NewPet such as {"name": "Rex", "categoryId": 1}`)
	}
	if !utf8.Valid(body) {
		return np, errorf(codeInvalidBody, "the request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return np, jsonSyntaxError(err)
	}
	if tok != json.Delim('{') {
		return np, errorf(codeInvalidBody, `the request body must be a JSON object (a NewPet such as {"name": "Rex", "categoryId": 1})`)
	}
	var hasName, hasCategory, hasStatus bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return np, jsonSyntaxError(err)
		}
		key, _ := tok.(string) // inside an object, the decoder only yields string keys
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return np, jsonSyntaxError(err)
		}
		var seen *bool
		switch key {
		case "name":
			seen, err = &hasName, decodeName(raw, &np.Name)
		case "categoryId":
			seen, err = &hasCategory, decodeCategoryID(raw, &np.CategoryID)
		case "status":
			seen, err = &hasStatus, decodeStatus(raw, &np.Status)
		case "id":
			return np, errorf(codeInvalidField, "field id must not be sent: the service assigns ids")
		default:
			return np, errorf(codeInvalidField, "unknown field %q; a NewPet has the fields name, categoryId and status", key)
		}
		if *seen {
			return np, errorf(codeInvalidField, "field %s appears more than once", key)
		}
		*seen = true
		if err != nil {
			return np, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return np, jsonSyntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return np, errorf(codeInvalidBody, "the request body must hold one JSON object and nothing after it")
	}
	switch {
	case !hasName && !hasCategory:
		return np, errorf(codeInvalidField, "fields name and categoryId are required")
	case !hasName:
		return np, errorf(codeInvalidField, "field name is required")
	case !hasCategory:
		return np, errorf(codeInvalidField, "field categoryId is required")
	}
	return np, nil
}

// jsonSyntaxError explains why the body is not JSON, with the byte offset
// where a syntax error was found.
func jsonSyntaxError(err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return errorf(codeInvalidBody, "the request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errorf(codeInvalidBody, "the request body is not valid JSON: it ends before the object is complete")
	}
	return errorf(codeInvalidBody, "the request body is not valid JSON: %s", err.Error())
}

// decodeName accepts a JSON string of 1 to 100 code points, not blank, with
// no control characters.
func decodeName(raw json.RawMessage, dst *string) error {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return errorf(codeInvalidField, "field name must be a JSON string")
	}
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0 || strings.TrimSpace(s) == "":
		return errorf(codeInvalidField, "field name must not be empty or blank")
	case n > maxNameRunes:
		return errorf(codeInvalidField, "field name must be at most %d characters; it has %d", maxNameRunes, n)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return errorf(codeInvalidField, "field name must not contain control characters (found U+%04X)", r)
		}
		if r == utf8.RuneError {
			// encoding/json turns an unpaired surrogate escape (\ud800) into
			// U+FFFD; storing it would record a name the client never sent.
			return errorf(codeInvalidField, "field name must not contain U+FFFD or an unpaired surrogate escape")
		}
	}
	*dst = s
	return nil
}

// decodeCategoryID accepts a JSON integer from 1 to 2^63-1, written as an
// integer: a string, a fraction or an exponent form is refused, even when its
// value is whole, because a client sending one has a bug worth hearing about.
func decodeCategoryID(raw json.RawMessage, dst *int64) error {
	const msg = "field categoryId must be a JSON integer from 1 to 9223372036854775807"
	s := string(raw)
	switch {
	case jsonKind(raw) != "number":
		return errorf(codeInvalidField, "%s, not a %s", msg, jsonKind(raw))
	case strings.ContainsAny(s, ".eE"):
		return errorf(codeInvalidField, "%s, written without fraction or exponent; got %s", msg, abbreviate(s))
	}
	n, ok := parseDecimal(s) // a leading '-' fails here too
	if !ok || n < 1 {
		return errorf(codeInvalidField, "%s; got %s", msg, abbreviate(s))
	}
	*dst = n
	return nil
}

// abbreviate shortens what a client sent to a length fit for an error message.
func abbreviate(s string) string {
	const max = 32
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// jsonKind names the kind of a JSON value for error messages.
func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// decodeStatus accepts one of the PetStatus strings.
func decodeStatus(raw json.RawMessage, dst *string) error {
	var s string
	if raw[0] == 'n' {
		return errorf(codeInvalidField, "field status must be one of available, pending, sold, not null; omit the field to get available")
	}
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil || !validStatus(s) {
		return errorf(codeInvalidField, "field status must be one of available, pending, sold")
	}
	*dst = s
	return nil
}

// handleGetPet serves getPet: GET /v1/pets/{petId}. It is deprecated and, from
// the sunset instant on, answers 410 Gone; now is the clock, injectable so
// that a test can move past the sunset. Found pets are cached encoded (see
// cache.go).
func handleGetPet(log *slog.Logger, st *store, now func() time.Time) http.Handler {
	cache := newResponseCache(petCacheSlots)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !now().Before(getPetSunset) {
			writeError(w, r, log, errorf(codeGone, "getPet was removed on 5 December 2030; use GET /v1/pets with the status filter instead"))
			return
		}
		raw := r.PathValue("petId")
		id, ok := parseDecimal(raw)
		if !ok || id < 1 {
			// The interface lists only 401 and 404 for getPet: an id that
			// cannot exist is a pet that does not exist.
			writeError(w, r, log, errorf(codeNotFound, "no pet has id %q; pet ids are positive integers", raw))
			return
		}
		key := cacheKey{id: id}
		at := st.versions.now() // before the query: see cache.go
		e, ok := cache.get(key, at)
		if !ok {
			pet, err := st.getPet(r.Context(), id)
			if errors.Is(err, errPetNotFound) {
				// Not cached: the pet may be created at any moment.
				writeError(w, r, log, errorf(codeNotFound, "no pet has id %d", id))
				return
			}
			if err != nil {
				writeError(w, r, log, err)
				return
			}
			e = &cacheEntry{key: key, at: at, appendSafe: true, body: petBody(pet)}
			cache.put(e)
		}
		writeBody(w, http.StatusOK, e.body)
	})
}

// deprecated adds the headers that tell a client an endpoint is going away:
// Deprecation (RFC 9745), Sunset (RFC 8594) and a Link to the documentation.
// It wraps the authentication check too, so that every answer carries them.
// It counts authenticated calls by caller, so the operator knows who still
// has to migrate.
func deprecated(m *metrics, next http.Handler) http.Handler {
	deprecation := fmt.Sprintf("@%d", getPetDeprecated.Unix())
	sunset := getPetSunset.Format(http.TimeFormat)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Deprecation", deprecation)
		h.Set("Sunset", sunset)
		h.Add("Link", `</v1/openapi.json>; rel="deprecation"; type="application/json"`)
		next.ServeHTTP(w, r)
		if info := requestInfoFrom(r.Context()); info != nil && info.caller != "" {
			m.deprecated.WithLabelValues("getPet", info.caller).Inc()
		}
	})
}

// handleListOrders answers GET /v1/store/orders. The interface says only that
// the store area exists, so the service says plainly that it is not built.
func handleListOrders(log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, log, errorf(codeNotImplemented, "the store area (GET /v1/store/orders) is not implemented by this service"))
	})
}
