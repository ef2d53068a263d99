package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAbbreviateEchoesCutsWhatAClientSent: in a library's message, every
// quoted part and every long word is cut to 32 bytes (and "..."), between
// characters, and the whole to 200 bytes; the library's own words, and a
// message with no echo, are left as they are.
func TestAbbreviateEchoesCutsWhatAClientSent(t *testing.T) {
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
