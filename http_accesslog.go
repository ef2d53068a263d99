package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// The access line is the one line the service writes for every request, so
// in the text format (the default) it is formatted here rather than by
// slog's TextHandler, which built it attribute by attribute through its
// generic machinery: 23% of a cached getPet's CPU. The line is byte for byte
// what the TextHandler writes for the same record (TestAccessLineIsSlogs
// holds the two to each other over many inputs), written with one Write,
// as the TextHandler does (into the log's buffer: see bufferLines). The JSON
// format keeps slog's handler.

// logHandler is the handler of the service's logger: slog's, with what the
// access line needs to bypass it.
type logHandler struct {
	slog.Handler
	w    io.Writer
	text bool
}

// accessLine is one request's access line, the attributes observe logs.
type accessLine struct {
	at                   time.Time
	level                slog.Level
	method, path         string
	status               int
	bytes                int64
	duration             time.Duration
	requestID, caller    string
	forbidden            bool   // adds outcome=forbidden
	authFailed           bool   // adds client and unlogged_auth_failures
	client               string // for a failed authentication
	unloggedAuthFailures int64
}

// attrs are the line's attributes, for slog's handlers.
func (l *accessLine) attrs(dst []slog.Attr) []slog.Attr {
	dst = append(dst,
		slog.String("method", l.method),
		slog.String("path", l.path),
		slog.Int("status", l.status),
		slog.Int64("bytes", l.bytes),
		slog.Duration("duration", l.duration),
		slog.String("request_id", l.requestID),
		slog.String("caller", l.caller),
	)
	if l.forbidden {
		dst = append(dst, slog.String("outcome", "forbidden"))
	}
	if l.authFailed {
		dst = append(dst, slog.String("client", l.client), slog.Int64("unlogged_auth_failures", l.unloggedAuthFailures))
	}
	return dst
}

// lineBuffers holds the buffers the text lines are formatted in.
var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// logAccess writes l through h: formatted here in the text format, by h
// itself in any other.
func logAccess(ctx context.Context, h slog.Handler, l *accessLine) {
	lh, ok := h.(*logHandler)
	if !ok || !lh.text {
		// The record is handed to the handler directly, as log.LogAttrs
		// would, but without the caller's program counter, which LogAttrs
		// finds by walking the stack at every line and which the service's
		// handlers never print (no AddSource).
		rec := slog.NewRecord(l.at, l.level, "request", 0)
		var attrs [9]slog.Attr
		rec.AddAttrs(l.attrs(attrs[:0])...)
		h.Handle(ctx, rec) // LogAttrs, too, ignores the handler's error
		return
	}
	bp := lineBuffers.Get().(*[]byte)
	b := appendAccessText((*bp)[:0], l)
	lh.w.Write(b) // as slog's handlers do, a failed write of a log line is ignored
	if cap(b) <= 16<<10 {
		*bp = b
		lineBuffers.Put(bp)
	}
}

// appendAccessText appends l as slog's TextHandler writes its record.
func appendAccessText(b []byte, l *accessLine) []byte {
	b = append(b, "time="...)
	b = appendRFC3339Millis(b, l.at.Round(0))
	b = append(b, " level="...)
	b = appendTextString(b, l.level.String())
	b = append(b, " msg=request method="...)
	b = appendTextString(b, l.method)
	b = append(b, " path="...)
	b = appendTextString(b, l.path)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(l.status), 10)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, l.bytes, 10)
	b = append(b, " duration="...)
	b = append(b, l.duration.String()...)
	b = append(b, " request_id="...)
	b = appendTextString(b, l.requestID)
	b = append(b, " caller="...)
	b = appendTextString(b, l.caller)
	if l.forbidden {
		b = append(b, " outcome=forbidden"...)
	}
	if l.authFailed {
		b = append(b, " client="...)
		b = appendTextString(b, l.client)
		b = append(b, " unlogged_auth_failures="...)
		b = strconv.AppendInt(b, l.unloggedAuthFailures, 10)
	}
	return append(b, '\n')
}

// appendRFC3339Millis appends t as slog's text format writes a time:
// RFC 3339 with exactly three digits of milliseconds, truncated.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	// RFC3339Nano trims trailing zeros: a tenth of a millisecond more makes
	// four digits, of which the fourth is dropped.
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...)
}

// appendTextString appends s as slog's text format writes a string: as it
// is, or quoted (strconv.Quote) when it is empty or holds a space, '=', '"',
// a control character, or a rune that is invalid, a space or not printable.
func appendTextString(b []byte, s string) []byte {
	if textNeedsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// textNeedsQuoting is slog's rule for quoting a string in the text format.
func textNeedsQuoting(s string) bool {
	if len(s) == 0 {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == ' ' || c == '=' || c == '"' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}
