package main

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
)

// openapiDocument is the OpenAPI 3.1 document of the whole interface. It is
// the contract: contract_test.go holds the service to it in both directions,
// and the client in ./client is generated from it.
//
//go:embed openapi.json
var openapiDocument string

// The Go client in ./client is generated from the document; see docs/api.md,
// "API document and clients". TestGeneratedClientIsUpToDate fails when it is
// stale.
//go:generate go tool oapi-codegen -config client/oapi-codegen.yaml openapi.json

// handleOpenAPIDocument serves GET /v1/openapi.json, without a key: clients
// and generators fetch it before they have one. The ETag is strong (the
// bytes never change while the process runs) and computed once; a client
// that sends it back in If-None-Match gets a 304 instead of the document.
func handleOpenAPIDocument(doc string) http.Handler {
	body := []byte(doc)
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("ETag", etag)
		// Caches may keep the document but must revalidate it: it changes
		// with every release, and revalidation costs one 304.
		h.Set("Cache-Control", "no-cache")
		if etagMatches(r.Header.Values("If-None-Match"), etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		writeBody(w, http.StatusOK, body)
	})
}
