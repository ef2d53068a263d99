package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unicode/utf8"
)

// This file reads what clients send, the same way for every operation: JSON
// bodies (readJSONBody, then decodeObject with one decoder per field) and the
// query of a list (parseListQuery). The resources' own rules (what a name
// may hold, which statuses exist) are in their handler files.

// Limits of requests; the decision table of docs/api.md states each of them.
const (
	defaultLimit = 20
	maxLimit     = 100
	maxBodyBytes = 1 << 20 // 1 MiB
)

// mergePatchType is the media type of a JSON Merge Patch (RFC 7396), which
// the PATCH operations accept beside application/json.
const mergePatchType = "application/merge-patch+json"

// readJSONBody checks the media type and reads the whole body, refusing more
// than maxBodyBytes. A request without Content-Type is read as JSON; one
// with another type than application/json or one of also is refused. The
// bytes it holds count against the request's share of the body budget (see
// bodyBudget), until the request ends.
func readJSONBody(w http.ResponseWriter, r *http.Request, also ...string) ([]byte, error) {
	accepted := func() string { return joinWords(append([]string{"application/json"}, also...), "or") }
	switch cts := r.Header.Values("Content-Type"); {
	case len(cts) > 1:
		// A proxy and the service could each read another one.
		return nil, errorf(codeUnsupportedMediaType, "the request has %d Content-Type headers; send one: %s", len(cts), accepted())
	case len(cts) == 1 && cts[0] == "application/json":
		// What nearly every client sends, and what ParseMediaType would
		// find in it, without its parameter map.
	case len(cts) == 1 && cts[0] != "":
		mt, _, err := mime.ParseMediaType(cts[0])
		if err != nil {
			return nil, errorf(codeUnsupportedMediaType, "the Content-Type header %q is malformed (%s); send %s", abbreviate(cts[0]), strings.TrimPrefix(err.Error(), "mime: "), accepted())
		}
		if mt != "application/json" && !slices.Contains(also, mt) {
			return nil, errorf(codeUnsupportedMediaType, "the request body must be JSON, sent with Content-Type: %s", accepted())
		}
	}
	if r.ContentLength > maxBodyBytes {
		return nil, errorf(codePayloadTooLarge, "the request body is %d bytes; the limit is %d bytes (1 MiB)", r.ContentLength, maxBodyBytes)
	}
	// MaxBytesReader also tells net/http to close the connection after a
	// body that was too long, rather than read the rest of it.
	body, err := readBody(http.MaxBytesReader(w, r.Body, maxBodyBytes), r.ContentLength, bodyLeaseFrom(r.Context()))
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, errBodyBudget):
		w.Header().Set("Retry-After", "1")
		return nil, errorf(codeUnavailable, "the service is reading as many request bodies as it has memory for; retry in a second")
	case errors.As(err, new(*http.MaxBytesError)):
		return nil, errorf(codePayloadTooLarge, "the request body is larger than the limit of %d bytes (1 MiB)", maxBodyBytes)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return nil, errClientGone
	}
	return nil, errorf(codeInvalidBody, "the request body could not be read completely")
}

// firstBodyRead is the buffer a body of unknown length starts with.
const firstBodyRead = 16 << 10

