package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Request bodies, read the same way by every operation: the media type
// checked, the size bounded (maxBodyBytes per request, and a budget shared by
// all requests in flight: bodyBudget), then the bytes handed to
// decodeObject (http_decode.go).

// maxBodyBytes is the largest body a request may send; the decision table
// of docs/api.md states it, with the other limits of requests.
const maxBodyBytes = 1 << 20 // 1 MiB

// mergePatchType is the media type of a JSON Merge Patch (RFC 7396), which
// the PATCH operations accept beside application/json.
const mergePatchType = "application/merge-patch+json"

// readJSONBody checks the media type and reads the whole body, refusing more
// than maxBodyBytes. A request without Content-Type is read as JSON; one
// with another type than application/json or one of also is refused. The
// bytes it holds count against the request's share of the body budget (see
// bodyBudget), until the request ends.
func readJSONBody(w http.ResponseWriter, r *http.Request, also ...string) ([]byte, error) {
	accepted := func() string { return joinWords(append([]string{"application/json"}, also...), "or") }
	switch cts := r.Header.Values("Content-Type"); {
	case len(cts) > 1:
		// A proxy and the service could each read another one.
		return nil, errorf(codeUnsupportedMediaType, "the request has %d Content-Type headers; send one: %s", len(cts), accepted())
	case len(cts) == 1 && cts[0] == "application/json":
		// What nearly every client sends, and what ParseMediaType would
		// find in it, without its parameter map.
	case len(cts) == 1 && cts[0] != "":
		mt, _, err := mime.ParseMediaType(cts[0])
		if err != nil {
			return nil, errorf(codeUnsupportedMediaType, "the Content-Type header %q is malformed (%s); send %s", abbreviate(cts[0]), strings.TrimPrefix(err.Error(), "mime: "), accepted())
		}
		if mt != "application/json" && !slices.Contains(also, mt) {
			return nil, errorf(codeUnsupportedMediaType, "the request body must be JSON, sent with Content-Type: %s", accepted())
		}
	}
	if r.ContentLength > maxBodyBytes {
		return nil, errorf(codePayloadTooLarge, "the request body is %d bytes; the limit is %d bytes (1 MiB)", r.ContentLength, maxBodyBytes)
	}
	// MaxBytesReader also tells net/http to close the connection after a
	// body that was too long, rather than read the rest of it.
	body, err := readBody(http.MaxBytesReader(w, r.Body, maxBodyBytes), r.ContentLength, bodyLeaseFrom(r.Context()))
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, errBodyBudget):
		w.Header().Set("Retry-After", "1")
		return nil, errorf(codeUnavailable, "the service is reading as many request bodies as it has memory for; retry in a second")
	case errors.As(err, new(*http.MaxBytesError)):
		return nil, errorf(codePayloadTooLarge, "the request body is larger than the limit of %d bytes (1 MiB)", maxBodyBytes)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return nil, errClientGone
	case r.ProtoMajor == 2 && !errors.Is(err, os.ErrDeadlineExceeded) && !shortHTTP2Body(err):
		// HTTP/2 ends a body early, but for the read timeout and a body
		// shorter than its Content-Length, only when its stream ends: the
		// client reset it, or its connection is gone (net/http closes the
		// body before it ends the request's context).
		return nil, errClientGone
	}
	return nil, errorf(codeInvalidBody, "the request body could not be read completely")
}

// shortHTTP2Body reports whether err is net/http's for an HTTP/2 body
// that ended (END_STREAM) before its Content-Length: the client is there,
// waiting for an answer, and its body is invalid. net/http makes it with
// fmt.Errorf, so its words are all there is to know it by
// (TestAShortBodyOverHTTP2IsABadRequest holds them).
func shortHTTP2Body(err error) bool {
	return strings.HasPrefix(err.Error(), "request declared a Content-Length of ")
}

// firstBodyRead is the most a body's first buffer holds: all the memory a
// request takes before its first byte has come, so that a client that
// announces bodies and sends nothing holds next to nothing (over HTTP/2,
// 250 such streams a connection).
const firstBodyRead = 1 << 10

