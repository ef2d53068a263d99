package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// runBackup is `petstore backup -db FILE OUT.db`: it writes a consistent copy
// of a database, live or not, to OUT.db, which must not exist yet.
func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("petstore backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", envOr(getenv, envName("db"), "petstore.db"), "the database to copy (env PETSTORE_DB)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: petstore backup -db FILE OUT.db\n\nCopies FILE consistently to OUT.db while the service may keep serving.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &configError{"backup", err.Error()}
	}
	if fs.NArg() != 1 {
		return &configError{"backup", "name exactly one output file: petstore backup -db FILE OUT.db"}
	}
	out := fs.Arg(0)
	if err := backupDatabase(ctx, *db, out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s\n", *db, out)
	return nil
}

// envOr returns the variable name, or def when it is unset or empty.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// backupDatabase copies the database at src to dst with VACUUM INTO, which
// reads one consistent snapshot (in WAL mode, without blocking the service's
// writer) and writes a compact copy. The copy is written in a private
// directory made next to dst, checked, made durable, and only then given the
// name dst by a hard link, which never replaces an existing file and never
// follows a symbolic link: dst is created exactly as named, or not at all,
// and a copy that failed half-way never appears under it.
func backupDatabase(ctx context.Context, src, dst string) error {
	if isPostgresURL(src) {
		return &configError{settingName("db"), fmt.Sprintf("%s is a PostgreSQL database; back it up with PostgreSQL's own tools, for example: pg_dump --format=custom --file=petstore.dump '%s' (restore with pg_restore)", redactDB(src), redactDB(src))}
	}
	if src == memoryDB {
		return &configError{settingName("db"), "an in-memory database lives only inside its process and cannot be backed up"}
	}
	if fi, err := os.Stat(src); err != nil || !fi.Mode().IsRegular() {
		return &configError{settingName("db"), fmt.Sprintf("%q is not an existing database file", src)}
	}
	if strings.ContainsAny(src, "?#") {
		return &configError{settingName("db"), fmt.Sprintf("%q: the path must not contain '?' or '#'", src)}
	}
	// Lstat: a symbolic link, dangling or not, is a name already taken.
	if _, err := os.Lstat(dst); err == nil {
		return &configError{"backup", fmt.Sprintf("%s already exists; refusing to overwrite it", dst)}
	}
	dir := filepath.Dir(dst)
	// Made with mode 0700 under a random name: nobody else can place a
	// file or a link inside it while SQLite writes the copy there.
	work, err := os.MkdirTemp(dir, ".petstore-backup-*")
	if err != nil {
		return &configError{"backup", fmt.Sprintf("cannot create files in directory %q: %v", dir, errors.Unwrap(err))}
	}
	defer os.RemoveAll(work)
	// Absolute, so that SQLite never reads the name as a "file:" URI.
	tmp, err := filepath.Abs(filepath.Join(work, "backup.db"))
	if err != nil {
		return err
	}
	// Created before SQLite writes it, so that the copy is 0600 from the
	// first byte: it holds everything the database holds.
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	if err := vacuumInto(ctx, src, tmp); err != nil {
		return err
	}
	if err := os.Link(tmp, dst); err != nil {
		if errors.Is(err, os.ErrExist) {
			return &configError{"backup", fmt.Sprintf("%s already exists; refusing to overwrite it", dst)}
		}
		return fmt.Errorf("name the copy %s: %w", dst, err)
	}
	return syncPath(dir)
}

// vacuumInto runs VACUUM INTO, checks the copy and makes it durable.
func vacuumInto(ctx context.Context, src, dst string) error {
	// Not query_only: SQLite counts writing the copy as a write.
	db, err := sql.Open("sqlite", sqliteFileName(src)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	cp, err := sql.Open("sqlite", dst+"?_pragma=query_only(1)")
	if err != nil {
		return err
	}
	defer cp.Close()
	var check string
	if err := cp.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&check); err != nil || check != "ok" {
		return fmt.Errorf("the copy of %s fails its integrity check (%q, %v)", src, check, err)
	}
	// VACUUM INTO does not fsync its output: the copy is made durable before
	// it is named, and the name before the backup is said to be done.
	return syncPath(dst)
}