// readBody reads a body of length bytes (-1: unknown) from body as it
// arrives, into a buffer that doubles when full, up to length or else to
// maxBodyBytes, taking each new buffer's size from lease before it is
// allocated. Memory is taken only for bytes a client actually sends:
// announcing 1 MiB and sending nothing holds 16 KiB at most. It returns
// errBodyBudget when the budget has no room.
func readBody(body io.Reader, length int64, lease *bodyLease) ([]byte, error) {
	limit := int64(maxBodyBytes)
	if length >= 0 {
		limit = length
	}
	if limit == 0 {
		return nil, nil
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == limit { // the length is unknown: a full buffer ends the body, or it is too long
				return buf, endOfBody(body)
			}
			size := min(limit, max(firstBodyRead, 2*int64(cap(buf))))
			if !lease.take(size) {
				return nil, errBodyBudget
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			lease.give(int64(cap(buf)))
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF || (err == nil && length >= 0 && int64(len(buf)) == length):
			// net/http ends a body at its Content-Length: every byte
			// announced is in.
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// endOfBody reads on from a body whose buffer is full: nil at its end, and a
// *http.MaxBytesError if a byte more comes. The byte is read into an array of
// its own, so a body of exactly maxBodyBytes takes no more memory than that.
func endOfBody(body io.Reader) error {
	var one [1]byte
	for {
		n, err := body.Read(one[:])
		switch {
		case n > 0:
			return &http.MaxBytesError{Limit: maxBodyBytes}
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// errBodyBudget is what readBody returns when the bodies being read already
// hold the whole budget.
var errBodyBudget = errors.New("the body budget is spent")

// bodyBudget bounds the bytes of request bodies the service holds in memory
// at once, over all requests: without it, 500 connections each sending most
// of a 1 MiB body took 1 GB. A request that would take it past its bound is
// answered 503 with Retry-After. Only requests that passed the key check read
// a body, so only a caller with a key can spend the budget.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// newBodyBudget returns a budget of max bytes; 0 means no bound.
func newBodyBudget(max int64) *bodyBudget { return &bodyBudget{max: max} }

// bodyLease is one request's share of the budget: what it took, given back
// whole when the request ends.
type bodyLease struct {
	budget *bodyBudget
	held   int64
}

// take reserves n more bytes, or reports that the budget has no room.
func (l *bodyLease) take(n int64) bool {
	if l == nil || l.budget.max == 0 {
		return true
	}
	b := l.budget
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			l.held += n
			return true
		}
	}
}

// give returns n of the bytes taken.
func (l *bodyLease) give(n int64) {
	if l == nil || l.budget.max == 0 {
		return
	}
	l.held -= n
	l.budget.used.Add(-n)
}

// bodyLeaseKey is the context key of a request's *bodyLease.
type bodyLeaseKey struct{}

// bodyLeaseFrom returns the request's lease, nil (no bound) outside
// budgetBodies.
func bodyLeaseFrom(ctx context.Context) *bodyLease {
	l, _ := ctx.Value(bodyLeaseKey{}).(*bodyLease)
	return l
}

// budgetBodies gives every request that carries a body a lease on b, and
// gives back what it took once the request has been answered.
func budgetBodies(b *bodyBudget, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || b.max == 0 {
			next.ServeHTTP(w, r)
			return
		}
		lease := &bodyLease{budget: b}
		defer func() { lease.give(lease.held) }()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyLeaseKey{}, lease)))
	})
}

// object describes a JSON object a request body holds, for decodeObject.
type object struct {
	name    string  // the schema's name in the API document, e.g. NewPet
	example string  // a valid body, shown when the body is not an object
	fields  []field // every field it may have
	null    string  // when not "", why no field may be null, said of every field alike
}

// field is one member of an object: how to decode its value into its
// destination, and whether it must be present.
type field struct {
	name     string
	required bool
	decode   func(raw json.RawMessage) error
}

// fieldNames lists the fields for messages: "name, categoryId and status".
func (o object) fieldNames() string {
	names := make([]string, len(o.fields))
	for i, f := range o.fields {
		names[i] = f.name
	}
	return joinWords(names, "and")
}

// joinWords joins words as a sentence does, with conjunction: "a",
// "a and b", "a, b and c".
func joinWords(words []string, conjunction string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conjunction + " " + words[len(words)-1]
}

// decodeObject parses body as one JSON object of o's fields, decoding each
// value with its field's decoder. It walks the object token by token rather
// than unmarshalling into a struct, because encoding/json would quietly
// accept what the API refuses: keys in the wrong case, a repeated key (last
// one wins), a number written as a string into a json.Number, and fractions
// or exponents truncated into an integer. It refuses an unknown field (and
// "id", which the service assigns), a repeated one, a missing required one,
// and anything after the object. No field of the API is nullable: a null is
// refused by the field's decoder, or by o.null.
func decodeObject(body []byte, o object) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errorf(codeInvalidBody, "the request body is empty; send %s such as %s", article(o.name), o.example)
	}
	if !utf8.Valid(body) {
		return errorf(codeInvalidBody, "the request body is not valid UTF-8")
	}
	// The whole body is checked before any field is decoded, so that a
	// syntax error is reported as one, wherever it is: walking {"petId":06}
	// would decode the field as 0 before reaching the 6.
	if !json.Valid(body) {
		tok, err := json.NewDecoder(bytes.NewReader(body)).Token()
		if err != nil {
			return jsonSyntaxError(err)
		}
		if tok != json.Delim('{') {
			return errorf(codeInvalidBody, "the request body must be a JSON object (%s such as %s)", article(o.name), o.example)
		}
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(new(json.RawMessage)); err != nil {
			return jsonSyntaxError(err)
		}
		return errorf(codeInvalidBody, "the request body must hold one JSON object and nothing after it")
	}
	if body[skipJSONSpace(body, 0)] != '{' {
		return errorf(codeInvalidBody, "the request body must be a JSON object (%s such as %s)", article(o.name), o.example)
	}
	seen := make([]bool, len(o.fields))
	for key, raw := range objectMembers(body) {
		i := slices.IndexFunc(o.fields, func(f field) bool { return f.name == key })
		switch {
		case i < 0 && key == "id":
			return errorf(codeInvalidField, "field id must not be sent: the service assigns ids")
		case i < 0:
			return errorf(codeInvalidField, "unknown field %q; %s has the fields %s", abbreviate(key), article(o.name), o.fieldNames())
		case seen[i]:
			return errorf(codeInvalidField, "field %s appears more than once", key)
		}
		seen[i] = true
		if string(raw) == "null" && o.null != "" {
			return errorf(codeInvalidField, "field %s is null; %s", key, o.null)
		}
		if err := o.fields[i].decode(raw); err != nil {
			return err
		}
	}
	var missing []string
	for i, f := range o.fields {
		if f.required && !seen[i] {
			missing = append(missing, f.name)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return errorf(codeInvalidField, "field %s is required", missing[0])
	default:
		return errorf(codeInvalidField, "fields %s are required", joinWords(missing, "and"))
	}
}

