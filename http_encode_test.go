package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// stdJSON is what the service wrote before the append encoder: json.Encoder
// with SetEscapeHTML(false), without the trailing newline.
func stdJSON(t testing.TB, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// encoderCases are strings that exercise every branch of appendJSONString.
var encoderCases = []struct{ rule, s string }{
	{"empty string", ""},
	{"plain ASCII is copied", "Rex the dog"},
	{"quote and backslash are escaped", `say "hi" \ bye`},
	{"HTML characters are kept (EscapeHTML off)", "<b>Tom & Jerry</b>"},
	{"named control escapes", "a\bb\fc\nd\re\tf"},
	{"other control characters as \\u00XX", "\x00\x01\x07\x0b\x0e\x1f"},
	{"DEL is not escaped", "\x7f"},
	{"multi-byte UTF-8 is copied", "Café 🐶 日本"},
	{"U+2028 and U+2029 are escaped", "a\u2028b\u2029c"},
	{"invalid UTF-8 bytes become \\ufffd each", "a\xffb\xc3(c\xed\xa0\x80d"},
	{"truncated sequence at the end", "abc\xe2\x82"},
	{"U+FFFD itself is copied", "\ufffd"},
	{"only escapes", "\"\\\n"},
}

func TestAppendPetMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range encoderCases {
		t.Run(tt.rule, func(t *testing.T) {
			p := Pet{ID: 9223372036854775807, Name: tt.s, CategoryID: 1, Status: tt.s}
			if diff := cmp.Diff(stdJSON(t, p), string(appendPet(nil, p))); diff != "" {
				t.Errorf("appendPet mismatch (-encoding/json +append):\n%s", diff)
			}
		})
	}
	lists := []struct {
		rule string
		pets []Pet
	}{
		{"an empty list is [], never null", []Pet{}},
		{"one pet", []Pet{{ID: 1, Name: "Rex", CategoryID: 2, Status: "sold"}}},
		{"several pets are comma-separated", []Pet{{ID: 1, Name: "a", CategoryID: 1, Status: "available"}, {ID: 2, Name: "b\n", CategoryID: 3, Status: "pending"}}},
	}
	for _, tt := range lists {
		t.Run(tt.rule, func(t *testing.T) {
			if diff := cmp.Diff(stdJSON(t, tt.pets), string(appendPets(nil, tt.pets))); diff != "" {
				t.Errorf("appendPets mismatch (-encoding/json +append):\n%s", diff)
			}
		})
	}
}

// FuzzAppendJSONString checks that the append encoder escapes every string
// as encoding/json does. Run it with go test -fuzz=FuzzAppendJSONString.
func FuzzAppendJSONString(f *testing.F) {
	for _, tt := range encoderCases {
		f.Add(tt.s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if want, got := stdJSON(t, s), string(appendJSONString(nil, s)); want != got {
			t.Errorf("appendJSONString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}
