package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
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
	// scopes are what the key may do (see scope); a line of the key file
	// without scopes=, a key of PETSTORE_API_KEYS and the generated key
	// hold every scope.
	scopes scopeSet
	// expires is when the key stops being accepted; zero for never.
	expires time.Time
	// source says where the key is listed ("line 3" of the key file, or
	// "key 2 of PETSTORE_API_KEYS"), for the error that refuses a key
	// listed twice; never the key itself.
	source string
}

// shortID is the key's id as logs, metrics and `petstore keys list` show
// it: the first 4 bytes of the id in hex, also the label of a key without
// one. It says which entry is meant without anything to test guesses
// against.
func (e keyEntry) shortID() string { return hex.EncodeToString(e.id[:4]) }

// expired reports whether the key is past its expiry at t.
func (e keyEntry) expired(t time.Time) bool { return !e.expires.IsZero() && !t.Before(e.expires) }

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
	e := keyEntry{digest: digest, label: label, scopes: everyScope}
	mac.Sum(e.id[:0])
	if e.label == "" {
		e.label = "key-" + e.shortID()
	}
	return e
}

// keySet is a set of accepted keys, immutable once built. Each key is in
// it once (see distinctKeys), so a bearer key and a ticket of that key find
// the same entry, with the same scopes.
type keySet struct {
	entries []keyEntry
	// replaced is closed when a reload swaps in the set that follows this
	// one: an open event stream waits on it to check its key again (see
	// feed.keyState).
	replaced chan struct{}
}

// newKeySet returns the set of entries.
func newKeySet(entries []keyEntry) *keySet {
	return &keySet{entries: entries, replaced: make(chan struct{})}
}

// byID returns the entry whose identity (see keyEntry) is id: the key a
// stream ticket was asked for, or the key an open stream was opened with.
func (ks *keySet) byID(id [sha256.Size]byte) (keyEntry, bool) {
	for _, e := range ks.entries {
		if e.id == id {
			return e, true
		}
	}
	return keyEntry{}, false
}

