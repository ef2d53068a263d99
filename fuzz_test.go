package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// The fuzz targets drive the real handler (newServer over a real SQLite
// file) with arbitrary input in one part of a request. Whatever the input,
// the answer is never a 5xx nor a panic, and every 4xx is the standard error
// body. Their seed corpus runs as ordinary tests; see docs/development.md for fuzzing.

// serveDirect sends req to the handler of ts and returns the answer.
func serveDirect(ts *testServer, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	ts.Handler.ServeHTTP(rec, req)
	return rec
}

// checkAnswer fails the test on a 5xx, and on a 4xx whose body is not the
// standard {code, message, status} with a code that travels with its status.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: status %d, body %s", what, rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: %d with Content-Type %q", what, rec.Code, ct)
	}
	var e apiError
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("%s: %d body %q is not the error body: %v", what, rec.Code, rec.Body, err)
	}
	if e.Status != rec.Code || statusOf(e.Code) != rec.Code || e.Message == "" {
		t.Fatalf("%s: HTTP %d with error body %+v", what, rec.Code, e)
	}
}

// authorized returns a request with the test key.
func authorized(method, target string, body []byte) *http.Request {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	return req
}

func FuzzCreatePet(f *testing.F) {
	for _, seed := range []struct{ body, key string }{
		{`{"name":"Rex","categoryId":1}`, ""},
		{`{"name":"Rex","categoryId":1,"status":"sold"}`, "key-1"},
		{`{"name":"Rex","categoryId":9223372036854775807}`, `"quoted"`},
		{`{"name":"Rex","categoryId":9223372036854775808}`, ""},
		{`{"name":"Rex","categoryId":1.0}`, ""},
		{`{"name":"Rex","categoryId":"1"}`, ""},
		{`{"name":"","categoryId":1}`, ""},
		{`{"name":"\ud800","categoryId":1}`, ""},
		{"{\"name\":\"Re\x00x\",\"categoryId\":1}", "\x00"},
		{"{\"name\":\"Re\xffx\",\"categoryId\":1}", "\xff"},
		{`{"name":"Rex","categoryId":1,"id":3}`, ""},
		{`{"name":"Rex","name":"Max","categoryId":1}`, ""},
		{`[{"name":"Rex","categoryId":1}]`, ""},
		{`{"name":"Rex","categoryId":1} {}`, ""},
		{`{"name":[[[[[[[[[[]]]]]]]]]],"categoryId":1}`, ""},
		{`null`, ""},
		{``, ""},
		{`{`, `"`},
	} {
		f.Add(seed.body, seed.key)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, body, key string) {
		req := authorized("POST", "/v1/pets", []byte(body))
		if key != "" {
			req.Header.Set(idempotencyHeader, key)
		}
		rec := serveDirect(ts, req)
		checkAnswer(t, "POST /v1/pets", rec)
		if rec.Code == http.StatusCreated {
			var p Pet
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.ID < 1 || rec.Header().Get("Location") != "/v1/pets/"+strconv.FormatInt(p.ID, 10) {
				t.Fatalf("201 with body %s and Location %q", rec.Body, rec.Header().Get("Location"))
			}
		}
	})
}

func FuzzListPetsQuery(f *testing.F) {
	for _, seed := range []string{
		"", "limit=1", "limit=100", "limit=101", "limit=0", "limit=-1", "limit=1e2", "limit=%31",
		"status=sold", "status=SOLD", "status=", "after=0", "after=9223372036854775807", "after=9223372036854775808",
		"limit=5&status=pending&after=3", "limit=1&limit=2", "limt=5", "%", "a=%zz", "status=%00", "status=%ff",
		";", "&&&", "limit=" + strings.Repeat("9", 1000),
	} {
		f.Add(seed)
	}
	ts := newTestServer(f)
	for i := range 3 { // so that pages and filters have pets to return
		if _, err := ts.Store.createPet(f.Context(), newPet{Name: "seed-" + strconv.Itoa(i), CategoryID: 1, Status: "sold"}); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		req := authorized("GET", "/v1/pets", nil)
		req.URL.RawQuery = rawQuery
		rec := serveDirect(ts, req)
		checkAnswer(t, "GET /v1/pets?"+rawQuery, rec)
		if rec.Code == http.StatusOK {
			var pets []Pet
			if err := json.Unmarshal(rec.Body.Bytes(), &pets); err != nil || pets == nil {
				t.Fatalf("200 with body %s is not a JSON array of pets", rec.Body)
			}
		}
	})
}

