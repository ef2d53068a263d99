package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Idempotency keys on createPet follow the IETF httpapi draft "The
// Idempotency-Key HTTP Header Field": a client that is not sure its create
// arrived retries with the same key and gets the first answer back instead
// of a second pet.
const (
	idempotencyHeader      = "Idempotency-Key"
	maxIdempotencyKeyLen   = 255
	defaultIdempotencyTTL  = 24 * time.Hour
	idempotencyReplayedHdr = "Idempotent-Replayed"
)

// idempotencyKeyOf returns the Idempotency-Key of a request, "" when it has
// none. The draft defines the value as a Structured Field string (quoted);
// many clients send it bare, so both forms are accepted and mean the same
// key: "abc" and abc are one key.
func idempotencyKeyOf(h http.Header) (string, error) {
	vs := h.Values(idempotencyHeader)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", errorf(codeInvalidHeader, "header Idempotency-Key is given %d times; send it once", len(vs))
	}
	key, ok := unquoteStructuredString(vs[0])
	switch {
	case !ok:
		return "", errorf(codeInvalidHeader, `header Idempotency-Key must be printable ASCII, bare or as a quoted string such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	case key == "":
		return "", errorf(codeInvalidHeader, "header Idempotency-Key is empty; send a unique value (a UUID, for example) or leave the header out")
	case len(key) > maxIdempotencyKeyLen:
		return "", errorf(codeInvalidHeader, "header Idempotency-Key is %d characters; the limit is %d", len(key), maxIdempotencyKeyLen)
	}
	return key, nil
}

// unquoteStructuredString reads v as an RFC 8941 string ("..." with \" and
// \\ escapes) when it starts with a quote, and as the bare key otherwise.
// Either way only printable ASCII is allowed, as in an sf-string.
func unquoteStructuredString(v string) (string, bool) {
	if !strings.HasPrefix(v, `"`) {
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return "", false
			}
		}
		return v, true
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), i == len(v)-1 // nothing may follow the closing quote
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

// creator is a create operation (createPet), as idempotent runs it: what it
// is called, where its resources live, and how it turns a request body into
// a validated creation.
type creator struct {
	operation string // the operationId, recorded with an idempotency key
	path      string // the collection: a created resource is at path/{id}
	decode    func(body []byte) (creation, error)
	onCreate  func() // when not nil, runs after each resource created (not replayed)
}

// creation is one validated create request.
type creation struct {
	// fingerprint identifies the request by its validated content, so that
	// a retry that spells it differently (other spacing, field order, a
	// default written out) is still the same request. It is computed only
	// for a request with an Idempotency-Key.
	fingerprint func() [sha256.Size]byte
	// write makes the resource inside the write transaction, or refuses
	// to, writing nothing.
	write func(tx *txn) (outcome[created], error)
	// insertOnly says that write only inserts pets, which the writer may
	// then insert with those of the other creates of its batch, in one
	// statement (see writeInserts).
	insertOnly bool
}

// created is what a creation made: the new resource's id and its body as
// the 201 sends it.
type created struct {
	id   int64
	body []byte
}

// fingerprintOf hashes the validated values of a request.
func fingerprintOf(values ...any) [sha256.Size]byte {
	b, _ := json.Marshal(values) // strings and integers always encode
	return sha256.Sum256(b)
}

// idempotent serves a create operation: it reads and validates the body
// through c, stores the resource (through ix, under the request's
// Idempotency-Key when it has one) and answers 201 with its Location, or
// replays the answer first given to the same key. Every create goes through
// it in addRoutes, so every create accepts Idempotency-Key alike.
func idempotent(log *slog.Logger, ix *idempotency, c creator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyKeyOf(r.Header)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		body, err := readJSONBody(w, r)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		cr, err := c.decode(body)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		res, replayed, err := ix.create(r.Context(), c.operation, key, cr)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		w.Header().Set("Location", c.path+"/"+strconv.FormatInt(res.id, 10))
		if replayed {
			w.Header().Set(idempotencyReplayedHdr, "true")
		} else if c.onCreate != nil {
			c.onCreate()
		}
		writeBody(w, http.StatusCreated, res.body)
	})
}

// idempotency runs creates under idempotency keys. It remembers which keys
// have a request in progress in this process, to answer a concurrent repeat
// with 409; finished keys live in the database (store_idempotency.go), so
// replays survive restarts. The set sees only this process's requests: a
// repeat sent to another replica at once is settled by the database, where
// the write lock runs one batch after the other and the second finds the
// first's record and replays it.
type idempotency struct {
	st  *store
	ttl time.Duration // how long a key is remembered
	now func() time.Time

	mu       sync.Mutex
	inFlight map[idempotencyScope]bool
}