// distinctKeys refuses a key listed twice, in the same source or in two:
// each listing would carry its own scopes and expiry, and which one a
// request got would depend on how it was checked. The error names both
// listings by where they are, never by the key.
func distinctKeys(entries []keyEntry) error {
	first := make(map[[sha256.Size]byte]string, len(entries))
	for _, e := range entries {
		if where, ok := first[e.digest]; ok {
			return fmt.Errorf("%s is the same key as %s; list each key once, with every scope it needs", e.source, where)
		}
		first[e.digest] = e.source
	}
	return nil
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

// callerScopesKey is the context key under which requireKey stores the
// scopes of the API key that authenticated a request.
type callerScopesKey struct{}

// callerScopes returns the scopes of the API key that authenticated the
// request whose context is ctx; none outside requireKey. A handler that
// serves what several scopes guard (the event feed shows each key the
// resources it may read) asks it with has.
func callerScopes(ctx context.Context) scopeSet {
	if info := requestInfoFrom(ctx); info != nil && info.keyed {
		return info.scopes
	}
	ss, _ := ctx.Value(callerScopesKey{}).(scopeSet)
	return ss
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
			source := fmt.Sprintf("key %d of %sAPI_KEYS", len(kr.envKeys)+1, envPrefix)
			if err := checkListedKey(k); err != nil {
				return kr, &configError{envPrefix + "API_KEYS", source + " " + err.Error()}
			}
			e := newKeyEntry(secret, sha256.Sum256([]byte(k)), "")
			e.short = len(k) < minKeyLen
			e.source = source
			kr.envKeys = append(kr.envKeys, e)
		}
	}
	if err := distinctKeys(kr.envKeys); err != nil {
		return kr, &configError{envPrefix + "API_KEYS", err.Error()}
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
// be read or parsed, when it is not a regular file, when another user could
// change it (see checkPrivateFile), when it lists a key twice or a key of
// PETSTORE_API_KEYS again (see distinctKeys), or when a reload finds no key
// in it, the current set stays in force and the error says why.
func (kr keyring) reload() error {
	entries := append([]keyEntry(nil), kr.envKeys...)
	if kr.file != "" {
		fromFile, err := readKeyFile(kr.file, kr.secret)
		if err != nil {
			return err
		}
		// A file that held keys and holds none is far more often a file
		// caught half-written (an editor truncates it before writing) than
		// an operator locking every client out on purpose.
		if len(fromFile) == 0 && kr.current.Load() != nil {
			return fmt.Errorf("key file %s holds no key now (truncated, or caught while being written?); to refuse every client on purpose, stop the service", kr.file)
		}
		entries = append(entries, fromFile...)
		if err := distinctKeys(entries); err != nil {
			return fmt.Errorf("key file %s: %w", kr.file, err)
		}
	}
	if old := kr.current.Swap(newKeySet(entries)); old != nil {
		close(old.replaced)
	}
	return nil
}

// maxKeyFileLen bounds a key file: thousands of lines, far more than a
// service has clients. A longer file is refused, not cut.
const maxKeyFileLen = 1 << 20

// readKeyFile reads and parses the key file at path. It opens only a regular
// file, and without blocking: a FIFO put in its place would otherwise hold
// the open for ever (O_NONBLOCK makes it return at once, and the mode,
// checked on what was opened, refuses it).
func readKeyFile(path string, secret []byte) ([]keyEntry, error) {
	f, err := openRegular(path)
	if errors.As(err, new(syscall.Errno)) {
		return nil, fmt.Errorf("cannot read key file %s: %v", path, errors.Unwrap(err))
	} else if err != nil {
		return nil, fmt.Errorf("key file %s %w", path, err)
	}
	defer f.Close()
	// Whoever may write the file, or replace it, may add a key of their
	// own.
	if err := checkPrivateFile(path, f, 0o022); err != nil {
		return nil, fmt.Errorf("key file %s %w; refusing it, as whoever can change it can add a key", path, err)
	}
	b, err := readBounded(f, maxKeyFileLen)
	if errors.As(err, new(syscall.Errno)) {
		return nil, fmt.Errorf("cannot read key file %s: %v", path, errors.Unwrap(err))
	} else if err != nil {
		return nil, fmt.Errorf("key file %s %w", path, err)
	}
	entries, err := parseKeyFile(bytes.NewReader(b), secret)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return entries, nil
}

// readRegular reads the regular file at path whole, as the key file is read:
// opened without blocking, refused unless regular (see openRegular), and
// refused when longer than limit bytes (see readBounded). It returns the
// mode of the file it read. An error wrapping a syscall.Errno is one of
// reading; the others say what the file is, to follow its path.
func readRegular(path string, limit int64) ([]byte, os.FileMode, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("cannot be read: %w", errors.Unwrap(err))
	}
	b, err := readBounded(f, limit)
	if err != nil {
		return nil, 0, err
	}
	return b, fi.Mode(), nil
}

// readBounded reads f to its end, and refuses it when it holds more than
// limit bytes: never more than limit+1 bytes are read, so a file that grows
// as it is read, or a huge one, costs no more memory than a file of the
// limit.
func readBounded(f *os.File, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", errors.Unwrap(err))
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("is longer than %d bytes; refusing it", limit)
	}
	return b, nil
}

// openRegular opens path for reading without blocking (see readKeyFile) and
// returns it only when it is a regular file.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", errors.Unwrap(err))
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot be read: %w", errors.Unwrap(err))
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("is not a regular file (its type is %s); refusing it", fileType(fi.Mode()))
	}
	return f, nil
}

// fileType names the type of a file that is not a regular one.
func fileType(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "not regular"
}

// validLabel reports whether s may be a caller label: 1 to 64 letters,
// digits, '.', '_' or '-', because it becomes a log field and a metric label.
func validLabel(s string) bool {
	return len(s) >= 1 && len(s) <= 64 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
}

