package main

import (
	"log/slog"
	"net/http"
	"path"
	"strings"
)

// Routing: the mux serves each request once; what it would answer in plain
// text (no route, a wrong method, a path not in canonical form) is answered
// in JSON instead, after auth.

// routeErrors serves r through mux, answering in JSON where the mux itself
// would answer in plain text: an unknown path (404), a known path with the
// wrong method (405, keeping the mux's Allow header) and a path that is not
// in canonical form, which the mux would redirect (a redirect would turn a
// POST into a GET in most clients, so it is a 404 here instead). Those
// answers, too, go through auth: a caller without a key learns nothing about
// which paths exist.
func routeErrors(log *slog.Logger, mux *http.ServeMux, auth func(http.Handler) http.Handler) http.Handler {
	unrouted := auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		shown := abbreviate(r.URL.EscapedPath()) // as sent: /a%2Fb is not /a/b
		if r.RequestURI == "*" {
			// The asterisk form asks about the server as a whole (OPTIONS
			// *), which net/http would answer itself, 200 with no body,
			// unless the server disables its general OPTIONS handler,
			// as the service's do.
			writeError(w, r, log, errorf(codeNotFound, "no resource at *: the service answers requests for paths, under /v1 (GET /v1/openapi.json lists every path and the methods each takes), never for the server as a whole"))
			return
		}
		if p == "" || p[0] != '/' || path.Clean(p) != p {
			writeError(w, r, log, errorf(codeNotFound, "no resource at path %q; paths have no empty, '.' or '..' segments and no trailing slash", shown))
			return
		}
		// Let the mux's own handler decide between 404 and 405 (and set
		// Allow), then replace its plain-text body with ours.
		h, _ := mux.Handler(r)
		rec := &statusRecorder{header: w.Header()}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			writeError(w, r, log, errorf(codeMethodNotAllowed, "method %s is not allowed on %q; allowed: %s", abbreviate(r.Method), shown, w.Header().Get("Allow")))
			return
		}
		if p == "/v1" || strings.HasPrefix(p, "/v1/") {
			writeError(w, r, log, errorf(codeNotFound, "no resource at path %q; GET /v1/openapi.json lists every path of the API", shown))
			return
		}
		writeError(w, r, log, errorf(codeNotFound, "no resource at path %q; the API lives under /v1, for example /v1/pets (GET /v1/openapi.json lists every path)", shown))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != "" && p[0] == '/' && path.Clean(p) == p {
			// The mux routes the request once (asking it first with
			// mux.Handler, then serving, looked the route up twice: 9% of
			// a cached getPet's CPU). It sets r.Pattern before it calls
			// what it found; "" means its own plain-text answer, which
			// routedOnly throws away for unrouted to answer instead.
			if info := requestInfoFrom(r.Context()); info != nil {
				defer func() { info.route = r.Pattern }() // a panic too is counted under its route
			}
			mux.ServeHTTP(&routedOnly{ResponseWriter: w, r: r}, r)
			if r.Pattern != "" {
				return
			}
		}
		unrouted.ServeHTTP(w, r)
	})
}

// routedOnly passes to the real writer the answer of a handler that the mux
// routed r to, and throws away the answer the mux itself gives when it found
// none (r.Pattern is "" then), headers included.
type routedOnly struct {
	http.ResponseWriter
	r       *http.Request
	discard http.Header
}

func (w *routedOnly) Header() http.Header {
	if w.r.Pattern != "" {
		return w.ResponseWriter.Header()
	}
	if w.discard == nil {
		w.discard = http.Header{}
	}
	return w.discard
}

func (w *routedOnly) Write(b []byte) (int, error) {
	if w.r.Pattern != "" {
		return w.ResponseWriter.Write(b)
	}
	return len(b), nil
}

func (w *routedOnly) WriteHeader(status int) {
	if w.r.Pattern != "" {
		w.ResponseWriter.WriteHeader(status)
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *routedOnly) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusRecorder records the status a handler writes and throws its body
// away. Its header map is the real response's, so headers such as Allow
// survive.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header { return s.header }

func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }

func (s *statusRecorder) WriteHeader(status int) { s.status = status }