// objectMembers yields the members of the JSON object that body holds,
// which json.Valid has accepted: each key as encoding/json decodes it, and
// its value's bytes as json.RawMessage receives them (without the spaces
// around them). Knowing the text valid, it only finds where each part
// ends, which costs a fraction of json.Decoder's Token walk (which makes,
// for instance, a syntax error value at the end of every number to find
// where the number ends).
func objectMembers(body []byte) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		i := skipJSONSpace(body, 0) + 1 // past the '{'
		for {
			i = skipJSONSpace(body, i)
			switch body[i] {
			case '}':
				return
			case ',':
				i = skipJSONSpace(body, i+1)
			}
			end := jsonValueEnd(body, i)
			key := string(body[i+1 : end-1])
			if bytes.IndexByte(body[i:end], '\\') >= 0 {
				json.Unmarshal(body[i:end], &key) // a valid string always decodes
			}
			i = skipJSONSpace(body, end) + 1 // past the ':'
			i = skipJSONSpace(body, i)
			end = jsonValueEnd(body, i)
			if !yield(key, body[i:end:end]) {
				return
			}
			i = end
		}
	}
}

// skipJSONSpace returns the index of the first byte at or after i that is
// not JSON white space.
func skipJSONSpace(body []byte, i int) int {
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r') {
		i++
	}
	return i
}

