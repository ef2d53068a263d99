package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
)

// generatedKeySuffix names the file that keeps the zero-setup key of a
// database file: petstore.db's key is in petstore.db.api-key, beside the data
// it guards.
const generatedKeySuffix = ".api-key"

// generatedKeyForm is what the key file holds: one key as generateKey makes
// it, and optionally the newline that ends the line. Anything else is not a
// file this service wrote, and is refused rather than trusted.
var generatedKeyForm = regexp.MustCompile(`^[A-Za-z0-9_-]{43}\n?$`)

// generatedKey is the key the service accepts when no key is configured.
type generatedKey struct {
	key     string
	file    string // where it is kept; "" for a :memory: database
	created bool   // the file was written by this start
}

// loadGeneratedKey returns the zero-setup key for the database at dbPath. A
// database in memory gets a fresh key, which lasts as long as its data. A
// database file keeps its key in a file beside it, created on the first
// start with mode 0600, so that scripts and idempotent replays (scoped by
// key) keep working across restarts. A key file that exists but cannot be
// trusted (readable by others, owned by another user, not a regular file, not
// holding a key) is a configuration error: a new key would silently lock out
// every client of the old one.
func loadGeneratedKey(dbPath string) (generatedKey, error) {
	if dbPath == memoryDB {
		return generatedKey{key: generateKey(), created: true}, nil
	}
	file := dbPath + generatedKeySuffix
	key, err := readGeneratedKey(file)
	if errors.Is(err, os.ErrNotExist) {
		return createGeneratedKey(file)
	}
	if err != nil {
		return generatedKey{}, &configError{file, err.Error()}
	}
	return generatedKey{key: key, file: file}, nil
}

// readGeneratedKey reads the key kept in file, checking first that only its
// owner, this process's user, can read it. It returns an error wrapping
// os.ErrNotExist when there is no file.
func readGeneratedKey(file string) (string, error) {
	// O_NOFOLLOW: a symbolic link in place of the file could point anywhere,
	// including at a key someone else chose.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("cannot read the generated API key file (%v); delete it to have a new key generated, or configure keys with PETSTORE_API_KEYS or -api-keys-file", errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("cannot read the generated API key file: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return "", errors.New("is not a regular file, so it cannot hold the generated API key; move it away to have a new key generated")
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("has mode %04o, but it holds an API key, so only its owner may read or write it: chmod 600 the file (or delete it to have a new key generated)", perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("is owned by user id %d, not by the user this service runs as (%d), so another user could have chosen the key: chown the file to this user (or delete it to have a new key generated)", st.Uid, os.Geteuid())
	}
	// A generated key is 44 bytes with its newline; read a little more to
	// tell a longer file apart, but never a large file whole.
	b, err := io.ReadAll(io.LimitReader(f, 128))
	if err != nil {
		return "", fmt.Errorf("cannot read the generated API key file: %v", err)
	}
	if len(b) == 0 {
		return "", errors.New("is empty; delete it to have a new key generated")
	}
	if !generatedKeyForm.Match(b) {
		// The content is never repeated: it may be a key.
		return "", errors.New("does not hold a key as this service generates it (43 URL-safe base64 characters on one line); delete it to have a new key generated, or configure keys with PETSTORE_API_KEYS or -api-keys-file")
	}
	return string(b[:43]), nil
}

// createGeneratedKey generates a key and stores it in file with mode 0600.
// The key is written to a temporary file, synced, then linked into place, so
// that a crash leaves either no key file or a complete one, and a second
// process starting at the same moment cannot overwrite the first one's key:
// the loser of the race reads the winner's key instead.
func createGeneratedKey(file string) (generatedKey, error) {
	dir := filepath.Dir(file)
	fail := func(err error) (generatedKey, error) {
		return generatedKey{}, &configError{file, fmt.Sprintf("cannot create the generated API key file: %v", err)}
	}
	tmp, err := os.CreateTemp(dir, ".petstore-api-key-*") // created with mode 0600
	if err != nil {
		return fail(errors.Unwrap(err))
	}
	defer os.Remove(tmp.Name())
	key := generateKey()
	if _, err := io.WriteString(tmp, key+"\n"); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Link(tmp.Name(), file); errors.Is(err, os.ErrExist) {
		key, err := readGeneratedKey(file)
		if err != nil {
			return generatedKey{}, &configError{file, err.Error()}
		}
		return generatedKey{key: key, file: file}, nil
	} else if err != nil {
		return fail(errors.Unwrap(err))
	}
	// The new name must survive a power cut too, or the next start would
	// generate another key.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return generatedKey{key: key, file: file, created: true}, nil
}

// announceGeneratedKey tells the operator which key the service accepts.
// With text logs (a person at a terminal) the key itself is printed on
// stderr, outside the log's records. With JSON logs stderr is a structured
// log that ends up collected and stored, so only the file's path is logged;
// config.check refuses JSON logs with a :memory: database and no key, where
// there would be no file to read the key from.
func announceGeneratedKey(gk generatedKey, logFormat string, log *slog.Logger, stderr io.Writer) {
	where := gk.file
	if abs, err := filepath.Abs(where); err == nil && where != "" {
		where = abs
	}
	if logFormat == "json" {
		log.Warn("no API key is configured: the service accepts only the generated key kept in the file (the key is never logged; read it from the file, or configure keys with PETSTORE_API_KEYS or -api-keys-file)",
			"file", where, "created", gk.created)
		return
	}
	var origin string
	switch {
	case gk.file == "":
		origin = "this run accepts only this generated API key, which lasts until the process ends (the database is in memory)"
	case gk.created:
		origin = fmt.Sprintf("the service accepts only this API key, generated now and kept in %s for the next starts (delete the file for a new key)", where)
	default:
		origin = fmt.Sprintf("the service accepts only this API key, generated on a first start and kept in %s (delete the file for a new key)", where)
	}
	fmt.Fprintf(stderr, "WARNING: no API key is configured (PETSTORE_API_KEYS, -api-keys-file), so %s:\n\n    %s\n\n"+
		"Send it as 'Authorization: Bearer <key>'. Configure your own keys to use those instead.\n\n", origin, gk.key)
}