// readBody reads a body of length bytes (-1: unknown) from body as it
// arrives, into a buffer that starts at firstBodyRead (or length, when
// smaller) and grows fourfold when full (4 KiB, 16 KiB, ... 1 MiB), up to
// length or else to maxBodyBytes, taking each new buffer's size from lease
// before it is allocated. Memory is taken only for bytes a client actually
// sends, within four times: announcing 1 MiB and sending nothing holds
// 1 KiB. Growing fourfold rather than twofold leaves a third of the garbage
// behind a body of 1 MiB, which the collector otherwise let pile up under
// many bodies at once: with 500 clients sending most of 1 MiB each, the
// peak resident memory fell from 106-116 MiB to 94-104 MiB. It returns
// errBodyBudget when the budget, or the key's share of it, has no room.
func readBody(body io.Reader, length int64, lease *bodyLease) ([]byte, error) {
	limit := int64(maxBodyBytes)
	if length >= 0 {
		limit = length
	}
	if limit == 0 {
		return nil, nil
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == limit { // the length is unknown: a full buffer ends the body, or it is too long
				return buf, endOfBody(body)
			}
			size := min(limit, max(firstBodyRead, 4*int64(cap(buf))))
			if !lease.take(size) {
				return nil, errBodyBudget
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			lease.give(int64(cap(buf)))
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF || (err == nil && length >= 0 && int64(len(buf)) == length):
			// net/http ends a body at its Content-Length: every byte
			// announced is in.
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// endOfBody reads on from a body whose buffer is full: nil at its end, and a
// *http.MaxBytesError if a byte more comes. The byte is read into an array of
// its own, so a body of exactly maxBodyBytes takes no more memory than that.
func endOfBody(body io.Reader) error {
	var one [1]byte
	for {
		n, err := body.Read(one[:])
		switch {
		case n > 0:
			return &http.MaxBytesError{Limit: maxBodyBytes}
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// errBodyBudget is what readBody returns when the bodies being read already
// hold the whole budget.
var errBodyBudget = errors.New("the body budget is spent")

// bodyBudget bounds the bytes of request bodies the service holds in memory
// at once, over all requests: without it, 500 connections each sending most
// of a 1 MiB body took 1 GB. A request that would take it past its bound is
// answered 503 with Retry-After. Only requests that passed the key check read
// a body, so only a caller with a key can spend the budget, and one key may
// hold no more than its share (see keyShare): over HTTP/2 a few connections
// carry thousands of bodies at once, and one key could otherwise take the
// whole budget and starve every other.
type bodyBudget struct {
	max, keyShare int64

	mu    sync.Mutex
	used  int64
	byKey map[[sha256.Size]byte]int64 // what each key's requests hold, for those holding any
}

// newBodyBudget returns a budget of max bytes; 0 means no bound.
func newBodyBudget(max int64) *bodyBudget {
	return &bodyBudget{max: max, keyShare: keyShare(max), byKey: map[[sha256.Size]byte]int64{}}
}

// keyShare is the most of a budget of that many bytes that the requests of one key
// may hold at once: a quarter (8 MiB of the default 32 MiB), and never less
// than two bodies of the largest size, so that a key can always send one.
func keyShare(budget int64) int64 { return min(budget, max(budget/4, 2*maxBodyBytes)) }

// held is the bytes held now, by all requests together.
func (b *bodyBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// bodyLease is one request's share of the budget: what it took, given back
// whole when the request ends.
type bodyLease struct {
	budget *bodyBudget
	key    [sha256.Size]byte // the request's key, whose share it takes from
	held   int64
}

// take reserves n more bytes, or reports that the budget, or the key's
// share of it, has no room.
func (l *bodyLease) take(n int64) bool {
	if l == nil || l.budget.max == 0 {
		return true
	}
	b := l.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max || b.byKey[l.key]+n > b.keyShare {
		return false
	}
	b.used += n
	b.byKey[l.key] += n
	l.held += n
	return true
}

// give returns n of the bytes taken.
func (l *bodyLease) give(n int64) {
	if l == nil || l.budget.max == 0 || n == 0 {
		return
	}
	b := l.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	l.held -= n
	b.used -= n
	if b.byKey[l.key] -= n; b.byKey[l.key] <= 0 {
		delete(b.byKey, l.key)
	}
}

// bodyLeaseKey is the context key of a request's *bodyLease.
type bodyLeaseKey struct{}

// bodyLeaseFrom returns the request's lease, taking from the share of the
// request's key (requireKey has run by the time a body is read), nil (no
// bound) outside budgetBodies.
func bodyLeaseFrom(ctx context.Context) *bodyLease {
	var l *bodyLease
	if info := requestInfoFrom(ctx); info == nil {
		l, _ = ctx.Value(bodyLeaseKey{}).(*bodyLease)
	} else if info.lease.budget != nil { // inside observe, only here
		l = &info.lease
	}
	if l != nil && l.held == 0 {
		l.key, _ = keyIdentity(ctx)
	}
	return l
}

// budgetBodies gives every request that carries a body a lease on b, and
// gives back what it took once the request has been answered. Inside
// observe the lease is kept in the request's info, which costs no copy of
// the request; outside it, in a context value.
func budgetBodies(b *bodyBudget, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Over HTTP/2 every request has a Body, even one whose HEADERS
		// frame ended its stream: a ContentLength of 0 says no byte follows.
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || b.max == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if info := requestInfoFrom(r.Context()); info != nil {
			info.lease = bodyLease{budget: b}
			defer func() { info.lease.give(info.lease.held) }()
			next.ServeHTTP(w, r)
			return
		}
		lease := &bodyLease{budget: b}
		defer func() { lease.give(lease.held) }()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyLeaseKey{}, lease)))
	})
}
