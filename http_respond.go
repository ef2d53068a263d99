package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// Answers: every 2xx body of the API is JSON written by writeBody, with the
// headers every answer carries (errors.go's writeError ends there too).

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

// jsonFields are the values of Content-Type and X-Content-Type-Options on
// every JSON answer, which writeBody puts in each answer's header as
// slices of one element and no room to grow: nothing writes into a
// header's values in place, and an Add to either would copy it first.
var jsonFields = [2]string{"application/json", "nosniff"}

// writeBody sends an already encoded JSON body.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	// What h.Set would do, with the names already canonical and the values
	// shared by every answer rather than allocated for each (see jsonFields).
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = jsonFields[0:1:1], jsonFields[1:2:2]
	w.WriteHeader(status)
	w.Write(body)
}

// etagMatches reports whether the If-None-Match field values name etag. As
// RFC 9110 (section 13.1.2) asks for If-None-Match, the comparison is weak:
// W/"x" matches "x", and "*" matches any current representation.
func etagMatches(fieldValues []string, etag string) bool {
	for _, v := range fieldValues {
		for tag := range strings.SplitSeq(v, ",") {
			tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
			if tag == "*" || tag == etag {
				return true
			}
		}
	}
	return false
}
