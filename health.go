package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// healthStatus is the body of a successful health or readiness check.
type healthStatus struct {
	Status string `json:"status"`
}

// handleHealthz answers GET /healthz: the process is alive and serving HTTP.
// It looks at nothing else, so a slow database never gets a healthy process
// restarted.
func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, healthStatus{Status: "ok"})
	})
}

// readyMaxAge is how old a readiness answer may be. /readyz needs no key, so
// anyone may call it in a loop: asking the database each time let one
// client halve the throughput of everyone else.
const readyMaxAge = time.Second

// handleReadyz answers GET /readyz: 200 when the database answered a query
// within readyTimeout, 503 otherwise, so a load balancer stops sending
// traffic to an instance that cannot serve it. The answer comes from a check
// at most readyMaxAge old by now; the checks run one at a time, and callers
// that arrive during one wait for its result rather than start another.
func handleReadyz(log *slog.Logger, st *store, now func() time.Time) http.Handler {
	var (
		mu      sync.Mutex
		checked time.Time // when the last check started; zero before the first
		err     error     // what it found
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if t := now(); checked.IsZero() || t.Sub(checked) >= readyMaxAge || t.Before(checked) {
			// The check is not bound to this request: its result serves
			// the others too, so this caller going away must not cut it.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), readyTimeout)
			checked, err = t, st.ping(ctx)
			cancel()
			if err != nil {
				log.WarnContext(r.Context(), "readiness check failed", "err", err)
			}
		}
		failed := err
		mu.Unlock()
		if failed != nil {
			writeError(w, r, log, errorf(codeUnavailable, "the database is not answering; the service cannot serve requests now"))
			return
		}
		writeJSON(w, http.StatusOK, healthStatus{Status: "ready"})
	})
}