// jsonValueEnd returns the index just past the JSON value that starts at
// body[i], in text known to be valid.
func jsonValueEnd(body []byte, i int) int {
	depth := 0
	for ; i < len(body); i++ {
		switch c := body[i]; c {
		case '"':
			for i++; body[i] != '"'; i++ {
				if body[i] == '\\' {
					i++ // the escaped byte, which may be a quote
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a number or literal, at its container's end
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
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

// decodeID accepts a JSON integer from 1 to 2^63-1 into dst, written as an
// integer: a string, a fraction or an exponent form is refused, even when its
// value is whole, because a client sending one has a bug worth hearing about.
func decodeID(name string, raw json.RawMessage, dst *int64) error {
	const msg = "field %s must be a JSON integer from 1 to 9223372036854775807"
	s := string(raw)
	switch {
	case jsonKind(raw) != "number":
		return errorf(codeInvalidField, msg+", not %s", name, withArticle(jsonKind(raw)))
	case strings.ContainsAny(s, ".eE"):
		return errorf(codeInvalidField, msg+", written without fraction or exponent; got %s", name, abbreviate(s))
	}
	n, ok := parseDecimal(s) // a leading '-' fails here too
	if !ok || n < 1 {
		return errorf(codeInvalidField, msg+"; got %s", name, abbreviate(s))
	}
	*dst = n
	return nil
}

// decodeEnum accepts a JSON string that is one of values into dst.
func decodeEnum(name string, values []string, raw json.RawMessage, dst *string) error {
	if kind := jsonKind(raw); kind != "string" {
		return errorf(codeInvalidField, "field %s must be one of %s, as a JSON string, not %s", name, strings.Join(values, ", "), withArticle(kind))
	}
	s, ok := jsonString(raw)
	if !ok || !slices.Contains(values, s) {
		return errorf(codeInvalidField, "field %s must be one of %s", name, strings.Join(values, ", "))
	}
	*dst = s
	return nil
}

// jsonString decodes raw, a JSON value from a body that decodeObject found
// valid (UTF-8 and JSON), as a string; ok is false when it is none. A
// string without escapes is its own bytes, which need no decoder.
func jsonString(raw json.RawMessage) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	return s, json.Unmarshal(raw, &s) == nil
}

// withArticle is a JSON kind as a message says it: "a string", "null".
func withArticle(kind string) string {
	if kind == "null" {
		return kind
	}
	return article(kind)
}

// article puts "a" or "an" before a noun of the API's own ("an order", "a
// PetPatch"), by its first letter: none of them starts with a silent
// consonant or a "you" sound.
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiouAEIOU", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
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

// abbreviate shortens what a client sent to a length fit for an error message
// or a log line: at most 32 bytes, cut between characters, then "...". Every
// echo of client input goes through it, so an answer never grows with what
// the client sent.
func abbreviate(s string) string {
	const max = 32
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
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

// parsePathID reads a resource id from a path segment: a positive int64.
func parsePathID(raw string) (int64, bool) {
	id, ok := parseDecimal(raw)
	return id, ok && id >= 1
}

// listSpec is what a list operation accepts: every list takes limit (1 to
// maxLimit, default defaultLimit) and after (keyset pagination by id), and
// a status filter over its own statuses.
type listSpec struct {
	operation string   // the operationId, for messages: listPets
	item      string   // what after and id name, for messages: pet
	path      string   // the list's path, for the Link to the next page
	statuses  []string // the values of the status filter
	idFilter  bool     // it takes id: a comma-separated list of ids
}

// maxIDs bounds the ids of an id filter.
const maxIDs = 100

// listQuery is a validated list query.
type listQuery struct {
	page   pageRequest
	status string  // "" means no filter
	ids    []int64 // nil means no id filter; ascending, without repeats
}

// parameters names the parameters of the list, for messages.
func (spec listSpec) parameters() string {
	if spec.idFilter {
		return "limit, status, id and after"
	}
	return "limit, status and after"
}

// parseListQuery validates the query string of a list. A value out of range
// is an error, never silently corrected: a client asking for 500 items and
// getting 100 would think it had them all.
func parseListQuery(raw string, spec listSpec) (listQuery, error) {
	q := listQuery{page: pageRequest{limit: defaultLimit}}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return q, errorf(codeInvalidParameter, "the query string is not valid URL encoding; parameters are %s, joined with '&'", spec.parameters())
	}
	for name, vs := range values {
		if len(vs) > 1 {
			return q, errorf(codeInvalidParameter, "parameter %q is given %d times; give it at most once", abbreviate(name), len(vs))
		}
		v := vs[0]
		switch name {
		case "limit":
			n, ok := parseDecimal(v)
			if !ok || n < 1 || n > maxLimit {
				return q, errorf(codeInvalidParameter, "parameter limit must be an integer from 1 to %d", maxLimit)
			}
			q.page.limit = int(n)
		case "status":
			if !slices.Contains(spec.statuses, v) {
				return q, errorf(codeInvalidParameter, "parameter status must be one of %s", strings.Join(spec.statuses, ", "))
			}
			q.status = v
		case "after":
			n, ok := parseDecimal(v)
			if !ok {
				return q, errorf(codeInvalidParameter, "parameter after must be %s id: an integer from 0 to 9223372036854775807", article(spec.item))
			}
			q.page.after = n
		case "id":
			if !spec.idFilter {
				return q, errorf(codeInvalidParameter, "unknown parameter %q; %s takes %s", "id", spec.operation, spec.parameters())
			}
			if q.ids, err = parseIDList(v, spec.item); err != nil {
				return q, err
			}
		default:
			return q, errorf(codeInvalidParameter, "unknown parameter %q; %s takes %s", abbreviate(name), spec.operation, spec.parameters())
		}
	}
	return q, nil
}

// parseIDList reads the value of an id filter: 1 to maxIDs ids, each a
// positive int64, separated by commas (OpenAPI's style form, explode false).
// It returns them in ascending order without repeats.
func parseIDList(v, item string) ([]int64, error) {
	items := strings.Split(v, ",")
	if len(items) > maxIDs {
		return nil, errorf(codeInvalidParameter, "parameter id holds %d ids; the limit is %d", len(items), maxIDs)
	}
	ids := make([]int64, 0, len(items))
	for i, s := range items {
		id, ok := parsePathID(s)
		if !ok {
			return nil, errorf(codeInvalidParameter, "parameter id: item %d (%q) is not %s id; give 1 to %d ids, integers from 1 to 9223372036854775807 separated by commas, such as id=7,9,12", i+1, abbreviate(s), article(item), maxIDs)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// nextLink is the RFC 8288 Link header that points at the page after the
// item with id last, with the same limit and filter.
func (spec listSpec) nextLink(q listQuery, last int64) string {
	var b strings.Builder
	b.WriteString("<")
	b.WriteString(spec.path)
	b.WriteString("?limit=")
	b.WriteString(strconv.Itoa(q.page.limit))
	if q.status != "" {
		b.WriteString("&status=")
		b.WriteString(q.status)
	}
	for i, id := range q.ids {
		if i == 0 {
			b.WriteString("&id=")
		} else {
			b.WriteString(",")
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteString("&after=")
	b.WriteString(strconv.FormatInt(last, 10))
	b.WriteString(`>; rel="next"`)
	return b.String()
}
