package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decoding a JSON body: decodeObject checks the whole object and hands each
// field's value to its own decoder (decodeID, decodeEnum, or a resource's),
// with messages that name the schema, the field and what was wrong. The
// resources' own rules (what a name may hold, which statuses exist) are in
// their API files.

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

// pathIDs says how to read the id of a path's wildcard: its name (petId),
// and what the id names, in a 404's message.
type pathIDs struct {
	param string // the wildcard: "petId"
	what  string // what the id is of: "pet"
	ids   string // what the message calls the ids: "pet ids"
}

// The ids of the paths.
var (
	petIDs     = pathIDs{param: "petId", what: "pet", ids: "pet ids"}
	orderIDs   = pathIDs{param: "orderId", what: "order", ids: "order ids"}
	webhookIDs = pathIDs{param: "webhookId", what: "webhook subscription", ids: "subscription ids"}
)

// of reads the id of r's path. An id that cannot exist is something that
// does not exist (the interface lists only 401 and 404 for getPet): it
// answers 404 and returns false.
func (p pathIDs) of(w http.ResponseWriter, r *http.Request, log *slog.Logger) (int64, bool) {
	raw := r.PathValue(p.param)
	id, ok := parsePathID(raw)
	if !ok {
		writeError(w, r, log, errorf(codeNotFound, "no %s has id %q; %s are integers from 1 to 9223372036854775807", p.what, abbreviate(raw), p.ids))
	}
	return id, ok
}

// parsePathID reads a resource id from a path segment: a positive int64.
func parsePathID(raw string) (int64, bool) {
	id, ok := parseDecimal(raw)
	return id, ok && id >= 1
}
