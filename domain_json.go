package main

import "unicode/utf8"

// The domain's small shared pieces, JSON: the wire form of strings and
// instants that every encoder of the service uses (the domain types', the
// store's event rows, the answers).

// appendJSONString appends s as a JSON string, escaped exactly as
// encoding/json escapes it with HTML escaping off: '"' and '\\' and the
// control characters below U+0020 (\b \f \n \r \t by name, the others as
// \u00XX), each byte of invalid UTF-8 as \ufffd, and U+2028 and U+2029,
// which JavaScript does not accept raw in a string.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// hexDigits are the digits of \u00XX escapes, lowercase as encoding/json
// writes them.
const hexDigits = "0123456789abcdef"

// timeLayout writes the API's timestamps: RFC 3339 in UTC, with
// milliseconds, always the same length.
const timeLayout = "2006-01-02T15:04:05.000Z"
