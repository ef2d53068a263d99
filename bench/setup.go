package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite"
)

// buildInTempDir makes a temporary directory named after prefix and builds
// the service of the working tree into it, as DIR/petstore. remove deletes
// the directory, unless keep, which names it on stderr instead.
func buildInTempDir(ctx context.Context, prefix string, keep bool) (dir, bin string, remove func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	if keep {
		fmt.Fprintf(os.Stderr, "keeping %s\n", dir)
		remove = func() {}
	}
	bin = filepath.Join(dir, "petstore")
	if err := buildService(ctx, ".", bin); err != nil {
		remove()
		return "", "", nil, err
	}
	return dir, bin, remove, nil
}

// buildTimeout bounds each step of building a binary (git archive, tar, go
// build): a build that needs the module proxy and cannot reach it fails
// instead of holding the benchmark.
const buildTimeout = 10 * time.Minute

// buildService builds the package in srcDir into out as the build command of
// docs/operations.md does (without CGO, with -trimpath), but for the VCS stamp, which an
// extracted revision has no repository to take from: so the binary built from
// the working tree and one built from a revision differ only by their code.
func buildService(ctx context.Context, srcDir, out string) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, ".")
	build.Dir = srcDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %v\n%s", srcDir, err, out)
	}
	return nil
}

// resolveRevision turns rev (a hash, tag or branch of the repository in the
// current directory) into the full hash of its commit, so that the report
// names exactly what it measured.
func resolveRevision(ctx context.Context, rev string) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") {
		// git would read a leading "-" as an option.
		return "", fmt.Errorf("-baseline: %q is not a revision", rev)
	}
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("-baseline: %q is not a commit of this repository", rev)
	}
	return strings.TrimSpace(string(out)), nil
}

// buildRevision builds the service as it was at commit into out: git archive
// writes the commit's tree (from the local repository, not the network) and
// tar extracts it into srcDir, where it is built like the current binary.
func buildRevision(ctx context.Context, commit, srcDir, out string) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	if err := os.MkdirAll(srcDir, 0o755); err != nil {
		return err
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	extract := exec.CommandContext(ctx, "tar", "-x", "-C", srcDir)
	var archiveErr, extractErr bytes.Buffer
	archive.Stderr = &archiveErr
	extract.Stderr = &extractErr
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	extract.Stdin = pipe
	if err := archive.Start(); err != nil {
		return err
	}
	if err := extract.Run(); err != nil {
		archive.Wait()
		return fmt.Errorf("tar -x: %v\n%s", err, extractErr.Bytes())
	}
	if err := archive.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v\n%s", commit, err, archiveErr.Bytes())
	}
	return buildService(ctx, srcDir, out)
}

// workingTree describes what the current binary is built from: the commit
// at HEAD, and whether the working tree differs from it.
func workingTree(ctx context.Context) string {
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "the working tree"
	}
	desc := "HEAD " + strings.TrimSpace(string(head))
	if status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(status) > 0 {
		desc += " with uncommitted changes"
	}
	return desc
}

// createDatabase makes a database of n pets at db (a SQLite file, or an
// empty PostgreSQL database's URL) for the binary bin. The binary creates the
// schema itself, as its own start-up does it (its migrations, or an older
// release's schema): a binary refuses a database that a newer one has
// migrated, so each binary gets a database whose schema it made. It is
// started once on the empty database and stopped by SIGTERM; then loadPets
// or loadPostgresPets fills the table.
func createDatabase(ctx context.Context, bin, db string, n int64) error {
	postgres := strings.HasPrefix(db, "postgres://")
	name := filepath.Base(db)
	if postgres {
		name, _, _ = strings.Cut(name, "?")
	} else if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s exists already", db)
	}
	// A few log lines at most (no request reaches it): kept, to explain a
	// refusal.
	var logs bytes.Buffer
	cmd := serviceCommand(ctx, bin, db)
	cmd.Stderr = &logs
	p, err := startProcess(cmd, "petstore listening on ")
	if err != nil {
		return fmt.Errorf("create the schema of %s with %s: %w\n%s", name, bin, err, logs.Bytes())
	}
	if err := p.stop(); err != nil {
		return fmt.Errorf("create the schema of %s with %s: stop: %w\n%s", name, bin, err, logs.Bytes())
	}
	if postgres {
		if err := loadPostgresPets(ctx, db, n); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	return loadPets(db, n)
}

// loadPets inserts n pets directly into the pets table of the database at
// path (whose schema the service has made), in one transaction: a recursive
// CTE feeds INSERT ... SELECT, so no row crosses from Go to SQLite. Names,
// categories and statuses vary with the id.
func loadPets(path string, n int64) error {
	// synchronous(OFF): the file is thrown away if the machine fails during
	// the load, so the load need not wait for the disk.
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	res, err := db.Exec(`
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO pets (name, category_id, status)
		SELECT 'pet-' || i, i % 10 + 1, CASE i % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'pending' ELSE 'sold' END
		FROM seq`, n)
	if err != nil {
		return fmt.Errorf("insert %d pets into %s: %w", n, filepath.Base(path), err)
	}
	if got, err := res.RowsAffected(); err != nil || got != n {
		return fmt.Errorf("insert %d pets into %s: %d rows inserted (%v)", n, filepath.Base(path), got, err)
	}
	_, err = db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}
