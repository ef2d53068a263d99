package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
)

// A panic in a handler: logged with its stack, answered with the standard
// 500 body.

// recoverPanics turns a panic in a handler into a logged 500 with the standard
// error body, instead of a dropped connection.
func recoverPanics(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v) // the handler asked net/http to abort the response on purpose
			}
			writeError(w, r, log, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
		}()
		next.ServeHTTP(w, r)
	})
}