// checkLabel says why label cannot be the label of a key file line, or
// returns nil: it is not a valid label (see validLabel), or it holds a
// digest's run of hex digits, as in "sha256 HEX", where a space in place of
// the colon would make the first word, six letters, a key, and the digest
// a label in every log line.
func checkLabel(label string) error {
	if !validLabel(label) {
		return errors.New("a label is 1 to 64 letters, digits, '.', '_' or '-'")
	}
	if holdsHexDigest(label) {
		return fmt.Errorf("a label holds no run of %d or more hex digits, as a digest does; a digest goes first, written sha256:HEX without a space (petstore hash-key prints the line)", minDigestHex)
	}
	return nil
}

// parseKeyFile reads one entry per line: a key, or "sha256:" and the hex
// digest of a key, then optionally a label, then optionally the attributes
// scopes=LIST (comma-separated scopes; without it, every scope) and
// expires=DATE (a date, meaning its first instant in UTC, or an RFC 3339
// time), each at most once. Blank lines and everything from a '#' that
// starts a word are ignored. A line that holds a character no one sees (see
// invisibleChar) is refused, comments included: what the file shows must be
// what the service reads. Errors name the line but never repeat its
// content, which may be a key. secret keys the entries' ids.
func parseKeyFile(r io.Reader, secret []byte) ([]keyEntry, error) {
	var entries []keyEntry
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		if err := checkVisible(sc.Text()); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:i]
				break
			}
		}
		if len(fields) == 0 {
			continue
		}
		e, err := parseKeyLine(fields, secret)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		e.source = fmt.Sprintf("line %d", n)
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line too long or unreadable: %v", err)
	}
	return entries, nil
}

// checkVisible refuses a key file line that holds a character no one sees
// (see invisibleChar). Such a character changes what the service reads
// without changing what the operator sees: a byte order mark before
// "sha256:" makes the digest's text a key of its own, and a zero-width
// space in a key makes another key. The error names the kind of character
// and its code point, never the text around it.
func checkVisible(line string) error {
	for i, r := range line {
		kind := invisibleChar(r, line[i:])
		switch {
		case kind == "":
		case r == '\uFEFF' && i == 0:
			return errors.New("starts with a byte order mark (U+FEFF), which some editors put at the start of a file; save the file as UTF-8 without a byte order mark")
		case r == utf8.RuneError:
			return fmt.Errorf("holds %s; save the file as UTF-8", kind)
		default:
			return fmt.Errorf("holds %s (U+%04X), which cannot be seen; a line holds only visible characters, spaces and tabs: retype it (an editor, a web page or a chat may have added the character)", kind, r)
		}
	}
	return nil
}

// invisibleChar names the kind of r, the character at the start of rest,
// when a key file may not hold it because it cannot be seen or is not text:
// a byte that is not UTF-8, a control character but the tab, a format
// character (Unicode category Cf: the byte order mark U+FEFF, the zero-width
// space U+200B, the word joiner U+2060, the bidirectional controls), a space
// but the ASCII one (U+00A0, U+2002, U+3000...), a line or paragraph
// separator, or another character Unicode says to draw as nothing (a
// variation selector, the Hangul filler U+3164). It returns "" for any other
// character. No key made by openssl rand, base64 or petstore keys new holds
// one of these, and a key that did could not be told by eye from the same
// key without it.
func invisibleChar(r rune, rest string) string {
	switch {
	case r == ' ' || r == '\t':
		return ""
	case r == utf8.RuneError:
		if _, size := utf8.DecodeRuneInString(rest); size == 1 {
			return "bytes that are not UTF-8"
		}
		return "" // U+FFFD itself, written out, is seen
	case r == '\uFEFF':
		return "a byte order mark"
	case unicode.IsControl(r):
		return "a control character"
	case unicode.Is(unicode.Cf, r):
		return "an invisible format character"
	case unicode.Is(unicode.Zs, r):
		return "a space other than the ASCII space"
	case unicode.In(r, unicode.Zl, unicode.Zp):
		return "a line or paragraph separator"
	case unicode.In(r, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point):
		return "an invisible character"
	}
	return ""
}

