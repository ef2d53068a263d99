package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// keyEntry is one accepted API key. Only its SHA-256 digest is kept:
// comparing digests of equal length in constant time reveals neither a key's
// content nor its length through timing, and a key file can list digests so
// that it holds no secret at all.
type keyEntry struct {
	digest [sha256.Size]byte
	// id is the key's identity wherever the service keeps state per key
	// (idempotency records in the database, rate limits, metrics labels):
	// the HMAC-SHA256 of the digest under the service's secret (see
	// loadSecret). The digest alone is an unsalted hash of the key, which
	// whoever reads the database could test guesses against; the id is
	// worthless without the secret, which is kept outside the database.
	id    [sha256.Size]byte
	label string // names the caller in logs and metrics, never the key
	short bool   // the key is known, and shorter than minKeyLen
}

// minKeyLen is the length under which a key given in full (not as a digest)
// is reported at start-up and reload as guessable. Such keys are accepted
// all the same: refusing them would lock out a deployment on upgrade.
const minKeyLen = 16

// newKeyEntry makes the entry for a digest under secret, labelled by label
// or, without one, by a short prefix of its id: stable across restarts and
// replicas that share the secret, and derived from no key material alone.
func newKeyEntry(secret []byte, digest [sha256.Size]byte, label string) keyEntry {
	mac := hmac.New(sha256.New, secret)
	mac.Write(digest[:])
	e := keyEntry{digest: digest, label: label}
	mac.Sum(e.id[:0])
	if e.label == "" {
		e.label = "key-" + hex.EncodeToString(e.id[:4])
	}
	return e
}

// keySet is a set of accepted keys, immutable once built.
type keySet struct {
	entries []keyEntry
}

// shortKeys lists the labels of the keys shorter than minKeyLen.
func (ks *keySet) shortKeys() []string {
	var labels []string
	for _, e := range ks.entries {
		if e.short {
			labels = append(labels, e.label)
		}
	}
	return labels
}

// match returns the entry whose key is token. It compares token with every
// entry whatever the answer, so the time taken says neither which key
// matched nor how many there are before it.
func (ks *keySet) match(token string) (entry keyEntry, ok bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range ks.entries {
		if subtle.ConstantTimeCompare(d[:], ks.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return keyEntry{}, false
	}
	return ks.entries[found], true
}

// keyIdentityKey is the context key under which requireKey stores the
// identity of the API key that authenticated a request.
type keyIdentityKey struct{}

// keyIdentity returns the id (see keyEntry) of the API key that
// authenticated the request whose context is ctx; ok is false outside
// requireKey. Per-key state (idempotency keys, rate limits) is scoped by this
// id, so the key itself never needs to be kept past the check, and a key
// keeps its state whatever label it is given.
func keyIdentity(ctx context.Context) (id [sha256.Size]byte, ok bool) {
	if info := requestInfoFrom(ctx); info != nil && info.keyed {
		return info.keyID, true
	}
	id, ok = ctx.Value(keyIdentityKey{}).([sha256.Size]byte)
	return id, ok
}

// keyring is the service's current key set: the keys of PETSTORE_API_KEYS
// plus those of the key file, which reload re-reads. Requests read the set
// through an atomic pointer, so a reload swaps it without blocking or
// dropping a request.
type keyring struct {
	secret  []byte // keys the ids of the entries (see keyEntry)
	envKeys []keyEntry
	file    string
	current *atomic.Pointer[keySet]
}

// loadKeyring builds the key set from a comma-separated list (as in
// PETSTORE_API_KEYS) and, when file is not empty, a key file; secret keys
// the entries' ids.
func loadKeyring(list, file string, secret []byte) (keyring, error) {
	kr := keyring{secret: secret, file: file, current: new(atomic.Pointer[keySet])}
	for k := range strings.SplitSeq(list, ",") {
		if k = strings.TrimSpace(k); k != "" {
			e := newKeyEntry(secret, sha256.Sum256([]byte(k)), "")
			e.short = len(k) < minKeyLen
			kr.envKeys = append(kr.envKeys, e)
		}
	}
	if err := kr.reload(); err != nil {
		return kr, &configError{settingName("api-keys-file"), err.Error()}
	}
	return kr, nil
}

// fixedKeyring is a keyring of the given keys only, such as the generated
// key.
func fixedKeyring(secret []byte, keys ...string) keyring {
	kr, _ := loadKeyring(strings.Join(keys, ","), "", secret) // cannot fail without a file
	return kr
}

// keys returns the current key set.
func (kr keyring) keys() *keySet { return kr.current.Load() }

// configured reports whether any source of keys was given at all.
func (kr keyring) configured() bool { return len(kr.envKeys) > 0 || kr.file != "" }

// reload re-reads the key file and swaps in the new set. When the file cannot
// be read or parsed, when its group or others may write it, or when a reload
// finds no key in it, the current set stays in force and the error says why.
func (kr keyring) reload() error {
	entries := append([]keyEntry(nil), kr.envKeys...)
	if kr.file != "" {
		f, err := os.Open(kr.file)
		if err != nil {
			return fmt.Errorf("cannot read key file: %v", errors.Unwrap(err))
		}
		defer f.Close()
		// Whoever may write the file may add a key of their own: the
		// group and other users must not (the check is on the file opened,
		// so that it cannot be swapped in between).
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("cannot read key file: %v", errors.Unwrap(err))
		}
		if perm := fi.Mode().Perm(); perm&0o022 != 0 {
			return fmt.Errorf("key file %s can be written by its group or by other users (mode %04o), so anyone of them could add a key; refusing it (chmod go-w %s)", kr.file, perm, kr.file)
		}
		fromFile, err := parseKeyFile(f, kr.secret)
		if err != nil {
			return fmt.Errorf("key file %s: %w", kr.file, err)
		}
		// A file that held keys and holds none is far more often a file
		// caught half-written (an editor truncates it before writing) than
		// an operator locking every client out on purpose.
		if len(fromFile) == 0 && kr.current.Load() != nil {
			return fmt.Errorf("key file %s holds no key now (truncated, or caught while being written?); to refuse every client on purpose, stop the service", kr.file)
		}
		entries = append(entries, fromFile...)
	}
	kr.current.Store(&keySet{entries: entries})
	return nil
}