// newIdempotency returns the idempotent creates of st, remembering keys for
// ttl.
func newIdempotency(st *store, ttl time.Duration, now func() time.Time) *idempotency {
	return &idempotency{st: st, ttl: ttl, now: now, inFlight: map[idempotencyScope]bool{}}
}

// idempotentOutcome is what the write of an idempotent create found or did.
type idempotentOutcome struct {
	created  outcome[created]
	replay   idempotencyRecord
	replayed bool // the key was finished: replay holds its record
}

// create runs cr. With an idempotency key (key != "") it replays the stored
// answer of an earlier request with the same key, operation and content
// instead, and refuses one with the same key but another request; replayed
// says which happened. A create that the data refuses (an order for a pet
// that is not available) records nothing: a retry is judged afresh.
func (ix *idempotency) create(ctx context.Context, operation, key string, cr creation) (res created, replayed bool, err error) {
	res, replayed, err = ix.createOrReplay(ctx, operation, key, cr)
	if replayed && err == nil {
		// With -replicate-sync, an answer is given only once its write is
		// in the replica: a replay too, whose first answer may have been
		// replica_unavailable.
		err = ix.st.replicated(ctx)
	}
	return res, replayed, err
}

// createOrReplay is create, the replica aside.
func (ix *idempotency) createOrReplay(ctx context.Context, operation, key string, cr creation) (res created, replayed bool, err error) {
	if key == "" {
		run := write[outcome[created]]
		if cr.insertOnly {
			run = writeInserts[outcome[created]]
		}
		o, err := run(ctx, ix.st, cr.write)
		res, err := o.result(err)
		return res, false, err
	}
	scope := idempotencyScope{key: key}
	scope.apiKey, _ = keyIdentity(ctx)
	fingerprint := cr.fingerprint()

	// A finished key replays from a reader, without queueing for the writer.
	rec, found, err := ix.st.lookupIdempotencyKey(ctx, scope, ix.cutoff())
	if err != nil {
		return created{}, false, err
	}
	if found {
		return rec.replayFor(operation, fingerprint)
	}
	if !ix.claim(scope) {
		return created{}, false, errorf(codeIdempotencyConflict, "a request with this Idempotency-Key is still being processed; wait for its answer, or retry with the same key later to receive it")
	}
	defer ix.release(scope)

	out, err := write(ctx, ix.st, func(tx *txn) (idempotentOutcome, error) {
		// Looked up again inside the transaction: the key may have been
		// finished between the read above and the claim.
		rec, found, err := tx.lookupIdempotencyKey(scope, ix.cutoff())
		if err != nil || found {
			return idempotentOutcome{replay: rec, replayed: found}, err
		}
		res, err := cr.write(tx)
		if err != nil || res.refused != nil {
			return idempotentOutcome{created: res}, err
		}
		rec = idempotencyRecord{operation: operation, fingerprint: fingerprint, resourceID: res.value.id, body: res.value.body}
		return idempotentOutcome{created: res}, tx.recordIdempotencyKey(scope, rec, ix.now(), ix.cutoff())
	})
	switch {
	case errors.Is(err, errDuplicateKey):
		// Another replica finished the same key first, between this one's
		// look-ups and its insert (only PostgreSQL has other writers): its
		// transaction committed, so its answer is there to replay.
		rec, found, lookupErr := ix.st.lookupIdempotencyKey(ctx, scope, ix.cutoff())
		if lookupErr != nil || !found {
			return created{}, false, errorf(codeIdempotencyConflict, "a request with this Idempotency-Key was being processed at the same time; retry with the same key to receive its answer")
		}
		return rec.replayFor(operation, fingerprint)
	case err != nil:
		return created{}, false, err
	case out.replayed:
		return out.replay.replayFor(operation, fingerprint)
	}
	res, err = out.created.result(nil)
	return res, false, err
}

// cutoff is the creation instant at or before which a key is forgotten.
func (ix *idempotency) cutoff() time.Time { return ix.now().Add(-ix.ttl) }

// claim marks scope as in progress; false means it already was.
func (ix *idempotency) claim(scope idempotencyScope) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.inFlight[scope] {
		return false
	}
	ix.inFlight[scope] = true
	return true
}

// release ends the claim taken by claim.
func (ix *idempotency) release(scope idempotencyScope) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.inFlight, scope)
}

// replayFor returns the stored answer for a repeat of operation whose
// request has fingerprint fp, or refuses a different request under the key.
func (rec idempotencyRecord) replayFor(operation string, fp [sha256.Size]byte) (created, bool, error) {
	if rec.operation != operation || rec.fingerprint != fp {
		return created{}, false, errorf(codeIdempotencyMismatch, "this Idempotency-Key was already used with a different request; send the original request to get its answer again, or use a new key for a new request")
	}
	return created{id: rec.resourceID, body: rec.body}, true, nil
}