// checkListedKey refuses a key of PETSTORE_API_KEYS that cannot have been
// meant as one: a digest (which the variable would take as a key, its own
// text, while the key it stood for got 401), or a key that holds a
// character no one sees (see invisibleChar). Unlike the key file, the
// variable takes 64 hex digits as a key (openssl rand -hex 32): it holds
// keys only, and refusing them would lock deployments out at an upgrade.
// The error never repeats the key.
func checkListedKey(key string) error {
	if readsAsDigest(key) {
		return fmt.Errorf("reads as a digest (a colon, then %d or more hex digits), which this variable would take as a key itself; it holds keys only: list a digest in the key file (-api-keys-file) as sha256:HEX", minDigestHex)
	}
	for i, r := range key {
		if kind := invisibleChar(r, key[i:]); kind != "" {
			return fmt.Errorf("holds %s (U+%04X), which cannot be seen; retype the key (an editor, a web page or a chat may have added the character)", kind, r)
		}
	}
	return nil
}

// minDigestHex is the number of hex digits of the shortest digest in common
// use (MD5's 32): a word that holds a colon and then at least as many reads
// as a digest, whatever the algorithm and the case of its name.
const minDigestHex = 32

// hexRun is the number of hex digits at the start of s.
func hexRun(s string) int {
	n := 0
	for n < len(s) && strings.IndexByte("0123456789abcdefABCDEF", s[n]) >= 0 {
		n++
	}
	return n
}

// readsAsDigest reports whether word holds a colon followed by at least
// minDigestHex hex digits: SHA256:HEX, sha-256:HEX, sha512:HEX, and a
// digest in quotes all do. Keys made by openssl rand, base64 or petstore
// keys new never hold a colon.
func readsAsDigest(word string) bool {
	for i := range len(word) {
		if word[i] == ':' && hexRun(word[i+1:]) >= minDigestHex {
			return true
		}
	}
	return false
}

// holdsHexDigest reports whether s holds a run of at least minDigestHex
// hex digits anywhere.
func holdsHexDigest(s string) bool {
	for i := range len(s) {
		if hexRun(s[i:]) >= minDigestHex {
			return true
		}
	}
	return false
}

// keyLineForm is the form of a key file line, for the errors that say a
// line does not have it.
const keyLineForm = "KEY or sha256:HEX, then an optional label, then optional attributes scopes=LIST and expires=DATE"

// parseKeyLine makes the entry of one key file line, split into its words.
// No error repeats a word of the line: the first one may be a key.
func parseKeyLine(fields []string, secret []byte) (keyEntry, error) {
	key, rest := fields[0], fields[1:]
	label := ""
	if len(rest) > 0 && !strings.Contains(rest[0], "=") {
		label, rest = rest[0], rest[1:]
		if err := checkLabel(label); err != nil {
			return keyEntry{}, err
		}
	}
	digest := sha256.Sum256([]byte(key))
	short := len(key) < minKeyLen
	// A digest written in any other way than sha256:HEX would be taken
	// as a key: its own text, which a key file that holds only digests
	// may show to every local user, would be accepted, and the key it
	// stood for refused.
	if hexDigest, ok := strings.CutPrefix(key, "sha256:"); ok {
		b, err := hex.DecodeString(hexDigest)
		if err != nil || len(b) != sha256.Size {
			return keyEntry{}, errors.New("after sha256: come the 64 hex digits of the key's SHA-256 digest (see petstore hash-key)")
		}
		digest, short = [sha256.Size]byte(b), false
	} else if readsAsDigest(key) {
		return keyEntry{}, fmt.Errorf("the first word reads as a digest (a colon, then %d or more hex digits), but only sha256: in lower case then 64 hex digits is read as one, so it would be taken as a key itself; write the digest as sha256:HEX (petstore hash-key prints the line), and list a key of this form by its digest", minDigestHex)
	} else if len(key) == 2*sha256.Size && hexRun(key) == len(key) {
		return keyEntry{}, errors.New("the first word is 64 hex digits, as a SHA-256 digest is, without sha256: before it, so it would be taken as a key itself; for a digest, write sha256: before it; for a key of 64 hex digits, list its digest instead (printf %s \"$KEY\" | petstore hash-key)")
	} else if strings.HasPrefix(key, pskPrefix) && !validPSK(key) {
		// Such a key could never be accepted (see requireKey): it was
		// mistyped or cut when it was copied.
		return keyEntry{}, fmt.Errorf("the key starts with %s but its checksum does not match (mistyped or cut?); paste it again, or use the line petstore keys new printed", pskPrefix)
	}
	e := newKeyEntry(secret, digest, label)
	e.short = short
	seen := map[string]bool{}
	for _, attr := range rest {
		name, value, ok := strings.Cut(attr, "=")
		if !ok {
			return keyEntry{}, fmt.Errorf("expected %s, and nothing more", keyLineForm)
		}
		if (name == "scopes" || name == "expires") && seen[name] {
			// Only a known name is repeated in the message: the
			// other words of a line are never echoed.
			return keyEntry{}, fmt.Errorf("the attribute %s= is given twice", name)
		}
		seen[name] = true
		switch name {
		case "scopes":
			scopes, err := parseScopes(value)
			if err != nil {
				return keyEntry{}, err
			}
			e.scopes = scopes
		case "expires":
			t, err := parseExpiry(value)
			if err != nil {
				return keyEntry{}, err
			}
			e.expires = t
		default:
			return keyEntry{}, fmt.Errorf("unknown attribute (the attributes are scopes= and expires=); expected %s", keyLineForm)
		}
	}
	return e, nil
}

