package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"
)

func TestOpenAPIDocument(t *testing.T) {
	doc := loadContract(t) // fails unless the document is valid OpenAPI 3.1

	t.Run("the document is version 1.2.0 of the interface", func(t *testing.T) {
		if doc.Info.Version != "1.2.0" {
			t.Errorf("info.version = %q, want 1.2.0", doc.Info.Version)
		}
	})
	t.Run("operations carry the interface's operationIds", func(t *testing.T) {
		got := map[string]string{}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				got[method+" "+path] = op.OperationID
			}
		}
		want := map[string]string{
			"GET /pets":                     "listPets",
			"POST /pets":                    "createPet",
			"GET /pets/{petId}":             "getPet",
			"PATCH /pets/{petId}":           "updatePet",
			"DELETE /pets/{petId}":          "deletePet",
			"GET /store/orders":             "listOrders",
			"POST /store/orders":            "placeOrder",
			"GET /store/orders/{orderId}":   "getOrder",
			"PATCH /store/orders/{orderId}": "updateOrder",
			"GET /events":                   "listEvents",
			"POST /events/tickets":          "createEventTicket",
			"GET /openapi.json":             "getOpenAPIDocument",
			"GET /healthz":                  "getHealth",
			"GET /readyz":                   "getReadiness",
			"GET /metrics":                  "getMetrics",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("operations mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("only getPet is deprecated", func(t *testing.T) {
		var got []string
		for _, item := range doc.Paths.Map() {
			for _, op := range item.Operations() {
				if op.Deprecated {
					got = append(got, op.OperationID)
				}
			}
		}
		if diff := cmp.Diff([]string{"getPet"}, got); diff != "" {
			t.Errorf("deprecated operations mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("every operation but the document and the health checks needs bearerAuth", func(t *testing.T) {
		if s := doc.Components.SecuritySchemes["bearerAuth"]; s == nil || s.Value.Type != "http" || s.Value.Scheme != "bearer" {
			t.Fatalf("no http bearer scheme named bearerAuth: %+v", s)
		}
		if diff := cmp.Diff(`[{"bearerAuth":[]}]`, mustJSON(t, doc.Security)); diff != "" {
			t.Errorf("top-level security mismatch (-want +got):\n%s", diff)
		}
		var open []string
		for _, item := range doc.Paths.Map() {
			for _, op := range item.Operations() {
				if op.Security != nil && len(*op.Security) == 0 {
					open = append(open, op.OperationID)
				}
			}
		}
		slices.Sort(open)
		if diff := cmp.Diff([]string{"getHealth", "getOpenAPIDocument", "getReadiness"}, open); diff != "" {
			t.Errorf("operations without a key mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("only listEvents also opens with a stream ticket, in the query", func(t *testing.T) {
		s := doc.Components.SecuritySchemes["eventTicket"]
		if s == nil || s.Value.Type != "apiKey" || s.Value.In != "query" || s.Value.Name != "ticket" {
			t.Fatalf("no apiKey scheme in the query named eventTicket: %+v", s)
		}
		// Every other operation's security names bearerAuth alone, with
		// its scope (TestRoutesAreTheDocumentsSecurity checks the scopes).
		got := map[string]string{}
		for _, item := range doc.Paths.Map() {
			for _, op := range item.Operations() {
				if op.Security != nil && slices.ContainsFunc(*op.Security, func(r openapi3.SecurityRequirement) bool { return r["eventTicket"] != nil }) {
					got[op.OperationID] = mustJSON(t, op.Security)
				}
			}
		}
		want := map[string]string{"listEvents": `[{"bearerAuth":["events:read"]},{"eventTicket":[]}]`}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("operations with their own security mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("every error code of the document is one the service has", func(t *testing.T) {
		codes := doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum
		if len(codes) == 0 {
			t.Fatalf("the Error schema lists no codes")
		}
		for _, c := range codes {
			// statusOf maps every code it does not know to 500.
			if code, _ := c.(string); statusOf(code) == http.StatusInternalServerError && code != codeInternal {
				t.Errorf("code %q is not in the service's table (statusOf)", code)
			}
		}
	})
	t.Run("production and staging servers end in /v1; the health checks sit outside it", func(t *testing.T) {
		var got []string
		for _, s := range doc.Servers {
			name, _, _ := strings.Cut(s.Description, ".")
			got = append(got, s.URL+" "+name)
		}
		if diff := cmp.Diff([]string{"https://{host}/v1 Production", "https://{host}/v1 Staging"}, got); diff != "" {
			t.Errorf("servers mismatch (-want +got):\n%s", diff)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			var urls []string
			for _, s := range doc.Paths.Value(path).Servers {
				urls = append(urls, s.URL)
			}
			if diff := cmp.Diff([]string{"https://{host}", "https://{host}"}, urls); diff != "" {
				t.Errorf("%s servers mismatch (-want +got):\n%s", path, diff)
			}
		}
	})
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	ts := newTestServer(t)
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(onDisk)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`

	t.Run("the served document is openapi.json, byte for byte, without a key", func(t *testing.T) {
		res := ts.do(t, "GET", "/v1/openapi.json", "", map[string]string{"Authorization": ""})
		if res.Status != http.StatusOK {
			t.Fatalf("status %d, want 200; body %s", res.Status, res.Body)
		}
		if string(res.Body) != string(onDisk) {
			t.Errorf("the served document differs from openapi.json (%d bytes served, %d on disk)", len(res.Body), len(onDisk))
		}
		got := map[string]string{"ETag": res.Header.Get("ETag"), "Content-Type": res.Header.Get("Content-Type"), "Cache-Control": res.Header.Get("Cache-Control")}
		want := map[string]string{"ETag": etag, "Content-Type": "application/json", "Cache-Control": "no-cache"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("headers mismatch (-want +got):\n%s", diff)
		}
	})
	tests := []struct {
		rule        string
		ifNoneMatch []string
		status      int
	}{
		{"the current ETag is 304", []string{etag}, http.StatusNotModified},
		{"the ETag in a list is 304", []string{`"0", ` + etag}, http.StatusNotModified},
		{"the ETag in a second header line is 304", []string{`"0"`, etag}, http.StatusNotModified},
		{"If-None-Match compares weakly: W/ and the ETag is 304", []string{"W/" + etag}, http.StatusNotModified},
		{"a star is 304", []string{"*"}, http.StatusNotModified},
		{"another ETag is 200", []string{`"0"`}, http.StatusOK},
		{"the ETag unquoted is 200", []string{strings.Trim(etag, `"`)}, http.StatusOK},
		{"no If-None-Match is 200", nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			req := newRequest(t, ts.URL, "GET", "/v1/openapi.json", "", nil)
			for _, v := range tt.ifNoneMatch {
				req.Header.Add("If-None-Match", v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := readResponse(t, res)
			if got.Status != tt.status || got.Header.Get("ETag") != etag {
				t.Errorf("status %d, ETag %q; want %d, %q", got.Status, got.Header.Get("ETag"), tt.status, etag)
			}
			if wantBody := tt.status == http.StatusOK; wantBody != (len(got.Body) > 0) {
				t.Errorf("status %d with a body of %d bytes", got.Status, len(got.Body))
			}
		})
	}
}

// mustJSON encodes v, failing the test if it cannot.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	return string(b)
}
