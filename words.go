package main

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Words: how messages name things ("a string", "3 orders", "a, b and c").
// Every layer's messages use them.

// plural says n things: "1 order", "3 orders".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
}

// joinWords joins words as a sentence does, with conjunction: "a",
// "a and b", "a, b and c".
func joinWords(words []string, conjunction string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conjunction + " " + words[len(words)-1]
}

// withArticle is a JSON kind as a message says it: "a string", "null".
func withArticle(kind string) string {
	if kind == "null" {
		return kind
	}
	return article(kind)
}

// article puts "a" or "an" before a noun of the API's own ("an order", "a
// PetPatch"), by its first letter: none of them starts with a silent
// consonant or a "you" sound.
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiouAEIOU", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

// abbreviate shortens what a client sent to a length fit for an error message
// or a log line: at most 32 bytes, cut between characters, then "...". Every
// echo of client input goes through it, so an answer never grows with what
// the client sent.
func abbreviate(s string) string {
	const max = 32
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// maxEchoingLine bounds a message that may echo what a client sent, once its
// echoes are cut (see abbreviateEchoes).
const maxEchoingLine = 200

// abbreviateEchoes shortens a message written by a library, which may echo
// what a client sent somewhere in its text (a TLS server name, a frame's
// bytes) without saying where: every quoted part ('...' or "...", to the
// end when unclosed) and every other word longer than 32 bytes is cut by
// abbreviate, and the whole to maxEchoingLine bytes. Words of the library's
// own are short; a client's string is cut however it is placed.
func abbreviateEchoes(s string) string {
	var b strings.Builder
	for len(s) > 0 && b.Len() <= maxEchoingLine {
		i := strings.IndexAny(s, `'"`)
		if i < 0 {
			i = len(s)
		}
		for words, first := s[:i], true; ; first = false {
			word, more, found := strings.Cut(words, " ")
			if !first {
				b.WriteByte(' ')
			}
			b.WriteString(abbreviate(word))
			if !found || b.Len() > maxEchoingLine {
				break
			}
			words = more
		}
		if i == len(s) {
			break
		}
		quote := s[i]
		inner, rest, closed := strings.Cut(s[i+1:], string(quote))
		b.WriteByte(quote)
		b.WriteString(abbreviate(inner))
		if closed {
			b.WriteByte(quote)
		}
		s = rest
	}
	out := b.String()
	if len(out) <= maxEchoingLine {
		return out
	}
	cut := maxEchoingLine
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + "..."
}