// earliestExpiryYear is the first year an expiry may fall in. An earlier
// one is a placeholder or a slip, never a plan: 0001-01-01 is Go's zero time,
// which the service reads as "never expires", and 1970-01-01 the Unix epoch.
const earliestExpiryYear = 2000

// errExpiryTooEarly is parseExpiry's answer to an expiry before
// earliestExpiryYear, which petstore keys new also gives.
var errExpiryTooEarly = fmt.Errorf("an expiry before %d-01-01 is no expiry (0001-01-01 is the zero time, 1970-01-01 the Unix epoch); for a key that never expires, give no expiry", earliestExpiryYear)

// parseExpiry reads the value of expires=: a date (2027-03-01), which means
// the first instant of that day in UTC, so that the key is not accepted on
// that day; or an RFC 3339 time (2027-03-01T12:00:00Z), converted to UTC.
// An instant before earliestExpiryYear (UTC) is refused: the zero time
// would otherwise mean that the key never expires.
func parseExpiry(value string) (time.Time, error) {
	t, err := time.Parse(time.DateOnly, value)
	if err != nil {
		if t, err = time.Parse(time.RFC3339, value); err != nil {
			return time.Time{}, errors.New("expires= takes a date (2027-03-01, UTC) or an RFC 3339 time (2027-03-01T12:00:00Z)")
		}
		t = t.UTC()
	}
	if t.Year() < earliestExpiryYear {
		return time.Time{}, errExpiryTooEarly
	}
	return t, nil
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

// A key made by `petstore keys new` is recognisable, as GitHub's and
// Stripe's are, so that secret scanners find a leaked one: pskPrefix, the
// 43 URL-safe base64 characters of 256 random bits (generateKey), then a
// checksum of both, so that a scanner, and the service before any lookup,
// tells a mistyped key from one that was never issued.
const (
	pskPrefix      = "psk_"
	pskBodyLen     = 43
	pskChecksumLen = 6 // a CRC-32 in URL-safe base64
	pskLen         = len(pskPrefix) + pskBodyLen + pskChecksumLen
)

// newPSK returns a fresh key of the psk_ form.
func newPSK() string {
	body := generateKey()
	return pskPrefix + body + pskChecksum(body)
}

// pskChecksum is the checksum of a psk_ key's random part: its prefix and
// random part's CRC-32 (which catches every change of one character, and
// the swap of two), big-endian, in URL-safe base64.
func pskChecksum(body string) string {
	return base64.RawURLEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE([]byte(pskPrefix+body))))
}

// validPSK reports whether key has the psk_ form and its checksum matches.
func validPSK(key string) bool {
	if len(key) != pskLen || !strings.HasPrefix(key, pskPrefix) {
		return false
	}
	rest := key[len(pskPrefix):]
	if strings.Trim(rest, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return false
	}
	return pskChecksum(rest[:pskBodyLen]) == rest[pskBodyLen:]
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
	now      func() time.Time    // the clock that keys expire by
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
		guard.throttled(w, r, log, wait)
		return
	}
	guard.failures(e.Code)
	if wwwAuthenticate != "" {
		w.Header().Set("WWW-Authenticate", wwwAuthenticate)
	}
	writeError(w, r, log, e)
}

