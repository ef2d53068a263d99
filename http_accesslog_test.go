package main

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAccessLineIsSlogs holds the hand-formatted access line to what slog's
// TextHandler writes for the same record, over edge cases and random lines:
// strings that need quoting or not (empty, spaces, '=', quotes, backslashes,
// control bytes, invalid UTF-8, non-printable and space runes, long ones),
// every optional attribute, both levels, instants and durations of every
// size and time zone.
func TestAccessLineIsSlogs(t *testing.T) {
	t.Parallel()
	pieces := []string{"", "GET", "/v1/pets/7", "a b", "a=b", `say "hi"`, `back\slash`, "tab\there", "nul\x00",
		"\x7f", "caf\u00e9", "\u00a0nbsp", "\u2028", "\u200b", "\xff\xfe", "日本語", "emoji\U0001F600", "…",
		strings.Repeat("x", 300), "01KQ0V3EXAMPLEREQUESTID00", "key:ab12", "[::1]:443", "%2F"}
	zones := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+30*60), time.FixedZone("west", -8*3600)}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string {
		s := pieces[rng.IntN(len(pieces))]
		if rng.IntN(3) == 0 {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	lines := []accessLine{
		{at: time.Date(2026, 11, 25, 2, 43, 10, 0, time.UTC), level: slog.LevelInfo, method: "GET", path: "/v1/pets", status: 200, bytes: 0, duration: 0, requestID: "", caller: ""},
		{at: time.Date(2026, 11, 25, 2, 43, 10, 999_999_999, time.UTC), level: slog.LevelDebug, method: "GET", path: "/healthz", status: 499, bytes: 1 << 40, duration: 90 * time.Minute, requestID: "x", caller: "k", forbidden: true, authFailed: true, client: "", unloggedAuthFailures: -1},
	}
	for range 5000 {
		l := accessLine{
			at:        time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))]),
			level:     []slog.Level{slog.LevelInfo, slog.LevelDebug}[rng.IntN(2)],
			method:    pick(),
			path:      pick(),
			status:    rng.IntN(600),
			bytes:     rng.Int64N(1 << 30),
			duration:  time.Duration(rng.Int64N(int64(10 * time.Second))),
			requestID: pick(),
			caller:    pick(),
		}
		if rng.IntN(4) == 0 {
			l.duration = time.Duration(rng.IntN(2000)) // nanoseconds and microseconds print differently
		}
		l.forbidden = rng.IntN(5) == 0
		if rng.IntN(5) == 0 {
			l.authFailed, l.client, l.unloggedAuthFailures = true, pick(), rng.Int64N(1000)
		}
		lines = append(lines, l)
	}
	for _, l := range lines {
		var want bytes.Buffer
		h := slog.NewTextHandler(&want, &slog.HandlerOptions{Level: slog.LevelDebug})
		rec := slog.NewRecord(l.at, l.level, "request", 0)
		rec.AddAttrs(l.attrs(nil)...)
		if err := h.Handle(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		got := appendAccessText(nil, &l)
		if diff := cmp.Diff(want.String(), string(got)); diff != "" {
			t.Fatalf("access line of %+v differs from slog's (-slog +ours):\n%s", l, diff)
		}
	}
}

// TestAccessLineWrittenOnceThroughTheServiceLogger checks the path a request
// takes: the service's logger in the text format writes the line itself, in
// one Write, and the JSON format keeps slog's handler.
func TestAccessLineWrittenOnceThroughTheServiceLogger(t *testing.T) {
	t.Parallel()
	l := accessLine{at: time.Date(2026, 11, 25, 2, 43, 10, 5e6, time.UTC), level: slog.LevelInfo, method: "GET", path: "/v1/pets/7",
		status: 200, bytes: 64, duration: 1500 * time.Microsecond, requestID: "id", caller: "key:1"}
	for _, format := range []string{"text", "json"} {
		var w writeCounter
		logAccess(context.Background(), newLogger(format, &w).Handler(), &l)
		var want bytes.Buffer
		h := slog.Handler(slog.NewTextHandler(&want, nil))
		if format == "json" {
			h = slog.NewJSONHandler(&want, nil)
		}
		rec := slog.NewRecord(l.at, l.level, "request", 0)
		rec.AddAttrs(l.attrs(nil)...)
		h.Handle(context.Background(), rec)
		if diff := cmp.Diff(want.String(), w.buf.String()); diff != "" {
			t.Errorf("%s: line differs from slog's (-slog +written):\n%s", format, diff)
		}
		if w.writes != 1 {
			t.Errorf("%s: the line took %d writes, want 1", format, w.writes)
		}
	}
}

// writeCounter is a writer that counts its writes.
type writeCounter struct {
	buf    bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return w.buf.Write(p) }