// validLabel reports whether s may be a caller label: 1 to 64 letters,
// digits, '.', '_' or '-', because it becomes a log field and a metric label.
func validLabel(s string) bool {
	return len(s) >= 1 && len(s) <= 64 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
}

// parseKeyFile reads one entry per line: a key, or "sha256:" and the hex
// digest of a key, then optionally a label. Blank lines and everything from a
// '#' that starts a word are ignored. Errors name the line but never repeat
// its content, which may be a key. secret keys the entries' ids.
func parseKeyFile(r io.Reader, secret []byte) ([]keyEntry, error) {
	var entries []keyEntry
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:i]
				break
			}
		}
		switch len(fields) {
		case 0:
			continue
		case 1, 2:
		default:
			return nil, fmt.Errorf("line %d: expected KEY or sha256:HEX, then an optional label, and nothing more", n)
		}
		label := ""
		if len(fields) == 2 {
			label = fields[1]
			if !validLabel(label) {
				return nil, fmt.Errorf("line %d: a label is 1 to 64 letters, digits, '.', '_' or '-'", n)
			}
		}
		digest := sha256.Sum256([]byte(fields[0]))
		short := len(fields[0]) < minKeyLen
		if hexDigest, ok := strings.CutPrefix(fields[0], "sha256:"); ok {
			b, err := hex.DecodeString(hexDigest)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("line %d: after sha256: come the 64 hex digits of the key's SHA-256 digest (see petstore hash-key)", n)
			}
			digest, short = [sha256.Size]byte(b), false
		}
		e := newKeyEntry(secret, digest, label)
		e.short = short
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line too long or unreadable: %v", err)
	}
	return entries, nil
}

// hashKey is `petstore hash-key`: it reads a key from in (one line) and
// writes the "sha256:HEX" line that lets a key file accept it without
// holding it.
func hashKey(in io.Reader, out io.Writer) error {
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("read key: %w", err)
	}
	key := strings.TrimRight(line, "\r\n")
	if key == "" {
		return &configError{"hash-key", "no key on standard input; pipe one in, for example: printf %s \"$KEY\" | petstore hash-key"}
	}
	d := sha256.Sum256([]byte(key))
	_, err = fmt.Fprintf(out, "sha256:%s\n", hex.EncodeToString(d[:]))
	return err
}

