package main

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

// TestAbbreviateEchoesCutsWhatAClientSent: in a library's message, every
// quoted part and every long word is cut to 32 bytes (and "..."), between
// characters, and the whole to 200 bytes; the library's own words, and a
// message with no echo, are left as they are.
func TestAbbreviateEchoesCutsWhatAClientSent(t *testing.T) {
	t.Parallel()
	a40, a32 := strings.Repeat("a", 40), strings.Repeat("a", 32)
	for _, tt := range []struct {
		rule, in, want string
	}{
		{"a message without echoes is kept", "tls: client offered only unsupported versions: [301]", "tls: client offered only unsupported versions: [301]"},
		{"a quoted name", "no certificate available for '" + a40 + "'", "no certificate available for '" + a32 + "...'"},
		{"a double-quoted list", `unsupported application protocols (["` + a40 + `"])`, `unsupported application protocols (["` + a32 + `..."])`},
		{"a quote never closed", "bogus greeting '" + a40 + " and more", "bogus greeting '" + a32 + "..."},
		{"a long word", "identifier: " + a40, "identifier: " + a32 + "..."},
		{"a quoted part with spaces is one echo", "name '" + strings.Repeat("a ", 30) + "' refused", "name '" + strings.Repeat("a ", 16) + "...' refused"},
		{"an accent across the cut", "'" + "x" + strings.Repeat("é", 40) + "'", "'x" + strings.Repeat("é", 15) + "...'"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			if got := abbreviateEchoes(tt.in); got != tt.want {
				t.Errorf("abbreviateEchoes(%.60q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	t.Run("many short words are cut to 200 bytes in all", func(t *testing.T) {
		got := abbreviateEchoes(strings.Repeat("é ", 50_000))
		if len(got) > maxEchoingLine+len("...") || !utf8.ValidString(got) {
			t.Errorf("%d bytes (valid UTF-8: %v): %.300q", len(got), utf8.ValidString(got), got)
		}
	})
}

// TestCertMagicsLinesOfClientsAreHeldToTheRule: a line of CertMagic that
// names a client (its HTTP-01 handler's, which quotes the request's path,
// Host and User-Agent) is counted when a failure, sampled, and has what the
// client sent cut to 32 bytes, its address kept whole; a line that names no
// client (an order's) passes as it is.
func TestCertMagicsLinesOfClientsAreHeldToTheRule(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	counts := map[string]int{}
	failures := &connFailures{log: slogTo(&buf), lines: newSampledLines(), count: func(kind string) { counts[kind]++ }}
	zl := zap.New(&zapToSlog{h: slogTo(&buf).Handler(), failures: failures})
	long := strings.Repeat("h", 10_000)
	const address, n = "[2001:db8::1234:5678:9abc:def0]:65535", 300
	start := time.Now()
	for range n {
		zl.Warn("looking up info for HTTP challenge", zap.String("uri", "/.well-known/acme-challenge/"+long), zap.String("identifier", long),
			zap.String("host", long), zap.String("remote_addr", address), zap.String("user_agent", long),
			zap.Error(errors.New("opening distributed challenge token file acme/"+long+": permission denied")))
	}
	zl.Info("obtaining certificate", zap.String("identifier", "shop.example.com"), zap.String("issuer", "acme-v02.api.letsencrypt.org-directory"))
	if counts[connErrorACME] != n {
		t.Errorf("%d failures counted, want %d", counts[connErrorACME], n)
	}
	lines := buf.find(t, "WARN", "looking up info for HTTP challenge")
	if most := authFailureLogBurst + int(time.Since(start).Seconds()*authFailureLogRate) + 1; len(lines) == 0 || len(lines) > most {
		t.Errorf("%d failures were logged in %d lines, want 1 to %d", n, len(lines), most)
	}
	if len(lines) > 0 && lines[0].field("remote_addr") != address {
		t.Errorf("the client's address is %q, want it whole: %s", lines[0].field("remote_addr"), address)
	}
	for line := range strings.Lines(buf.String()) {
		if strings.Contains(line, long[:33]) {
			t.Errorf("a line holds what the client sent: %.300s", line)
		}
	}
	if order := buf.find(t, "INFO", "obtaining certificate"); len(order) != 1 || order[0].field("issuer") != "acme-v02.api.letsencrypt.org-directory" {
		t.Errorf("a line that names no client was changed or left out: %v", order)
	}
}