// throttled answers 429 to a request from an address that has failed
// authentication too often, and must wait before it is answered again.
func (guard authGuard) throttled(w http.ResponseWriter, r *http.Request, log *slog.Logger, wait time.Duration) {
	guard.failures("throttled")
	seconds := retryAfterSeconds(wait)
	w.Header().Set("Retry-After", strconv.Itoa(seconds))
	writeError(w, r, log, errorf(codeRateLimited, "too many requests without a valid API key came from your address; retry after %d s with a valid key", seconds))
}

// admit passes a request whose caller is entry on to next, with the key's
// identity and scopes where keyIdentity and callerScopes find them, and its
// label recorded for the access log and metrics. Inside observe they go
// into the request's info, which costs no copy of the request; outside it,
// into context values.
func admit(w http.ResponseWriter, r *http.Request, entry keyEntry, next http.Handler) {
	if info := requestInfoFrom(r.Context()); info != nil {
		info.caller = entry.label
		info.keyID, info.scopes, info.keyed = entry.id, entry.scopes, true
		next.ServeHTTP(w, r)
		return
	}
	ctx := context.WithValue(r.Context(), keyIdentityKey{}, entry.id)
	ctx = context.WithValue(ctx, callerScopesKey{}, entry.scopes)
	next.ServeHTTP(w, r.WithContext(ctx))
}

// requireKey lets a request through to next only when it carries one of the
// keys of kr, not expired. It runs before anything else looks at the
// request, so a caller without a key learns nothing (not even whether a pet
// exists, nor which scope an operation needs). The key is never logged nor
// echoed back; the caller's label is recorded for the access log and
// metrics, and its identity and scopes go in the request's context (see
// keyIdentity and callerScopes). A request without a valid key is answered
// 401, or 429 once its address has failed too often (see authThrottle),
// and is marked so that the access log samples such lines.
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
		switch {
		case header == "":
			// RFC 6750, section 3: no error attribute when the client sent
			// no credentials at all.
			refuse(errorf(codeUnauthorized, "missing API key; send the header Authorization: Bearer <API key>"), `Bearer realm="petstore"`)
			return
		case !isBearer || token == "":
			refuse(errorf(codeUnauthorized, "the Authorization header holds no bearer key; send the header Authorization: Bearer <API key>"), `Bearer realm="petstore"`)
			return
		case strings.HasPrefix(token, pskPrefix) && !validPSK(token):
			// Its checksum says it was never issued: no key is looked up.
			refuse(errorf(codeUnauthorized, "the API key in the Authorization header is not valid: it starts with %s but its checksum does not match, so it was mistyped or cut; copy it again", pskPrefix), `Bearer realm="petstore", error="invalid_token"`)
			return
		}
		entry, ok := kr.keys().match(token)
		switch {
		case !ok:
			refuse(errorf(codeUnauthorized, "the API key in the Authorization header is not valid; check the key you were given, or ask the operator for a new one"), `Bearer realm="petstore", error="invalid_token"`)
			return
		case entry.expired(guard.now()):
			// Checked on every request, so that a key stops working when it
			// expires, without a reload.
			refuse(errorf(codeUnauthorized, "the API key has expired (at %s); ask the operator for a new one", entry.expires.Format(time.RFC3339)), `Bearer error="invalid_token", error_description="the key has expired"`)
			return
		}
		admit(w, r, entry, next)
	})
}

// requireScope lets a request through to next only when its key (see
// requireKey, which must run first) holds need. Otherwise it answers 403
// insufficient_scope (see writeInsufficientScope). A 403 comes from a valid
// key, so it is no failed guess: it does not count against the address (see
// authThrottle).
func requireScope(need scope, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if callerScopes(r.Context()).has(need) {
			next.ServeHTTP(w, r)
			return
		}
		writeInsufficientScope(w, r, log, need)
	})
}