// generateKey returns a fresh random key: 32 bytes from the system's secure
// random source, URL-safe base64 so that it can be pasted into a header or a
// shell without quoting.
func generateKey() string {
	b := make([]byte, 32)
	rand.Read(b) // never returns an error (crypto/rand documents it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// bearerToken extracts the token from an "Authorization: Bearer <token>"
// header. The scheme name is case-insensitive (RFC 9110, section 11.1).
func bearerToken(header string) (token string, ok bool) {
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// authGuard is what requireKey needs besides the keys: how to find a
// client's address, the throttle of failed authentication per address, and
// where to count the failures.
type authGuard struct {
	proxies  trustedProxies
	throttle *authThrottle
	failures func(answer string) // counts a failure by how it was answered
}

// refuse answers a request without valid credentials with e, or with 429
// once its address has failed too often (see authThrottle), and marks it so
// that the access log samples such lines.
func (guard authGuard) refuse(w http.ResponseWriter, r *http.Request, log *slog.Logger, e *apiError, wwwAuthenticate string) {
	addr := clientAddr(r, guard.proxies)
	if info := requestInfoFrom(r.Context()); info != nil {
		info.authFailed, info.client = true, addr.String()
	}
	if wait := guard.throttle.fail(addr); wait > 0 {
		guard.failures("throttled")
		seconds := retryAfterSeconds(wait)
		w.Header().Set("Retry-After", strconv.Itoa(seconds))
		writeError(w, r, log, errorf(codeRateLimited, "too many requests without a valid API key came from your address; retry after %d s with a valid key", seconds))
		return
	}
	guard.failures(e.Code)
	if wwwAuthenticate != "" {
		w.Header().Set("WWW-Authenticate", wwwAuthenticate)
	}
	writeError(w, r, log, e)
}

// admit passes a request whose caller is entry on to next. Inside observe
// the key's identity goes into the request's info, which keyIdentity reads
// first; outside it, into a context value.
func admit(w http.ResponseWriter, r *http.Request, entry keyEntry, next http.Handler) {
	if info := requestInfoFrom(r.Context()); info != nil {
		info.caller = entry.label
		info.keyID, info.keyed = entry.id, true
		next.ServeHTTP(w, r)
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyIdentityKey{}, entry.id)))
}

// requireKey lets a request through to next only when it carries one of the
// keys of kr. It runs before anything else looks at the request, so a caller
// without a key learns nothing (not even whether a pet exists). The key is
// never logged nor echoed back; the caller's label is recorded for the
// access log and metrics. A request without a valid key is answered 401,
// or 429 once its address has failed too often (see authThrottle), and is
// marked so that the access log samples such lines.
func requireKey(kr keyring, guard authGuard, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(e *apiError, wwwAuthenticate string) { guard.refuse(w, r, log, e, wwwAuthenticate) }
		if n := len(r.Header.Values("Authorization")); n > 1 {
			// One proxy may read the first, another the last: whichever
			// this service chose, something in front of it could
			// disagree about who is calling. RFC 9110 allows the field
			// once.
			refuse(errorf(codeInvalidHeader, "the Authorization header is given %d times; send it once", n), "")
			return
		}
		header := r.Header.Get("Authorization")
		token, isBearer := bearerToken(header)
		if isBearer && token != "" {
			if entry, ok := kr.keys().match(token); ok {
				admit(w, r, entry, next)
				return
			}
		}
		switch {
		case header == "":
			// RFC 6750, section 3: no error attribute when the client sent
			// no credentials at all.
			refuse(errorf(codeUnauthorized, "missing API key; send the header Authorization: Bearer <API key>"), `Bearer realm="petstore"`)
		case !isBearer || token == "":
			refuse(errorf(codeUnauthorized, "the Authorization header holds no bearer key; send the header Authorization: Bearer <API key>"), `Bearer realm="petstore"`)
		default:
			refuse(errorf(codeUnauthorized, "the API key in the Authorization header is not valid; check the key you were given, or ask the operator for a new one"), `Bearer realm="petstore", error="invalid_token"`)
		}
	})
}
