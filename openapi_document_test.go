package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"
)

// TestOpenAPIDocumentForTools holds the document to the forms that every
// common OpenAPI tool reads alike, without Node: the linters of
// TestContractTools check the same and more, but only where Node is
// installed.
func TestOpenAPIDocumentForTools(t *testing.T) {
	t.Parallel()
	var raw map[string]any
	if err := json.Unmarshal([]byte(openapiDocument), &raw); err != nil {
		t.Fatal(err)
	}
	t.Run("no $ref has sibling keywords: a narrowing goes through allOf", func(t *testing.T) {
		walkJSON("#", raw, func(pointer string, v map[string]any) {
			if _, ok := v["$ref"]; ok && len(v) > 1 {
				t.Errorf("%s: $ref with %v beside it", pointer, slices.Sorted(maps.Keys(v)))
			}
		})
	})
	t.Run("every component is used by the document, outside the extensions", func(t *testing.T) {
		used := map[string]bool{}
		for key, v := range raw {
			if strings.HasPrefix(key, "x-") {
				continue // tools do not read extensions, so a use there does not count
			}
			walkJSON("#/"+key, v, func(_ string, obj map[string]any) {
				if ref, ok := obj["$ref"].(string); ok {
					used[ref] = true
				}
			})
		}
		components, _ := raw["components"].(map[string]any)
		for kind, v := range components {
			if kind == "securitySchemes" {
				continue // named by security requirements, not by $ref
			}
			for name := range v.(map[string]any) {
				if ref := "#/components/" + kind + "/" + name; !used[ref] {
					t.Errorf("%s is never used", ref)
				}
			}
		}
	})
	t.Run("info names a contact", func(t *testing.T) {
		contact, _ := raw["info"].(map[string]any)["contact"].(map[string]any)
		for _, field := range []string{"name", "url", "email"} {
			if s, _ := contact[field].(string); s == "" {
				t.Errorf("info.contact.%s is missing", field)
			}
		}
	})
	t.Run("an object schema requires only the properties it defines", func(t *testing.T) {
		walkJSON("#", raw, func(pointer string, v map[string]any) {
			required, _ := v["required"].([]any)
			props, _ := v["properties"].(map[string]any)
			if _, isAllOfPart := v["allOf"]; isAllOfPart || len(required) == 0 {
				return
			}
			for _, name := range required {
				if _, ok := props[name.(string)]; !ok {
					t.Errorf("%s requires %q, which it does not define", pointer, name)
				}
			}
		})
	})
}

// walkJSON calls visit with every object in v and its JSON pointer.
func walkJSON(pointer string, v any, visit func(pointer string, obj map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		visit(pointer, v)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			walkJSON(pointer+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), v[k], visit)
		}
	case []any:
		for i, item := range v {
			walkJSON(fmt.Sprintf("%s/%d", pointer, i), item, visit)
		}
	}
}

// TestIdempotencyKeySchemaIsTheServiceRule holds the IdempotencyKey schema
// to what the service accepts: each value is sent to createPet, and the
// schema must accept it exactly when the service does (201, not 400
// invalid_header).
func TestIdempotencyKeySchemaIsTheServiceRule(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	schema := doc.Components.Schemas["IdempotencyKey"]
	if schema == nil {
		t.Fatal("the document has no IdempotencyKey schema")
	}
	ts := newTestServer(t)
	tests := []struct {
		rule  string
		value string
	}{
		{"a bare key of one character", "a"},
		{"a bare UUID", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"a bare key of 255 characters", strings.Repeat("b", 255)},
		{"a bare key of 256 characters is too long", strings.Repeat("c", 256)},
		{"a bare key with spaces, quotes and backslashes inside", `d e"f\g`},
		{"a bare key of non-ASCII characters is refused", "clé"},
		{"a bare key with a tab is refused: printable ASCII only", "h\ti"},
		{"a quoted key", `"j"`},
		{"a quoted key of 255 characters", `"` + strings.Repeat("k", 255) + `"`},
		{"a quoted key of 256 characters is too long", `"` + strings.Repeat("l", 256) + `"`},
		{"an empty quoted key is refused", `""`},
		{"a quoted key with escapes counts them unquoted: 255", `"` + strings.Repeat(`\"`, 200) + strings.Repeat(`\\`, 55) + `"`},
		{"a quoted key with escapes counts them unquoted: 256 is too long", `"` + strings.Repeat(`\\`, 256) + `"`},
		{"a quoted key with an escaped quote", `"m\"n"`},
		{"a quoted key with a bare quote inside is refused", `"o"p"`},
		{"a quoted key with an unknown escape is refused", `"q\r"`},
		{"a quoted key without its closing quote is refused", `"rst`},
		{"a quoted key followed by more is refused", `"u"v`},
		{"a quoted key with a non-ASCII character is refused", `"é"`},
	}
	for i, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			// Each value creates a pet of its own, so that no accepted key
			// is a replay of another row's.
			body := fmt.Sprintf(`{"name":"Key %d","categoryId":1}`, i)
			res := ts.do(t, "POST", "/v1/pets", body, map[string]string{idempotencyHeader: tt.value})
			serviceAccepts := res.Status == http.StatusCreated
			if !serviceAccepts {
				wantError(t, res, http.StatusBadRequest, codeInvalidHeader)
			}
			err := schema.Value.VisitJSON(tt.value, openapi3.EnableJSONSchema2020())
			if diff := cmp.Diff(serviceAccepts, err == nil); diff != "" {
				t.Errorf("Idempotency-Key %q: the service accepts it: %v; the schema accepts it: %v (%v)", tt.value, serviceAccepts, err == nil, err)
			}
		})
	}
}
