package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"
)

// keySet is the set of API keys the service accepts. It holds only SHA-256
// digests: comparing digests of equal length in constant time reveals neither
// a key's content nor its length through timing, and the process never needs
// the keys themselves after start-up.
type keySet struct {
	digests [][sha256.Size]byte
}

// parseKeyList reads a comma-separated list of keys, as in PETSTORE_API_KEYS.
// Blanks around keys and empty entries are ignored.
func parseKeyList(list string) keySet {
	var ks keySet
	for k := range strings.SplitSeq(list, ",") {
		if k = strings.TrimSpace(k); k != "" {
			ks.digests = append(ks.digests, sha256.Sum256([]byte(k)))
		}
	}
	return ks
}

// len returns how many keys are configured.
func (ks keySet) len() int { return len(ks.digests) }

// match reports whether key is one of the configured keys, and returns its
// digest. It looks at every configured key whatever the answer, so the time
// taken does not say which key (or how many) matched.
func (ks keySet) match(key string) (digest [sha256.Size]byte, ok bool) {
	d := sha256.Sum256([]byte(key))
	match := 0
	for i := range ks.digests {
		match |= subtle.ConstantTimeCompare(d[:], ks.digests[i][:])
	}
	return d, match == 1
}

// keyIdentityKey is the context key under which requireKey stores the
// identity of the API key that authenticated a request.
type keyIdentityKey struct{}

// keyIdentity returns the SHA-256 digest of the API key that authenticated
// the request whose context is ctx; ok is false outside requireKey. Per-key
// state (idempotency keys, rate limits) is scoped by this digest, so the key
// itself never needs to be kept past the check.
func keyIdentity(ctx context.Context) (digest [sha256.Size]byte, ok bool) {
	digest, ok = ctx.Value(keyIdentityKey{}).([sha256.Size]byte)
	return digest, ok
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

// requireKey lets a request through to next only when it carries one of the
// keys in ks. It runs before anything else looks at the request, so a caller
// without a key learns nothing (not even whether a pet exists). The key is
// never logged nor echoed back.
func requireKey(ks keySet, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := r.Header.Get("Authorization")
		token, isBearer := bearerToken(header)
		if isBearer && token != "" {
			if digest, ok := ks.match(token); ok {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyIdentityKey{}, digest)))
				return
			}
		}
		var e *apiError
		switch {
		case header == "":
			// RFC 6750, section 3: no error attribute when the client sent
			// no credentials at all.
			w.Header().Set("WWW-Authenticate", `Bearer realm="petstore"`)
			e = errorf(codeUnauthorized, "missing API key; send the header Authorization: Bearer <API key>")
		case !isBearer || token == "":
			w.Header().Set("WWW-Authenticate", `Bearer realm="petstore"`)
			e = errorf(codeUnauthorized, "the Authorization header holds no bearer key; send the header Authorization: Bearer <API key>")
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="petstore", error="invalid_token"`)
			e = errorf(codeUnauthorized, "the API key in the Authorization header is not valid; check the key you were given, or ask the operator for a new one")
		}
		writeError(w, r, log, e)
	})
}
