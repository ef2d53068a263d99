package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCreatePet(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	tests := []struct {
		rule string
		body string
		want Pet // without ID
	}{
		{"status omitted is stored as available", `{"name":"Rex","categoryId":1}`,
			Pet{Name: "Rex", CategoryID: 1, Status: "available"}},
		{"status available", `{"name":"Tom","categoryId":2,"status":"available"}`,
			Pet{Name: "Tom", CategoryID: 2, Status: "available"}},
		{"status pending", `{"status":"pending","categoryId":3,"name":"Kit"}`,
			Pet{Name: "Kit", CategoryID: 3, Status: "pending"}},
		{"status sold", `{"name":"Bo","categoryId":4,"status":"sold"}`,
			Pet{Name: "Bo", CategoryID: 4, Status: "sold"}},
		{"categoryId 2^63-1 is the largest allowed", `{"name":"Max","categoryId":9223372036854775807}`,
			Pet{Name: "Max", CategoryID: 9223372036854775807, Status: "available"}},
		{"name of 100 code points, multi-byte", `{"name":"` + strings.Repeat("é", 100) + `","categoryId":1}`,
			Pet{Name: strings.Repeat("é", 100), CategoryID: 1, Status: "available"}},
		{"name of one character", `{"name":"X","categoryId":1}`,
			Pet{Name: "X", CategoryID: 1, Status: "available"}},
		{"name with inner and outer spaces is kept as sent", `{"name":"  Mr Whiskers ","categoryId":1}`,
			Pet{Name: "  Mr Whiskers ", CategoryID: 1, Status: "available"}},
		{"JSON escapes in name are decoded", `{"name":"Caf\u00e9 \ud83d\udc36","categoryId":1}`,
			Pet{Name: "Café 🐶", CategoryID: 1, Status: "available"}},
		{"whitespace around the object is fine", " \n{\"name\":\"Ws\",\"categoryId\":1}\n ",
			Pet{Name: "Ws", CategoryID: 1, Status: "available"}},
		{"an emoji sequence joined by U+200D", `{"name":"Ada \ud83d\udc69\u200d\ud83d\udcbb","categoryId":1}`,
			Pet{Name: "Ada 👩\u200d💻", CategoryID: 1, Status: "available"}},
		{"a Persian name with U+200C", `{"name":"\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645","categoryId":1}`,
			Pet{Name: "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", CategoryID: 1, Status: "available"}},
		{"the flag of Scotland, an emoji tag sequence", `{"name":"Nessie \ud83c\udff4\udb40\udc67\udb40\udc62\udb40\udc73\udb40\udc63\udb40\udc74\udb40\udc7f","categoryId":1}`,
			Pet{Name: "Nessie \U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F", CategoryID: 1, Status: "available"}},
		{"an emoji with its variation selector", `{"name":"\u2764\ufe0f","categoryId":1}`,
			Pet{Name: "❤️", CategoryID: 1, Status: "available"}},
		{"a combining accent after its letter", `{"name":"Rene\u0301","categoryId":1}`,
			Pet{Name: "Rene\u0301", CategoryID: 1, Status: "available"}},
	}
	seen := map[int64]bool{}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "POST", "/v1/pets", tt.body, nil)
			if res.Status != http.StatusCreated {
				t.Fatalf("status %d, want 201; body %s", res.Status, res.Body)
			}
			got := decode[Pet](t, res)
			if got.ID < 1 || seen[got.ID] {
				t.Errorf("id %d is not a fresh positive id", got.ID)
			}
			seen[got.ID] = true
			want := tt.want
			want.ID = got.ID
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("createPet mismatch (-want +got):\n%s", diff)
			}
			if loc, wantLoc := res.Header.Get("Location"), fmt.Sprintf("/v1/pets/%d", got.ID); loc != wantLoc {
				t.Errorf("Location = %q, want %q", loc, wantLoc)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			// The created pet is what getPet returns from the database.
			stored := decode[Pet](t, ts.do(t, "GET", res.Header.Get("Location"), "", nil))
			if diff := cmp.Diff(want, stored); diff != "" {
				t.Errorf("getPet after create mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreatePetRejectsInvalidBodies(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	tests := []struct {
		rule    string
		body    string
		code    string
		mention []string
	}{
		{"name is required", `{"categoryId":1}`, codeInvalidField, []string{"name", "required"}},
		{"categoryId is required", `{"name":"Rex"}`, codeInvalidField, []string{"categoryId", "required"}},
		{"both required fields missing", `{}`, codeInvalidField, []string{"name", "categoryId"}},
		{"status only", `{"status":"sold"}`, codeInvalidField, []string{"name", "categoryId"}},
		{"name empty", `{"name":"","categoryId":1}`, codeInvalidField, []string{"name", "empty"}},
		{"name blank", `{"name":"   ","categoryId":1}`, codeInvalidField, []string{"name", "blank"}},
		{"name of only a tab and newline is blank", `{"name":"\t\n","categoryId":1}`, codeInvalidField, []string{"name"}},
		{"name over 100 code points", `{"name":"` + strings.Repeat("é", 101) + `","categoryId":1}`, codeInvalidField, []string{"name", "100", "101"}},
		{"name with a control character", `{"name":"Re\u0007x","categoryId":1}`, codeInvalidField, []string{"name", "control", "U+0007"}},
		{"name with a NUL byte", `{"name":"Re\u0000x","categoryId":1}`, codeInvalidField, []string{"name", "control"}},
		{"name with a newline", `{"name":"Re\nx","categoryId":1}`, codeInvalidField, []string{"name", "control"}},
		{"name with a C1 control", `{"name":"Re\u0085x","categoryId":1}`, codeInvalidField, []string{"name", "control"}},
		{"name with an unpaired surrogate escape", `{"name":"Re\ud800x","categoryId":1}`, codeInvalidField, []string{"name", "surrogate"}},
		{"name with U+202E, which reverses the text after it", `{"name":"Rex\u202egpj.exe","categoryId":1}`, codeInvalidField, []string{"name", "U+202E", "joiners"}},
		{"name with a bidirectional isolate", `{"name":"\u2066Rex\u2069","categoryId":1}`, codeInvalidField, []string{"name", "U+2066"}},
		{"name with a zero-width space", `{"name":"Re\u200bx","categoryId":1}`, codeInvalidField, []string{"name", "U+200B"}},
		{"name with a byte order mark", `{"name":"\ufeffRex","categoryId":1}`, codeInvalidField, []string{"name", "U+FEFF"}},
		{"name with a soft hyphen", `{"name":"Re\u00adx","categoryId":1}`, codeInvalidField, []string{"name", "U+00AD"}},
		{"name made only of joiners", `{"name":"\u200d\u200c\u200d","categoryId":1}`, codeInvalidField, []string{"name", "at least one letter"}},
		{"name made only of a joiner and spaces", `{"name":" \u200d ","categoryId":1}`, codeInvalidField, []string{"name", "at least one letter"}},
		{"name made only of a combining mark", `{"name":"\u0301","categoryId":1}`, codeInvalidField, []string{"name", "at least one letter"}},
		{"name with a line separator", `{"name":"Re\u2028x","categoryId":1}`, codeInvalidField, []string{"name", "one line", "U+2028"}},
		{"name with a paragraph separator", `{"name":"Re\u2029x","categoryId":1}`, codeInvalidField, []string{"name", "one line", "U+2029"}},
		{"name with tag characters outside a flag, hidden text", `{"name":"Rex\udb40\udc68\udb40\udc69","categoryId":1}`, codeInvalidField, []string{"name", "U+E0068"}},
		{"name with a flag's tags that do not end", `{"name":"\ud83c\udff4\udb40\udc67\udb40\udc62","categoryId":1}`, codeInvalidField, []string{"name", "U+E007F"}},
		{"name with a flag's tags followed by a letter", `{"name":"\ud83c\udff4\udb40\udc67x","categoryId":1}`, codeInvalidField, []string{"name", "U+E007F"}},
		{"name with a cancel tag alone", `{"name":"Rex\udb40\udc7f","categoryId":1}`, codeInvalidField, []string{"name", "U+E007F"}},
		{"name as a number", `{"name":5,"categoryId":1}`, codeInvalidField, []string{"name", "string"}},
		{"name null", `{"name":null,"categoryId":1}`, codeInvalidField, []string{"name", "string"}},
		{"name as an array", `{"name":["Rex"],"categoryId":1}`, codeInvalidField, []string{"name", "string"}},
		{"categoryId as a string", `{"name":"Rex","categoryId":"1"}`, codeInvalidField, []string{"categoryId", "not a string"}},
		{"categoryId as a fraction", `{"name":"Rex","categoryId":1.5}`, codeInvalidField, []string{"categoryId", "fraction"}},
		{"categoryId whole but written with a fraction", `{"name":"Rex","categoryId":1.0}`, codeInvalidField, []string{"categoryId", "fraction"}},
		{"categoryId in exponent form", `{"name":"Rex","categoryId":1e3}`, codeInvalidField, []string{"categoryId", "exponent"}},
		{"categoryId in capital exponent form", `{"name":"Rex","categoryId":1E3}`, codeInvalidField, []string{"categoryId", "exponent"}},
		{"categoryId zero", `{"name":"Rex","categoryId":0}`, codeInvalidField, []string{"categoryId", "from 1"}},
		{"categoryId negative", `{"name":"Rex","categoryId":-3}`, codeInvalidField, []string{"categoryId", "-3"}},
		{"categoryId 2^63 overflows int64", `{"name":"Rex","categoryId":9223372036854775808}`, codeInvalidField, []string{"categoryId", "9223372036854775807"}},
		{"categoryId far too large", `{"name":"Rex","categoryId":` + strings.Repeat("9", 400) + `}`, codeInvalidField, []string{"categoryId", "..."}},
		{"categoryId null", `{"name":"Rex","categoryId":null}`, codeInvalidField, []string{"categoryId", "null"}},
		{"categoryId boolean", `{"name":"Rex","categoryId":true}`, codeInvalidField, []string{"categoryId", "boolean"}},
		{"categoryId object", `{"name":"Rex","categoryId":{"id":1}}`, codeInvalidField, []string{"categoryId", "object"}},
		{"status not a PetStatus", `{"name":"Rex","categoryId":1,"status":"adopted"}`, codeInvalidField, []string{"status", "available, pending, sold"}},
		{"status in the wrong case", `{"name":"Rex","categoryId":1,"status":"Available"}`, codeInvalidField, []string{"status"}},
		{"status empty", `{"name":"Rex","categoryId":1,"status":""}`, codeInvalidField, []string{"status"}},
		{"status null", `{"name":"Rex","categoryId":1,"status":null}`, codeInvalidField, []string{"status"}},
		{"status a number", `{"name":"Rex","categoryId":1,"status":1}`, codeInvalidField, []string{"status"}},
		{"client-supplied id", `{"id":7,"name":"Rex","categoryId":1}`, codeInvalidField, []string{"id", "assigns"}},
		{"unknown field", `{"name":"Rex","categoryId":1,"colour":"red"}`, codeInvalidField, []string{`"colour"`, "name, categoryId and status"}},
		{"field name in the wrong case", `{"Name":"Rex","categoryId":1}`, codeInvalidField, []string{`"Name"`}},
		{"repeated field", `{"name":"Rex","name":"Max","categoryId":1}`, codeInvalidField, []string{"name", "more than once"}},
		{"empty body", ``, codeInvalidBody, []string{"empty"}},
		{"blank body", " \n\t", codeInvalidBody, []string{"empty"}},
		{"array instead of object", `[{"name":"Rex","categoryId":1}]`, codeInvalidBody, []string{"JSON object"}},
		{"string instead of object", `"Rex"`, codeInvalidBody, []string{"JSON object"}},
		{"null body", `null`, codeInvalidBody, []string{"JSON object"}},
		{"syntax error", `{"name":"Rex",}`, codeInvalidBody, []string{"not valid JSON", "at byte"}},
		{"truncated object", `{"name":"Rex","categoryId":1`, codeInvalidBody, []string{"not valid JSON"}},
		{"second object after the first", `{"name":"Rex","categoryId":1}{"name":"Max","categoryId":1}`, codeInvalidBody, []string{"one JSON object"}},
		{"garbage after the object", `{"name":"Rex","categoryId":1} x`, codeInvalidBody, []string{"one JSON object"}},
		{"invalid UTF-8", "{\"name\":\"Re\xffx\",\"categoryId\":1}", codeInvalidBody, []string{"UTF-8"}},
		{"deeply nested JSON", `{"name":"Rex","categoryId":1,"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, codeInvalidBody, []string{"not valid JSON"}},
		{"deeply nested JSON as the name", `{"name":` + strings.Repeat(`{"a":`, 100000) + `1` + strings.Repeat("}", 100000) + `,"categoryId":1}`, codeInvalidBody, []string{"not valid JSON"}},
		{"deeply nested JSON at the top, never closed", strings.Repeat("[", 500000), codeInvalidBody, []string{"JSON object"}},
		{"invalid UTF-8 in name, a lone continuation byte", "{\"name\":\"\x80\",\"categoryId\":1}", codeInvalidBody, []string{"UTF-8"}},
		{"invalid UTF-8 in name, an overlong encoding of '/'", "{\"name\":\"\xc0\xaf\",\"categoryId\":1}", codeInvalidBody, []string{"UTF-8"}},
		{"invalid UTF-8 in name, an encoded surrogate", "{\"name\":\"\xed\xa0\x80\",\"categoryId\":1}", codeInvalidBody, []string{"UTF-8"}},
		{"a raw NUL byte inside the name", "{\"name\":\"Re\x00x\",\"categoryId\":1}", codeInvalidBody, []string{"not valid JSON"}},
		{"a raw NUL byte between fields", "{\"name\":\"Rex\",\x00\"categoryId\":1}", codeInvalidBody, []string{"not valid JSON"}},
		{"a NUL byte after the object", "{\"name\":\"Rex\",\"categoryId\":1}\x00", codeInvalidBody, []string{"one JSON object"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "POST", "/v1/pets", tt.body, map[string]string{"Content-Type": "application/json"})
			wantError(t, res, http.StatusBadRequest, tt.code, tt.mention...)
		})
	}
	// None of the refused bodies left anything behind.
	if got := ts.do(t, "GET", "/v1/pets", "", nil); string(got.Body) != "[]\n" {
		t.Errorf("after only invalid creates, GET /v1/pets = %s, want []", got.Body)
	}
}

func TestCreatePetMediaTypeAndSize(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	valid := `{"name":"Rex","categoryId":1}`
	accepted := []struct {
		rule        string
		contentType string
	}{
		{"application/json", "application/json"},
		{"charset parameter is accepted", "application/json; charset=utf-8"},
		{"media type is case-insensitive", "Application/JSON"},
		{"no Content-Type is read as JSON", ""},
	}
	for _, tt := range accepted {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "POST", "/v1/pets", valid, map[string]string{"Content-Type": tt.contentType})
			if res.Status != http.StatusCreated {
				t.Errorf("status %d, want 201; body %s", res.Status, res.Body)
			}
		})
	}
	refused := []struct{ rule, contentType, mention string }{
		{"text/plain is 415", "text/plain", "must be JSON"},
		{"form encoding is 415", "application/x-www-form-urlencoded", "must be JSON"},
		{"a +json suffix type is 415", "application/merge-patch+json", "must be JSON"},
		{"an unparsable Content-Type is 415, saying so", "application/json; charset", "malformed"},
	}
	for _, tt := range refused {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "POST", "/v1/pets", valid, map[string]string{"Content-Type": tt.contentType})
			wantError(t, res, http.StatusUnsupportedMediaType, codeUnsupportedMediaType, "application/json", tt.mention)
		})
	}
	t.Run("two Content-Type headers are 415, whichever comes first", func(t *testing.T) {
		for _, types := range [][]string{{"application/json", "text/plain"}, {"text/plain", "application/json"}} {
			req, err := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/v1/pets", strings.NewReader(valid))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+testKey)
			for _, ct := range types {
				req.Header.Add("Content-Type", ct)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			wantError(t, response{Status: res.StatusCode, Header: res.Header, Body: body}, http.StatusUnsupportedMediaType, codeUnsupportedMediaType, "2 Content-Type headers")
		}
	})

	// A valid object padded with spaces to just over 1 MiB: only its size is wrong.
	big := valid + strings.Repeat(" ", maxBodyBytes-len(valid)+1)
	t.Run("a body of 1 MiB exactly is accepted", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/pets", big[:maxBodyBytes], nil)
		if res.Status != http.StatusCreated {
			t.Errorf("status %d, want 201; body %s", res.Status, res.Body)
		}
	})
	t.Run("a body over 1 MiB with Content-Length is 413", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/pets", big, nil)
		wantError(t, res, http.StatusRequestEntityTooLarge, codePayloadTooLarge, "1 MiB")
	})
	t.Run("a chunked body over 1 MiB is 413", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/v1/pets", strings.NewReader(big))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // forces chunked transfer encoding
		req.Header.Set("Authorization", "Bearer "+testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, readResponse(t, res), http.StatusRequestEntityTooLarge, codePayloadTooLarge, "1 MiB")
	})
}

func TestListPets(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	t.Run("an empty catalogue lists as []", func(t *testing.T) {
		res := ts.do(t, "GET", "/v1/pets", "", nil)
		if res.Status != http.StatusOK || string(res.Body) != "[]\n" {
			t.Errorf("got %d %q, want 200 []", res.Status, res.Body)
		}
		if link := res.Header.Get("Link"); link != "" {
			t.Errorf("Link = %q on an empty list, want none", link)
		}
	})

	statuses := []string{"available", "pending", "sold"}
	var all []Pet
	for i := range 25 {
		all = append(all, ts.createPet(t, fmt.Sprintf("pet-%02d", i), int64(i%3+1), statuses[i%3]))
	}
	byStatus := func(s string) []Pet {
		return slices.DeleteFunc(slices.Clone(all), func(p Pet) bool { return p.Status != s })
	}

	tests := []struct {
		rule     string
		query    string
		want     []Pet
		wantLink string
	}{
		{"limit defaults to 20", "", all[:20],
			fmt.Sprintf(`</v1/pets?limit=20&after=%d>; rel="next"`, all[19].ID)},
		{"limit 1 is the minimum", "?limit=1", all[:1],
			fmt.Sprintf(`</v1/pets?limit=1&after=%d>; rel="next"`, all[0].ID)},
		{"limit 100 is the maximum", "?limit=100", all, ""},
		{"limit equal to the count has no next page", "?limit=25", all, ""},
		{"leading zeros in limit are a plain integer", "?limit=005", all[:5],
			fmt.Sprintf(`</v1/pets?limit=5&after=%d>; rel="next"`, all[4].ID)},
		{"status filter", "?status=pending", byStatus("pending"), ""},
		{"status filter with limit", "?status=sold&limit=3", byStatus("sold")[:3],
			fmt.Sprintf(`</v1/pets?limit=3&status=sold&after=%d>; rel="next"`, byStatus("sold")[2].ID)},
		{"after skips up to and including that id", fmt.Sprintf("?after=%d", all[22].ID), all[23:], ""},
		{"after 0 starts at the beginning", "?after=0&limit=2", all[:2],
			fmt.Sprintf(`</v1/pets?limit=2&after=%d>; rel="next"`, all[1].ID)},
		{"after beyond the last id is an empty page", "?after=9223372036854775807", []Pet{}, ""},
		{"after with a status filter", fmt.Sprintf("?status=available&after=%d", all[20].ID),
			slices.DeleteFunc(byStatus("available"), func(p Pet) bool { return p.ID <= all[20].ID }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "GET", "/v1/pets"+tt.query, "", nil)
			if res.Status != http.StatusOK {
				t.Fatalf("status %d, want 200; body %s", res.Status, res.Body)
			}
			if diff := cmp.Diff(tt.want, decode[[]Pet](t, res)); diff != "" {
				t.Errorf("listPets(%s) mismatch (-want +got):\n%s", tt.query, diff)
			}
			if got := res.Header.Get("Link"); got != tt.wantLink {
				t.Errorf("Link = %q, want %q", got, tt.wantLink)
			}
		})
	}
}

func TestListPetsRejectsInvalidParameters(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	tests := []struct {
		rule    string
		query   string
		mention []string
	}{
		{"limit 0 is below the minimum", "limit=0", []string{"limit", "1 to 100"}},
		{"limit 101 is above the maximum", "limit=101", []string{"limit", "1 to 100"}},
		{"negative limit", "limit=-1", []string{"limit"}},
		{"limit with a plus sign", "limit=%2B5", []string{"limit"}},
		{"limit not an integer", "limit=ten", []string{"limit"}},
		{"fractional limit", "limit=2.5", []string{"limit"}},
		{"empty limit", "limit=", []string{"limit"}},
		{"huge limit", "limit=99999999999999999999999", []string{"limit"}},
		{"limit given twice", "limit=5&limit=6", []string{"limit", "2 times"}},
		{"status not a PetStatus", "status=adopted", []string{"status", "available, pending, sold"}},
		{"status in the wrong case", "status=SOLD", []string{"status"}},
		{"empty status", "status=", []string{"status"}},
		{"status given twice", "status=sold&status=pending", []string{"status"}},
		{"negative after", "after=-1", []string{"after"}},
		{"after not an integer", "after=abc", []string{"after"}},
		{"after beyond int64", "after=9223372036854775808", []string{"after"}},
		{"empty after", "after=", []string{"after"}},
		{"unknown parameter", "page=2", []string{`"page"`, "limit, status, id and after"}},
		{"misspelt parameter", "limt=5", []string{`"limt"`}},
		{"a NUL byte in status", "status=sold%00", []string{"status"}},
		{"a NUL byte in limit", "limit=5%00", []string{"limit"}},
		{"invalid UTF-8 in status", "status=%ff%fe", []string{"status"}},
		{"invalid UTF-8 in a parameter name", "%ff=1", []string{"unknown parameter"}},
		{"malformed escaping", "limit=%zz", []string{"URL encoding"}},
		{"semicolon separator", "limit=5;status=sold", []string{"URL encoding"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "GET", "/v1/pets?"+tt.query, "", nil)
			wantError(t, res, http.StatusBadRequest, codeInvalidParameter, tt.mention...)
		})
	}
}

// TestPagination follows the Link headers through whole listings, as a client
// would, with and without a filter, and with pets added between pages.
func TestPagination(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	statuses := []string{"available", "pending", "sold", "available"}
	var all []Pet
	for i := range 47 {
		all = append(all, ts.createPet(t, fmt.Sprintf("pet-%02d", i), 1, statuses[i%4]))
	}

	follow := func(t *testing.T, start string, between func()) []Pet {
		return listAll[Pet](t, ts.URL, start, nil, between)
	}

	t.Run("all pages together are every pet once, in id order", func(t *testing.T) {
		if diff := cmp.Diff(all, follow(t, "/v1/pets?limit=10", nil)); diff != "" {
			t.Errorf("paged listing mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the filter is carried from page to page", func(t *testing.T) {
		want := slices.DeleteFunc(slices.Clone(all), func(p Pet) bool { return p.Status != "available" })
		if diff := cmp.Diff(want, follow(t, "/v1/pets?status=available&limit=4", nil)); diff != "" {
			t.Errorf("filtered paged listing mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("pets added while paging are neither skipped nor repeated", func(t *testing.T) {
		want := slices.Clone(all)
		n := 0
		got := follow(t, "/v1/pets?limit=7", func() {
			if n < 5 {
				want = append(want, ts.createPet(t, fmt.Sprintf("late-%d", n), 2, "available"))
				n++
			}
		})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("listing with concurrent inserts mismatch (-want +got):\n%s", diff)
		}
	})
}

// TestPagingWhileStatusesChange pages through a filtered list of pets, and
// one of orders, while other clients change statuses between the pages:
// no item is listed twice, and every item whose status did not change is
// listed.
func TestPagingWhileStatusesChange(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	var pets []Pet
	for i := range 40 {
		pets = append(pets, ts.createPet(t, fmt.Sprint("pet-", i), 1, "available"))
	}
	var orders []orderJSON
	for _, p := range pets[20:] {
		orders = append(orders, ts.placeOrder(t, p.ID))
	}
	changed := map[int64]bool{}
	n := 0
	// Between pages, two pets change status: one ahead of the pages read
	// so far, one behind.
	changePets := func() {
		for _, i := range []int{(n*7 + 3) % 20, (n * 11) % 20} {
			p := pets[i]
			to := []string{"sold", "pending", "available"}[n%3]
			if res := ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", p.ID), fmt.Sprintf(`{"status":%q}`, to), nil); res.Status != http.StatusOK {
				t.Fatalf("PATCH: %d", res.Status)
			}
			changed[p.ID] = true
		}
		n++
	}
	got := listAll[Pet](t, ts.URL, "/v1/pets?status=available&limit=3", nil, changePets)
	seen := map[int64]bool{}
	for _, p := range got {
		if seen[p.ID] {
			t.Errorf("pet %d listed twice", p.ID)
		}
		seen[p.ID] = true
	}
	for _, p := range pets[:20] {
		if !changed[p.ID] && !seen[p.ID] {
			t.Errorf("pet %d stayed available but was skipped", p.ID)
		}
	}

	changedOrders := map[int64]bool{}
	n = 0
	changeOrders := func() {
		o := orders[(n*7)%len(orders)]
		if !changedOrders[o.ID] {
			ts.setOrder(t, o.ID, "delivered")
			changedOrders[o.ID] = true
		}
		n++
	}
	gotOrders := listAll[orderJSON](t, ts.URL, "/v1/store/orders?status=placed&limit=3", nil, changeOrders)
	seenOrders := map[int64]bool{}
	for _, o := range gotOrders {
		if seenOrders[o.ID] {
			t.Errorf("order %d listed twice", o.ID)
		}
		seenOrders[o.ID] = true
	}
	for _, o := range orders {
		if !changedOrders[o.ID] && !seenOrders[o.ID] {
			t.Errorf("order %d stayed placed but was skipped", o.ID)
		}
	}
}

func TestGetPet(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	rex := ts.createPet(t, "Rex", 7, "pending")

	t.Run("an existing pet", func(t *testing.T) {
		res := ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", rex.ID), "", nil)
		if res.Status != http.StatusOK {
			t.Fatalf("status %d, want 200; body %s", res.Status, res.Body)
		}
		if diff := cmp.Diff(rex, decode[Pet](t, res)); diff != "" {
			t.Errorf("getPet mismatch (-want +got):\n%s", diff)
		}
	})
	notFound := []struct{ rule, id string }{
		{"an id no pet has", strconv.FormatInt(rex.ID+1000, 10)},
		{"the largest int64 id", "9223372036854775807"},
		{"id zero cannot exist", "0"},
		{"a negative id", "-1"},
		{"an id that is not a number", "rex"},
		{"a fractional id", "1.5"},
		{"an id beyond int64", "9223372036854775808"},
		{"an id with a plus sign", "%2B1"},
		{"an id with a NUL byte", "1%00"},
		{"an id that is invalid UTF-8", "%ff"},
	}
	for _, tt := range notFound {
		t.Run(tt.rule+" is 404", func(t *testing.T) {
			res := ts.do(t, "GET", "/v1/pets/"+tt.id, "", nil)
			wantError(t, res, http.StatusNotFound, codeNotFound, "no pet has id")
		})
	}
}

func TestGetPetDeprecation(t *testing.T) {
	t.Parallel()
	sunset := time.Date(2030, time.December, 5, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := sunset.Add(-time.Nanosecond)
	ts := newTestServer(t, withClock(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}))
	setClock := func(c time.Time) {
		mu.Lock()
		defer mu.Unlock()
		clock = c
	}
	rex := ts.createPet(t, "Rex", 1, "")
	path := fmt.Sprintf("/v1/pets/%d", rex.ID)
	// The headers name the documentation and, for the same pet, the
	// successor: listPets with the id filter.
	headersFor := func(id string) map[string][]string {
		return map[string][]string{
			"Deprecation": {fmt.Sprintf("@%d", time.Date(2026, time.November, 21, 0, 0, 0, 0, time.UTC).Unix())},
			"Sunset":      {"Thu, 05 Dec 2030 00:00:00 GMT"},
			"Link":        {`</v1/openapi.json>; rel="deprecation"; type="application/json", </v1/pets?id=` + id + `>; rel="successor-version"`},
		}
	}
	checkHeadersOf := func(t *testing.T, res response, id string) {
		t.Helper()
		want := headersFor(id)
		got := map[string][]string{}
		for k := range want {
			got[k] = res.Header.Values(k)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("deprecation headers mismatch (-want +got):\n%s", diff)
		}
	}
	checkHeaders := func(t *testing.T, res response) { t.Helper(); checkHeadersOf(t, res, fmt.Sprint(rex.ID)) }

	t.Run("before the sunset a found pet is 200 with the headers", func(t *testing.T) {
		res := ts.do(t, "GET", path, "", nil)
		if res.Status != http.StatusOK {
			t.Errorf("status %d, want 200", res.Status)
		}
		checkHeaders(t, res)
	})
	t.Run("a 404 carries the headers", func(t *testing.T) {
		res := ts.do(t, "GET", "/v1/pets/999999", "", nil)
		wantError(t, res, http.StatusNotFound, codeNotFound)
		checkHeadersOf(t, res, "999999")
	})
	t.Run("a 401 carries the headers", func(t *testing.T) {
		res := ts.do(t, "GET", path, "", map[string]string{"Authorization": ""})
		wantError(t, res, http.StatusUnauthorized, codeUnauthorized)
		checkHeaders(t, res)
	})
	t.Run("from the sunset instant on it is 410 gone", func(t *testing.T) {
		for _, c := range []time.Time{sunset, sunset.Add(24 * time.Hour)} {
			setClock(c)
			res := ts.do(t, "GET", path, "", nil)
			wantError(t, res, http.StatusGone, codeGone, "GET /v1/pets?id="+fmt.Sprint(rex.ID))
			checkHeaders(t, res)
		}
	})
	t.Run("after the sunset an id that cannot exist is not offered as a successor", func(t *testing.T) {
		setClock(sunset)
		res := ts.do(t, "GET", "/v1/pets/rex", "", nil)
		wantError(t, res, http.StatusGone, codeGone, "GET /v1/pets?id={petId}")
		if got := res.Header.Values("Link"); !cmp.Equal(got, []string{`</v1/openapi.json>; rel="deprecation"; type="application/json"`}) {
			t.Errorf("Link = %q, want only the documentation", got)
		}
	})
	t.Run("after the sunset a request without a key is still 401", func(t *testing.T) {
		setClock(sunset)
		res := ts.do(t, "GET", path, "", map[string]string{"Authorization": ""})
		wantError(t, res, http.StatusUnauthorized, codeUnauthorized)
	})
	t.Run("no other operation is deprecated", func(t *testing.T) {
		for _, req := range []struct{ method, path, body string }{
			{"GET", "/v1/pets", ""},
			{"POST", "/v1/pets", `{"name":"Max","categoryId":1}`},
			{"PATCH", path, `{}`},
			{"DELETE", "/v1/pets/999999", ""},
			{"POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, rex.ID)},
			{"GET", "/v1/store/orders", ""},
			{"GET", "/v1/store/orders/1", ""},
			{"PATCH", "/v1/store/orders/1", `{"status":"cancelled"}`},
		} {
			res := ts.do(t, req.method, req.path, req.body, nil)
			if res.Header.Get("Deprecation") != "" || res.Header.Get("Sunset") != "" || res.Header.Get("Link") != "" {
				t.Errorf("%s %s carries deprecation headers: %v", req.method, req.path, res.Header)
			}
		}
	})
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	rex := ts.createPet(t, "Rex", 1, "")
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/pets", ""},
		{"POST", "/v1/pets", `{"name":"Max","categoryId":1}`},
		{"GET", fmt.Sprintf("/v1/pets/%d", rex.ID), ""},
		{"GET", "/v1/pets/999999", ""},
		{"GET", "/v1/store/orders", ""},
		{"POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, rex.ID)},
		{"GET", "/v1/store/orders/1", ""},
		{"PATCH", "/v1/store/orders/1", `{"status":"cancelled"}`},
		{"PATCH", fmt.Sprintf("/v1/pets/%d", rex.ID), `{"status":"sold"}`},
		{"DELETE", fmt.Sprintf("/v1/pets/%d", rex.ID), ""},
		{"GET", "/v1/no-such-thing", ""},
		{"DELETE", "/v1/pets", ""},
	}
	refused := []struct {
		rule, authorization, wwwAuthenticate string
	}{
		{"no Authorization header", "", `Bearer realm="petstore"`},
		{"a wrong key", "Bearer not-a-key", `Bearer realm="petstore", error="invalid_token"`},
		{"a prefix of a real key", "Bearer " + testKey[:5], `Bearer realm="petstore", error="invalid_token"`},
		{"a real key with extra characters", "Bearer " + testKey + "x", `Bearer realm="petstore", error="invalid_token"`},
		{"an empty bearer token (HTTP trims it to the bare scheme)", "Bearer ", `Bearer realm="petstore"`},
		{"the scheme without a token", "Bearer", `Bearer realm="petstore"`},
		{"the key without a scheme", testKey, `Bearer realm="petstore"`},
		{"Basic scheme", "Basic dXNlcjpwYXNz", `Bearer realm="petstore"`},
		{"the key list itself is not a key", "Bearer " + testKey + ", " + otherTestKey, `Bearer realm="petstore", error="invalid_token"`},
	}
	for _, rt := range routes {
		for _, tt := range refused {
			t.Run(rt.method+" "+rt.path+": "+tt.rule, func(t *testing.T) {
				res := ts.do(t, rt.method, rt.path, rt.body, map[string]string{"Authorization": tt.authorization})
				wantError(t, res, http.StatusUnauthorized, codeUnauthorized, "Authorization")
				if got := res.Header.Get("WWW-Authenticate"); got != tt.wwwAuthenticate {
					t.Errorf("WWW-Authenticate = %q, want %q", got, tt.wwwAuthenticate)
				}
				if strings.Contains(string(res.Body), "not-a-key") || strings.Contains(string(res.Body), testKey[:5]) {
					t.Errorf("the 401 body echoes the key: %s", res.Body)
				}
			})
		}
	}
	if diff := cmp.Diff([]Pet{rex}, ts.petNow(t, rex.ID)); diff != "" {
		t.Errorf("refused requests changed the pet (-want +got):\n%s", diff)
	}
	if orders := listAll[orderJSON](t, ts.URL, "/v1/store/orders", nil, nil); len(orders) != 0 {
		t.Errorf("refused requests placed orders: %v", orders)
	}
	accepted := []struct{ rule, authorization string }{
		{"the first key", "Bearer " + testKey},
		{"the second key", "Bearer " + otherTestKey},
		{"scheme in lower case", "bearer " + testKey},
		{"scheme in upper case", "BEARER " + testKey},
		{"several spaces after the scheme", "Bearer   " + testKey},
	}
	for _, tt := range accepted {
		t.Run("accepted: "+tt.rule, func(t *testing.T) {
			res := ts.do(t, "GET", "/v1/pets", "", map[string]string{"Authorization": tt.authorization})
			if res.Status != http.StatusOK {
				t.Errorf("status %d, want 200; body %s", res.Status, res.Body)
			}
		})
	}
	if log := ts.Log.String(); strings.Contains(log, testKey) || strings.Contains(log, otherTestKey) || strings.Contains(log, "not-a-key") {
		t.Errorf("the log contains a key:\n%s", log)
	}
}

func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	rex := ts.createPet(t, "Rex", 1, "")
	for _, route := range []struct{ method, path, body string }{
		{"GET", "/v1/pets", ""},
		{"POST", "/v1/pets", `{"name":"Max","categoryId":1}`},
		{"GET", fmt.Sprintf("/v1/pets/%d", rex.ID), ""},
		{"DELETE", fmt.Sprintf("/v1/pets/%d", rex.ID), ""},
		{"GET", "/metrics", ""},
		{"GET", "/v1/no-such-thing", ""},
	} {
		for _, tt := range []struct{ rule, first, second string }{
			{"the same valid key twice", testKey, testKey},
			{"two valid keys", testKey, otherTestKey},
			{"a valid key, then a wrong one", testKey, "not-a-key"},
			{"a wrong key, then a valid one", "not-a-key", testKey},
		} {
			t.Run(route.method+" "+route.path+": "+tt.rule, func(t *testing.T) {
				req := newRequest(t, ts.URL, route.method, route.path, route.body, nil)
				req.Header.Set("Authorization", "Bearer "+tt.first)
				req.Header.Add("Authorization", "Bearer "+tt.second)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				wantError(t, readResponse(t, res), http.StatusBadRequest, codeInvalidHeader, "Authorization", "2 times")
			})
		}
	}
	if diff := cmp.Diff([]Pet{rex}, ts.petNow(t, rex.ID)); diff != "" {
		t.Errorf("refused requests changed the catalogue (-want +got):\n%s", diff)
	}
}

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	tests := []struct {
		rule      string
		method    string
		path      string
		status    int
		code      string
		wantAllow string
	}{
		{"unknown path is 404", "GET", "/v1/cats", 404, codeNotFound, ""},
		{"path outside /v1 is 404", "GET", "/pets", 404, codeNotFound, ""},
		{"the root only redirects GET to the reference: POST is 405", "POST", "/", 405, codeMethodNotAllowed, "GET, HEAD"},
		{"trailing slash is 404", "GET", "/v1/pets/", 404, codeNotFound, ""},
		{"double slash is 404, not a redirect", "POST", "/v1//pets", 404, codeNotFound, ""},
		{"dot segment is 404, not a redirect", "GET", "/v1/./pets", 404, codeNotFound, ""},
		{"sub-resource of a pet is 404", "GET", "/v1/pets/1/photos", 404, codeNotFound, ""},
		{"DELETE on the collection is 405", "DELETE", "/v1/pets", 405, codeMethodNotAllowed, "GET, HEAD, POST"},
		{"PUT on a pet is 405", "PUT", "/v1/pets/1", 405, codeMethodNotAllowed, "DELETE, GET, HEAD, PATCH"},
		{"DELETE on orders is 405", "DELETE", "/v1/store/orders", 405, codeMethodNotAllowed, "GET, HEAD, POST"},
		{"DELETE on an order is 405: orders are history", "DELETE", "/v1/store/orders/1", 405, codeMethodNotAllowed, "GET, HEAD, PATCH"},
		{"an encoded slash is not a slash: 404, named as sent", "GET", "/v1/store/orders%2F1", 404, codeNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, tt.method, tt.path, "", nil)
			wantError(t, res, tt.status, tt.code, fmt.Sprintf("%q", tt.path))
			if got := res.Header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

func TestPanicIsRecoveredAsJSON500(t *testing.T) {
	t.Parallel()
	log := &syncBuffer{}
	h := recoverPanics(slogTo(log), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("secret internal detail")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/pets", nil))
	res := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
	wantError(t, res, http.StatusInternalServerError, codeInternal)
	if strings.Contains(string(res.Body), "secret") {
		t.Errorf("500 body leaks the panic value: %s", res.Body)
	}
	if recs := log.find(t, "ERROR", "request failed"); len(recs) != 1 || !strings.Contains(recs[0].field("err"), "panic: secret internal detail") {
		t.Errorf("the panic was not logged as one error; log:\n%s", log)
	}
}

func TestDatabaseFailureIsAnOpaque500(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	ts.Store.Close() // every query now fails inside database/sql
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/v1/pets", ""},
		{"POST", "/v1/pets", `{"name":"Rex","categoryId":1}`},
		{"GET", "/v1/pets/1", ""},
	} {
		res := ts.do(t, req.method, req.path, req.body, nil)
		wantError(t, res, http.StatusInternalServerError, codeInternal)
		if body := strings.ToLower(string(res.Body)); strings.Contains(body, "sql") || strings.Contains(body, "closed") {
			t.Errorf("%s %s: 500 body leaks internals: %s", req.method, req.path, res.Body)
		}
	}
	for _, r := range ts.Log.find(t, "ERROR", "request failed") {
		if !strings.Contains(r.field("err"), "closed") {
			t.Errorf("a request failed for another cause than the closed store: %v", r)
		}
	}
	if n := len(ts.Log.find(t, "ERROR", "request failed")); n != 3 {
		t.Errorf("%d failures logged, want one per request (3); log:\n%s", n, ts.Log)
	}
}

func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	const n = 50
	var wg sync.WaitGroup
	results := make([]response, n)
	for i := range n {
		wg.Go(func() {
			results[i] = ts.do(t, "POST", "/v1/pets", fmt.Sprintf(`{"name":"pet-%d","categoryId":%d}`, i, i+1), nil)
		})
	}
	wg.Wait()
	var want []Pet
	ids := map[int64]bool{}
	for i, res := range results {
		if res.Status != http.StatusCreated {
			t.Fatalf("create %d: status %d, body %s", i, res.Status, res.Body)
		}
		p := decode[Pet](t, res)
		if ids[p.ID] {
			t.Errorf("id %d handed out twice", p.ID)
		}
		ids[p.ID] = true
		if diff := cmp.Diff(Pet{ID: p.ID, Name: fmt.Sprintf("pet-%d", i), CategoryID: int64(i + 1), Status: "available"}, p); diff != "" {
			t.Errorf("create %d mismatch (-want +got):\n%s", i, diff)
		}
		want = append(want, p)
	}
	slices.SortFunc(want, func(a, b Pet) int { return int(a.ID - b.ID) })
	got := decode[[]Pet](t, ts.do(t, "GET", "/v1/pets?limit=100", "", nil))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listing after %d concurrent creates mismatch (-want +got):\n%s", n, diff)
	}
}
