package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// readyTimeout is how long the database may take to answer a readiness
// check before the service reports itself not ready.
const readyTimeout = 2 * time.Second

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

// handleReadyz answers GET /readyz: 200 when the database answers a query
// within readyTimeout, 503 otherwise, so a load balancer stops sending
// traffic to an instance that cannot serve it.
func handleReadyz(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := st.ping(ctx); err != nil {
			log.WarnContext(r.Context(), "readiness check failed", "err", err)
			writeError(w, r, log, errorf(codeUnavailable, "the database is not answering; the service cannot serve requests now"))
			return
		}
		writeJSON(w, http.StatusOK, healthStatus{Status: "ready"})
	})
}
