package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The service's secret keys the HMAC that turns an API key's digest into the
// key's identity (see keyEntry): what the idempotency records in the
// database are scoped by, and what a caller without a label is named by in
// logs and metrics. It is kept outside the database, so that a copy of the
// database (a backup, a stolen disk) does not let anyone test guesses of a
// key against it. Every process serving one database must use the same
// secret: replicas are given the same file (-secret-file).

// maxSecretFileLen bounds what is read of a secret file.
const maxSecretFileLen = 4096

// defaultSecretFile is where the secret is kept when no -secret-file is
// given: next to the database file, which it belongs with.
func defaultSecretFile(dbPath string) string { return dbPath + ".secret" }

// loadSecret returns the service's secret. A file given as -secret-file
// must exist: processes that share a database must share it, and a secret
// one of them made up would silently differ from the others'. Without one,
// the secret is the file next to the database, made with a fresh random
// secret on the first start; an in-memory database, which lives as long as
// its process, gets a fresh secret of its own.
func loadSecret(file, dbPath string) ([]byte, error) {
	if file == "" {
		if dbPath == memoryDB {
			return []byte(generateKey()), nil
		}
		file = defaultSecretFile(dbPath)
		if err := createSecretFile(file); err != nil {
			return nil, fmt.Errorf("cannot create the secret file %s: %v", file, err)
		}
	}
	return readSecret(file)
}

// readSecret reads the secret kept in file, refusing a file that others
// could read, write or replace.
func readSecret(file string) ([]byte, error) {
	f, err := openRegular(file)
	if err != nil {
		if errors.As(err, new(syscall.Errno)) {
			return nil, fmt.Errorf("cannot read the secret file %s: %v", file, errors.Unwrap(err))
		}
		return nil, fmt.Errorf("the secret file %s %w", file, err)
	}
	defer f.Close()
	// Its group may read it (a service's group), never write it; other
	// users may do neither: with the secret, the identities stored with the
	// idempotency records can be tested against guessed keys offline. Nor
	// may another user own it or a directory above it (see
	// checkPrivateFile), who could replace it.
	if err := checkPrivateFile(file, f, 0o022); err != nil {
		return nil, fmt.Errorf("the secret file %s %w; refusing it", file, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read the secret file %s: %v", file, errors.Unwrap(err))
	}
	if perm := fi.Mode().Perm(); perm&0o004 != 0 {
		return nil, fmt.Errorf("the secret file %s can be read by other users (mode %04o); refusing it (chmod o-r %s)", file, perm, file)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileLen+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the secret file %s: %v", file, err)
	}
	secret := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxSecretFileLen:
		return nil, fmt.Errorf("the secret file %s is longer than %d bytes; it holds one secret, such as the output of: openssl rand -base64 32", file, maxSecretFileLen)
	case len(secret) < minSecretLen:
		return nil, fmt.Errorf("the secret in %s has %d characters; at least %d are needed (make one with: openssl rand -base64 32)", file, len(secret), minSecretLen)
	}
	return []byte(secret), nil
}

// createSecretFile writes a fresh random secret to path, mode 0600, unless
// a file is there already. The secret is written whole to a temporary file
// and then linked under its name, which never replaces a file: of two
// processes starting at the same moment, both read the one secret that was
// linked first, never a half-written one.
func createSecretFile(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".petstore-secret-*") // mode 0600
	if err != nil {
		return errors.Unwrap(err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.WriteString(tmp, generateKey()+"\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return syncPath(dir)
}
