package main

import (
	"strconv"
	"unicode/utf8"
)

// The pets in answers are encoded by appending bytes, not through
// encoding/json: a page of 20 pets through reflection costs several times
// more than the bytes themselves (see BenchmarkEncodePage). The output is
// byte for byte what json.Encoder with SetEscapeHTML(false) writes, minus
// the trailing newline; TestAppendPetMatchesEncodingJSON and
// FuzzAppendJSONString hold the two together.

// petBody is the response body of one pet: its JSON and a newline, as
// json.Encoder writes it.
func petBody(p Pet) []byte {
	return append(appendPet(make([]byte, 0, 128), p), '\n')
}

// petsBody is the response body of a list of pets.
func petsBody(pets []Pet) []byte {
	return append(appendPets(make([]byte, 0, 64*len(pets)+3), pets), '\n')
}

// appendPet appends p as a JSON object.
func appendPet(dst []byte, p Pet) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, p.ID, 10)
	dst = append(dst, `,"name":`...)
	dst = appendJSONString(dst, p.Name)
	dst = append(dst, `,"categoryId":`...)
	dst = strconv.AppendInt(dst, p.CategoryID, 10)
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, p.Status)
	return append(dst, '}')
}

// appendPets appends pets as a JSON array; no pets is [], never null.
func appendPets(dst []byte, pets []Pet) []byte {
	dst = append(dst, '[')
	for i, p := range pets {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendPet(dst, p)
	}
	return append(dst, ']')
}

// hexDigits are the digits of \u00XX escapes, lowercase as encoding/json
// writes them.
const hexDigits = "0123456789abcdef"

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

// timeLayout writes the API's timestamps: RFC 3339 in UTC, with
// milliseconds, always the same length.
const timeLayout = "2006-01-02T15:04:05.000Z"

// orderBody is the response body of one order.
func orderBody(o Order) []byte {
	return append(appendOrder(make([]byte, 0, 128), o), '\n')
}

// ordersBody is the response body of a list of orders.
func ordersBody(orders []Order) []byte {
	dst := append(make([]byte, 0, 120*len(orders)+3), '[')
	for i, o := range orders {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendOrder(dst, o)
	}
	return append(dst, ']', '\n')
}

// appendOrder appends o as a JSON object. Its strings are a status and
// timestamps, which need no escaping.
func appendOrder(dst []byte, o Order) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, o.ID, 10)
	dst = append(dst, `,"petId":`...)
	dst = strconv.AppendInt(dst, o.PetID, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, o.Status...)
	dst = append(dst, `","placedAt":"`...)
	dst = o.PlacedAt.UTC().AppendFormat(dst, timeLayout)
	dst = append(dst, `","updatedAt":"`...)
	dst = o.UpdatedAt.UTC().AppendFormat(dst, timeLayout)
	return append(dst, `"}`...)
}