func FuzzGetPetID(f *testing.F) {
	for _, seed := range []string{
		"1", "2", "0", "-1", "01", "1.0", "1e3", "9223372036854775807", "9223372036854775808", "abc", "",
		"%00", "%ff", "1%2F2", "1/2", "..", ".", "1/", "ü", " 1", "+1", "0x10",
	} {
		f.Add(seed)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, id string) {
		req := authorized("GET", "/v1/pets", nil)
		req.URL = &url.URL{Path: "/v1/pets/" + id}
		rec := serveDirect(ts, req)
		checkAnswer(t, "GET /v1/pets/"+id, rec)
	})
}

func FuzzAuthorization(f *testing.F) {
	for _, seed := range []string{
		"Bearer " + testKey, "bearer " + testKey, "Bearer  " + testKey, "Bearer", "Bearer ", "", "Basic dXNlcjpwYXNz",
		testKey, "Bearer " + testKey + "\x00", "Bearer \xff", strings.Repeat("B", 10<<10), "Bearer " + strings.Repeat("k", 10<<10),
	} {
		f.Add(seed)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, authorization string) {
		req := httptest.NewRequest("GET", "/v1/pets", nil)
		req.Header.Set("Authorization", authorization)
		rec := serveDirect(ts, req)
		checkAnswer(t, "Authorization "+strconv.Quote(authorization), rec)
		if rec.Code != http.StatusOK && rec.Code != http.StatusUnauthorized {
			t.Fatalf("status %d, want 200 or 401", rec.Code)
		}
		if rec.Code == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), `Bearer realm="petstore"`) {
			t.Fatalf("401 with WWW-Authenticate %q", rec.Header().Get("WWW-Authenticate"))
		}
	})
}

// FuzzObjectMembers holds objectMembers, decodeObject's walk of a body
// already known to be valid UTF-8 and valid JSON, to what json.Decoder's Token walk yields
// for the same object: the same keys, decoded the same way, and the same
// bytes for each value, in the same order.
// FuzzSplitQuery holds splitQuery, which reads every query of the API, to
// net/url's ParseQuery, whose reading it keeps without its map: the same
// queries refused, and the same values for each name, in order.
func FuzzSplitQuery(f *testing.F) {
	for _, seed := range []string{
		"", "limit=5", "limit=5&status=sold", "a=1&a=2&b", "&&a=&=1&", "a=%zz", "%", "a;b=1", "a=1;", "a+b=c%20d",
		"%ff=%fe", "==", "a=b=c", strings.Repeat("x=1&", 20),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		want, err := url.ParseQuery(raw)
		params, ok := splitQuery(raw, nil)
		if ok != (err == nil) {
			t.Fatalf("splitQuery(%q) ok = %v; url.ParseQuery's error: %v", raw, ok, err)
		}
		if !ok {
			return
		}
		got := url.Values{}
		for _, p := range params {
			got[p.name] = append(got[p.name], p.value)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("splitQuery(%q) mismatch (-want +got):\n%s", raw, diff)
		}
	})
}

func FuzzObjectMembers(f *testing.F) {
	for _, seed := range []string{
		`{}`, ` { } `, `{"name":"Rex","categoryId":1}`, "{\n\t\"name\" : \"R\\\"ex\\\\\" ,\r\"categoryId\":12 }\n",
		`{"a":{"b":[1,{"c":"}]"}],"d":null},"e":[],"f":-1.5e3,"g":true,"h":false}`,
		`{"n\u0061me":"x","\ud800":"y","":0}`, `{"a":"\\","b":"\"}"}`, `{"a":1,"a":2}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		b := []byte(body)
		if !utf8.Valid(b) || !json.Valid(b) || b[skipJSONSpace(b, 0)] != '{' {
			return // decodeObject refuses such bodies before its walk
		}
		type member struct{ Key, Raw string }
		var want []member
		dec := json.NewDecoder(bytes.NewReader(b))
		if _, err := dec.Token(); err != nil {
			t.Fatal(err)
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				t.Fatal(err)
			}
			want = append(want, member{tok.(string), string(raw)})
		}
		var got []member
		for key, raw := range objectMembers(b) {
			got = append(got, member{key, string(raw)})
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("objectMembers(%q) mismatch (-want +got):\n%s", body, diff)
		}
	})
}
