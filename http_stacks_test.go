package main

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestKeepStacksServesHTTP2OnAPooledGoroutine: an HTTP/2 request is served
// on a goroutine of the pool, with its request and its writer; an HTTP/1.1
// request where it comes; a handler's panic is raised again on the
// caller's goroutine, as net/http expects of http.ErrAbortHandler, and the
// pool serves on. (What the pool saves is BenchmarkChainOnAFreshGoroutine's.)
func TestKeepStacksServesHTTP2OnAPooledGoroutine(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var served []string
	h := keepStacks(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, path := range []string{"/one", "/two"} {
		req := httptest.NewRequest("GET", path, nil)
		req.ProtoMajor = 2
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusTeapot {
			t.Errorf("%s over HTTP/2: status %d, want the handler's 418", path, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/three", nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("over HTTP/1.1: status %d, want 418", rec.Code)
	}
	if want := []string{"/one", "/two", "/three"}; len(served) != 3 || served[0] != want[0] || served[2] != want[2] {
		t.Errorf("served %v, want %v", served, want)
	}
	abort := httptest.NewRequest("GET", "/abort", nil)
	abort.ProtoMajor = 2
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("the handler's panic reached the caller as %v, want http.ErrAbortHandler", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), abort)
	}()
	// The goroutine that panicked goes on serving.
	req := httptest.NewRequest("GET", "/after", nil)
	req.ProtoMajor = 2
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTeapot {
		t.Errorf("after a panic: status %d, want 418", rec.Code)
	}
}
