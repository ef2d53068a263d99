package main

import (
	"log/slog"
	"net/http"
)

// The bound of a request's header block (-max-header-bytes). net/http
// enforces its own before any handler runs, and answers past it in its own
// way: over HTTP/1.1 a plain-text 431; over HTTP/2, a 431 in HTML when the
// header list is too long, and, when one field alone (a path with a 70 KB
// query) is longer than the whole bound, a GOAWAY with COMPRESSION_ERROR,
// which ends the connection and every other request on it (its HPACK
// decoder refuses a string longer than the bound). So the API's server
// gives net/http twice the bound (readHeaderLimit), and the service
// answers what passes its own bound with 431 and the Error body, counted
// and logged as every answer, whichever protocol the request came by. Only
// past twice the bound does net/http answer, as above.

// readHeaderLimit is the API server's MaxHeaderBytes for a bound of
// maxHeaderBytes: twice it, so that what is refused in between is refused
// by limitHeaderBlock. A header block is held that long only while it is
// refused.
func readHeaderLimit(maxHeaderBytes int) int { return 2 * maxHeaderBytes }

// headerBlockSize is the size of r's request line and header fields as
// HTTP/1.1 writes them ("GET /path?query HTTP/1.1", "Name: value", each
// with its CRLF, Host included), whichever protocol r came by, so that
// -max-header-bytes means one thing over both.
func headerBlockSize(r *http.Request) int {
	n := len(r.Method) + len(" ") + len(r.RequestURI) + len(" HTTP/1.1\r\n") + len("Host: \r\n") + len(r.Host)
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// limitHeaderBlock answers 431 header_too_large, with the Error body, to a
// request whose header block (see headerBlockSize) is over maxHeaderBytes,
// before anything else looks at it; 0 means no bound of the service's own.
func limitHeaderBlock(log *slog.Logger, maxHeaderBytes int, next http.Handler) http.Handler {
	if maxHeaderBytes <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerBlockSize(r); n > maxHeaderBytes {
			writeError(w, r, log, errorf(codeHeaderTooLarge, "the request's header block is %d bytes (its request line, the path and query included, and its header fields), over the %d this service takes; send a shorter query or fewer or shorter header fields", n, maxHeaderBytes))
			return
		}
		next.ServeHTTP(w, r)
	})
}
