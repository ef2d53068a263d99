package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// One process serves a SQLite file: each keeps what it read in memory (the
// tail of recent events its streams read, the response caches, the leases of
// its webhook dispatcher), and would not see another's writes. So a serving
// process holds an exclusive lock on a file beside the database, PATH.lock,
// for as long as it serves, and a second one is refused at start. The lock is
// flock(2)'s, which the kernel drops with the last descriptor of the process
// that took it, however it ends: a SIGKILL or a crash never leaves a stale
// lock, and a restart takes it at once. It is advisory: `petstore backup`,
// and `petstore copy` reading its -from, open the database without it and
// read a live file as before. The lock file is never removed (removing it
// while the lock is held would let a second process lock a new file of the
// same name); it names the process holding it, for the refusal's message.

// lockSuffix ends the name of a SQLite database's lock file.
const lockSuffix = ".lock"

// databaseLock is the lock on a SQLite database that the process holds;
// nil for a database that takes none (in memory, PostgreSQL).
type databaseLock struct {
	f *os.File
}

// lockFileOf is the lock file of the SQLite database at path: beside the
// file itself, its symbolic links resolved, so that two names of one file
// share one lock. A database not created yet is where path says.
func lockFileOf(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return path + lockSuffix
}

// heldError says that another process holds the lock of a database.
type heldError struct {
	db, lockFile string
	holder       lockHolder // zero when the holder has not written itself yet
}

func (e *heldError) Error() string {
	who := "another process"
	if e.holder.pid > 0 {
		who = "process " + strconv.Itoa(e.holder.pid)
		if host, _ := os.Hostname(); e.holder.host != "" && e.holder.host != host {
			who += " on the host " + e.holder.host
		}
		if e.holder.started != "" {
			who += " (started at " + e.holder.started + ")"
		}
	}
	return fmt.Sprintf("%s is served by %s, which holds its lock file %s: one process serves a SQLite file, since each keeps what it read in memory and would not see the other's writes; stop that process first, or serve several from PostgreSQL (docs/scaling.md)", e.db, who, e.lockFile)
}

// lockDatabase takes the lock of the SQLite database at path, without
// waiting: a *heldError when another process holds it. The database's
// directory is checked first (see checkDBPath), so that a path that cannot
// be a database is refused as openStore refuses it. An in-memory database
// and PostgreSQL take no lock (nil).
func lockDatabase(path string) (*databaseLock, error) {
	if path == memoryDB || isPostgresURL(path) {
		return nil, nil
	}
	if err := checkDBPath(path); err != nil {
		return nil, err
	}
	name := lockFileOf(path)
	f, err := openLockFile(name)
	if err != nil {
		return nil, err
	}
	held, err := lockFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot lock the lock file %s: %v", name, err)
	}
	if !held {
		holder := readLockHolder(f)
		f.Close()
		return nil, &heldError{db: path, lockFile: name, holder: holder}
	}
	// Written once the lock is held: only its holder writes the file.
	host, _ := os.Hostname()
	record := lockHolder{pid: os.Getpid(), host: host, started: time.Now().UTC().Format(time.RFC3339)}.String()
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(record), 0) // the holder's name helps a refusal's message; the lock holds without it
	}
	return &databaseLock{f: f}, nil
}

// openLockFile opens the lock file at name, created if missing, for
// reading and writing. It opens without blocking and keeps only a regular
// file, as the key file is read: a FIFO in its place holds nothing up.
func openLockFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open the lock file %s: %v", name, errors.Unwrap(err))
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("the lock file %s is not a regular file; move it away", name)
	}
	return f, nil
}

// release lets another process serve the database. The file is emptied
// first, so that it never names a process that no longer holds it (but
// after a SIGKILL, which the kernel's release follows), and the lock is
// dropped before the file closes (see unlockFile).
func (l *databaseLock) release() {
	if l == nil {
		return
	}
	l.f.Truncate(0)
	unlockFile(l.f)
	l.f.Close()
}

// lockHolder is the process that holds a lock, as its lock file says:
// "pid=1234 host=shop-1 started=2026-11-28T15:36:23Z".
type lockHolder struct {
	pid           int
	host, started string
}

func (h lockHolder) String() string {
	return fmt.Sprintf("pid=%d host=%s started=%s\n", h.pid, h.host, h.started)
}

// readLockHolder reads the holder a lock file names; the zero holder when
// it names none (its holder has not written it yet).
func readLockHolder(f *os.File) lockHolder {
	b := make([]byte, 512)
	n, _ := f.ReadAt(b, 0)
	var h lockHolder
	for field := range strings.FieldsSeq(string(b[:n])) {
		key, value, _ := strings.Cut(field, "=")
		switch key {
		case "pid":
			h.pid, _ = strconv.Atoi(value)
		case "host":
			h.host = value
		case "started":
			h.started = value
		}
	}
	return h
}
