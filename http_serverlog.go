package main

import (
	"log"
	"log/slog"
	"strings"
)

// Failures below the handlers: what net/http's servers log through their
// ErrorLog (a failed TLS handshake, an HTTP/2 connection error), and what
// CertMagic logs of a client (a TLS-ALPN or HTTP-01 challenge it could not
// answer). A client causes them at will, as fast as it can open
// connections (54,290 lines, 8 MB, in 10 s of TLS 1.0 hellos), and they
// quote what it sent (a server name of 50,000 characters made lines of
// 100 KB). So they are held to the rule of failed authentication: counted,
// all of them, in petstore_connection_errors_total; logged as a sample
// (see sampledLines), each line saying how many were left out before it;
// and every string a client supplied in them cut to 32 bytes (see
// abbreviate and abbreviateEchoes).

// The kinds of petstore_connection_errors_total.
const (
	connErrorTLSHandshake = "tls_handshake" // net/http: a TLS handshake failed
	connErrorHTTP2        = "http2"         // net/http: an HTTP/2 connection error
	connErrorHTTP         = "http"          // net/http: any other line of its ErrorLog
	connErrorACME         = "acme"          // CertMagic: a failure that names a client
	connErrorPanic        = "panic"         // net/http: a handler panicked past recoverPanics
)

// tlsHandshakeError starts net/http's line for a failed handshake, which
// goes on with the client's address and the reason.
const tlsHandshakeError = "http: TLS handshake error from "

// connFailures logs and counts the failures below the handlers, for every
// server of the service and CertMagic alike, within one sample.
type connFailures struct {
	log   *slog.Logger
	lines *sampledLines
	count func(kind string)
}

// newConnFailures logs to log and counts in m.
func newConnFailures(log *slog.Logger, m *metrics) *connFailures {
	return &connFailures{log: log, lines: newSampledLines(), count: m.countConnectionErrors()}
}

// errorLog is an http.Server's ErrorLog: each line it is given goes to
// serverError.
func (f *connFailures) errorLog() *log.Logger { return log.New(serverErrorWriter{f}, "", 0) }

// serverErrorWriter passes each line of an http.Server's ErrorLog (one
// Write each) to serverError.
type serverErrorWriter struct{ f *connFailures }

func (w serverErrorWriter) Write(p []byte) (int, error) {
	w.f.serverError(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// serverError counts one line of net/http's ErrorLog by its kind and logs
// it at WARN when the sample lets it, its echoes cut: a failed handshake as
// its client's address and reason, any other line as it is. A panic past
// recoverPanics is a defect of the service, not a client's doing: it is
// logged whole, at ERROR, every time.
func (f *connFailures) serverError(msg string) {
	if strings.HasPrefix(msg, "http: panic serving ") || strings.HasPrefix(msg, "http2: panic serving ") {
		f.count(connErrorPanic)
		f.log.Error("panic serving a request", "err", msg)
		return
	}
	kind := connErrorHTTP
	if strings.HasPrefix(msg, "http2: ") {
		kind = connErrorHTTP2
	}
	client, reason, handshake := strings.Cut(strings.TrimPrefix(msg, tlsHandshakeError), ": ")
	handshake = handshake && strings.HasPrefix(msg, tlsHandshakeError)
	if handshake {
		kind = connErrorTLSHandshake
	}
	f.count(kind)
	ok, unlogged := f.lines.take()
	switch {
	case !ok:
	case handshake:
		f.log.Warn("TLS handshake failed", "client", client, "err", abbreviateEchoes(reason), "unlogged_connection_errors", unlogged)
	default:
		f.log.Warn("HTTP server error", "kind", kind, "err", abbreviateEchoes(msg), "unlogged_connection_errors", unlogged)
	}
}

// clientFields are the fields by which CertMagic's lines name a client,
// each true when it quotes what the client sent (a server name, a Host
// header), false when it is the connection's address: a line that has one
// is a client's doing.
var clientFields = map[string]bool{
	"remote": false, "remote_addr": false, "remote_ip": false, "remote_port": false,
	"server_name": true, "sni": true, "user_agent": true, "uri": true, "host": true,
}

// clientLine holds a line of CertMagic to the rule when it names a client
// (see clientFields): it is counted when it is a failure (WARN or above),
// left out when the sample says so (ok is false), and otherwise has every
// string but the client's address cut, what the client sent to 32 bytes
// and any other (an error, which may quote the server name) by
// abbreviateEchoes, and says how many lines were left out before it. A
// line that names no client (an order, a renewal) passes as it is.
func (f *connFailures) clientLine(level slog.Level, attrs []slog.Attr) (_ []slog.Attr, ok bool) {
	client := false
	for _, a := range attrs {
		_, named := clientFields[a.Key]
		client = client || named
	}
	if !client {
		return attrs, true
	}
	if level >= slog.LevelWarn {
		f.count(connErrorACME)
	}
	ok, unlogged := f.lines.take()
	if !ok {
		return nil, false
	}
	cut := make([]slog.Attr, 0, len(attrs)+1)
	for _, a := range attrs {
		quotes, named := clientFields[a.Key]
		if s, isString := a.Value.Any().(string); isString && (quotes || !named) {
			if quotes {
				s = abbreviate(s)
			} else {
				s = abbreviateEchoes(s)
			}
			a.Value = slog.StringValue(s)
		}
		cut = append(cut, a)
	}
	return append(cut, slog.Int64("unlogged_connection_errors", unlogged)), true
}
