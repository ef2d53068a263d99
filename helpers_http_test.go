package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Test helpers: one way to send a request, read its answer, check an error
// body and walk every page of a list. They report a failure with t.Errorf
// and return a zero value, never t.Fatal, so that they are safe in the
// goroutines of concurrent tests.

// response is what a test keeps of an HTTP answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request with the test key and, when body is not empty, a JSON
// Content-Type. hdr adds or replaces headers; an empty value removes one.
func (ts *testServer) do(t testing.TB, method, path, body string, hdr map[string]string) response {
	t.Helper()
	return doRequest(t, ts.URL, method, path, body, hdr)
}

// doRequest is do for any base URL (run's or the real binary's). A request
// that gets no answer fails the test and returns a zero response.
func doRequest(t testing.TB, base, method, path, body string, hdr map[string]string) response {
	t.Helper()
	res, err := http.DefaultClient.Do(newRequest(t, base, method, path, body, hdr))
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	if testTLS && strings.HasPrefix(base, "https://") && res.ProtoMajor != 2 {
		t.Errorf("%s %s went over %s, not HTTP/2, in the run over HTTPS", method, path, res.Proto)
	}
	return readResponse(t, res)
}

// newRequest builds the request do sends: the test key and, when body is not
// empty, a JSON Content-Type; hdr adds or replaces headers, and an empty
// value removes one.
func newRequest(t testing.TB, base, method, path, body string, hdr map[string]string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
	if err != nil {
		// A path the test wrote wrong: a mistake of the set-up.
		t.Fatalf("NewRequest(%s %s): %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return req
}

// readResponse reads and closes res.
func readResponse(t testing.TB, res *http.Response) response {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", res.Request.Method, res.Request.URL.Path, err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// createPet adds a pet through the API and returns it; anything but a 201
// fails the test.
func (ts *testServer) createPet(t testing.TB, name string, categoryID int64, status string) Pet {
	t.Helper()
	body := map[string]any{"name": name, "categoryId": categoryID}
	if status != "" {
		body["status"] = status
	}
	b, _ := json.Marshal(body)
	res := ts.do(t, "POST", "/v1/pets", string(b), nil)
	if res.Status != http.StatusCreated {
		t.Errorf("POST /v1/pets %s: status %d, body %s", b, res.Status, res.Body)
		return Pet{}
	}
	return decode[Pet](t, res)
}

// decode parses a JSON response body into a T, refusing unknown fields.
func decode[T any](t testing.TB, res response) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(res.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Errorf("decode %T from %q: %v", v, res.Body, err)
	}
	return v
}

// wantError checks that res is the standard JSON error with the given status
// and code, and that its message mentions every one of mention.
func wantError(t testing.TB, res response, status int, code string, mention ...string) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json (body %s)", ct, res.Body)
	}
	got := decode[apiError](t, res)
	want := apiError{Code: code, Status: status, Message: got.Message}
	if diff := cmp.Diff(want, got); diff != "" || res.Status != status {
		t.Errorf("HTTP status %d, error body mismatch (-want +got):\n%s", res.Status, diff)
	}
	if got.Message == "" {
		t.Errorf("error message is empty")
	}
	for _, m := range mention {
		if !strings.Contains(got.Message, m) {
			t.Errorf("error message %q does not mention %q", got.Message, m)
		}
	}
}

// listAll walks a list from path to its last page, following each answer's
// Link header as a client does, and returns every item in order. hdr is as
// for doRequest; between, when not nil, runs after each page (a test changes
// the data between pages with it).
func listAll[T any](t testing.TB, base, path string, hdr map[string]string, between func()) []T {
	t.Helper()
	all := []T{}
	for pages := 0; path != ""; pages++ {
		if pages > 10_000 {
			t.Errorf("more than 10,000 pages: the Link chain does not end")
			return all
		}
		res := doRequest(t, base, "GET", path, "", hdr)
		if res.Status != http.StatusOK {
			t.Errorf("GET %s: status %d, body %s", path, res.Status, res.Body)
			return all
		}
		all = append(all, decode[[]T](t, res)...)
		path = ""
		if link := res.Header.Get("Link"); link != "" {
			target, ok := strings.CutPrefix(link, "<")
			target, rest, _ := strings.Cut(target, ">")
			if !ok || rest != `; rel="next"` {
				t.Errorf("Link %q is not <URL>; rel=\"next\"", link)
				return all
			}
			path = target
		}
		if between != nil {
			between()
		}
	}
	return all
}
