package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
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

// createdAnswer is a 201 as createPet sends it and as a replay repeats it.
type createdAnswer struct {
	Location string
	Body     []byte
}

// newCreatedAnswer encodes the 201 for a newly stored pet.
func newCreatedAnswer(p Pet) createdAnswer {
	return createdAnswer{Location: "/v1/pets/" + strconv.FormatInt(p.ID, 10), Body: petBody(p)}
}

// write sends the answer; replayed marks a repeat of an earlier answer.
func (a createdAnswer) write(w http.ResponseWriter, replayed bool) {
	w.Header().Set("Location", a.Location)
	if replayed {
		w.Header().Set(idempotencyReplayedHdr, "true")
	}
	writeBody(w, http.StatusCreated, a.Body)
}

// idempotencyScope names one idempotency key: keys are scoped per API key,
// so two clients choosing the same key never see each other's pets.
type idempotencyScope struct {
	apiKey [sha256.Size]byte
	key    string
}

// idempotency runs creates under idempotency keys. It remembers which keys
// have a request in progress in this process, to answer a concurrent repeat
// with 409; finished keys live in the database, so replays survive restarts.
// One process serves a database file, so the in-process set is complete.
type idempotency struct {
	st  *store
	ttl time.Duration // how long a key is remembered
	now func() time.Time

	mu       sync.Mutex
	inFlight map[idempotencyScope]bool
}

// newIdempotency returns the idempotent create of st, remembering keys for ttl.
func newIdempotency(st *store, ttl time.Duration, now func() time.Time) *idempotency {
	return &idempotency{st: st, ttl: ttl, now: now, inFlight: map[idempotencyScope]bool{}}
}

// createPet stores np and returns the 201 to send. With an idempotency key
// (key != "") it replays the stored answer of an earlier request with the
// same key and request instead; replayed says which happened.
func (ix *idempotency) createPet(ctx context.Context, key string, np newPet) (ans createdAnswer, replayed bool, err error) {
	if key == "" {
		pet, err := ix.st.createPet(ctx, np)
		if err != nil {
			return createdAnswer{}, false, err
		}
		return newCreatedAnswer(pet), false, nil
	}
	scope := idempotencyScope{key: key}
	scope.apiKey, _ = keyIdentity(ctx)
	fp := fingerprint(np)

	// A finished key replays from a reader, without queueing for the writer.
	if rec, found, err := ix.st.lookupIdempotencyKey(ctx, ix.st.reader, scope, ix.cutoff()); err != nil || found {
		return rec.replay(fp, err)
	}
	if !ix.claim(scope) {
		return createdAnswer{}, false, errorf(codeIdempotencyConflict, "a request with this Idempotency-Key is still being processed; wait for its answer, or retry with the same key later to receive it")
	}
	defer ix.release(scope)

	var (
		rec   idempotencyRecord
		found bool
	)
	// Only appends: a pet, and a row of a table the API never lists.
	err = ix.st.write(ctx, onlyAppendsPets, func(ctx context.Context, tx *sql.Tx) error {
		// Looked up again inside the transaction: the key may have been
		// finished between the read above and the claim.
		var err error
		if rec, found, err = ix.st.lookupIdempotencyKey(ctx, tx, scope, ix.cutoff()); err != nil || found {
			return err
		}
		pet, err := ix.st.insertPetTx(ctx, tx, np)
		if err != nil {
			return err
		}
		ans = newCreatedAnswer(pet)
		return ix.st.insertIdempotencyKeyTx(ctx, tx, scope, fp, pet.ID, ans, ix.now())
	})
	if err != nil || found {
		return rec.replay(fp, err)
	}
	return ans, false, nil
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

// fingerprint identifies a create request by its validated content, so that
// a retry that spells the same pet differently (other spacing, field order,
// the default status written out) is still the same request.
func fingerprint(np newPet) [sha256.Size]byte {
	b, _ := json.Marshal([]any{np.Name, np.CategoryID, np.Status}) // strings and integers always encode
	return sha256.Sum256(b)
}

// idempotencyRecord is a stored answer with the fingerprint of the request
// that produced it.
type idempotencyRecord struct {
	fingerprint [sha256.Size]byte
	answer      createdAnswer
}

// replay returns the stored answer for a repeat whose request has
// fingerprint fp, or err when the lookup itself failed.
func (rec idempotencyRecord) replay(fp [sha256.Size]byte, err error) (createdAnswer, bool, error) {
	if err != nil {
		return createdAnswer{}, false, err
	}
	if rec.fingerprint != fp {
		return createdAnswer{}, false, errorf(codeIdempotencyMismatch, "this Idempotency-Key was already used with a different request body; send the original body to get its answer again, or use a new key for a new pet")
	}
	return rec.answer, true, nil
}

// queryRower is what a lookup needs: the read pool or a write transaction.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lookupIdempotencyKey returns the stored answer for scope, unless it was
// created at or before cutoff.
func (s *store) lookupIdempotencyKey(ctx context.Context, q queryRower, scope idempotencyScope, cutoff time.Time) (idempotencyRecord, bool, error) {
	var rec idempotencyRecord
	var fp []byte
	err := q.QueryRowContext(ctx,
		"SELECT fingerprint, location, body FROM idempotency_keys WHERE api_key_sha256 = ? AND idempotency_key = ? AND created_at > ?",
		scope.apiKey[:], scope.key, cutoff.UnixMilli()).Scan(&fp, &rec.answer.Location, &rec.answer.Body)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, s.failed("look up idempotency key", err)
	}
	copy(rec.fingerprint[:], fp)
	return rec, true, nil
}

// insertIdempotencyKeyTx records the answer to scope inside tx, the
// transaction that stored the pet. An expired row under the same key is
// replaced: lookups already treat it as absent.
func (s *store) insertIdempotencyKeyTx(ctx context.Context, tx *sql.Tx, scope idempotencyScope, fp [sha256.Size]byte, petID int64, ans createdAnswer, now time.Time) error {
	_, err := tx.ExecContext(ctx,
		"INSERT OR REPLACE INTO idempotency_keys (api_key_sha256, idempotency_key, fingerprint, pet_id, status, location, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		scope.apiKey[:], scope.key, fp[:], petID, http.StatusCreated, ans.Location, ans.Body, now.UnixMilli())
	if err != nil {
		return s.failedWrite("record idempotency key", err)
	}
	return nil
}

// pruneIdempotencyKeys deletes the keys created at or before cutoff and
// returns how many it deleted.
func (s *store) pruneIdempotencyKeys(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	// Deleting keys changes no pet: the caches keep their answers.
	err := s.write(ctx, onlyAppendsPets, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE created_at <= ?", cutoff.UnixMilli())
		if err != nil {
			return s.failedWrite("prune idempotency keys", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// pruneIdempotencyKeysEvery prunes expired keys now and then every interval
// until ctx is done. Lookups ignore expired keys anyway; pruning only keeps
// the table from growing without bound.
func pruneIdempotencyKeysEvery(ctx context.Context, log *slog.Logger, st *store, ttl, interval time.Duration, now func() time.Time) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := st.pruneIdempotencyKeys(ctx, now().Add(-ttl))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.WarnContext(ctx, "pruning idempotency keys failed; will retry", "err", err)
		case n > 0:
			log.InfoContext(ctx, "pruned expired idempotency keys", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
