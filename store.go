package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite" // registers the pure-Go "sqlite" driver; the binary stays CGO-free
	sqlite3 "modernc.org/sqlite/lib"
)

// notFoundError is what the store returns when no row has the requested id.
// errors.go turns it into a 404.
type notFoundError struct {
	what string // "pet"
	id   int64
}

func (e *notFoundError) Error() string { return fmt.Sprintf("no %s has id %d", e.what, e.id) }

// refusal is a write that the data refused. Each refusal is a type of its
// own, declared beside the store file of the resource whose write it
// refuses (the pets' in store_pets.go, the orders' in store_orders.go), and
// holds only what that refusal concerns, in the store's terms: ids and
// statuses. errors.go words each for the client, in one place.
type refusal interface {
	error
	// isRefusal marks the store's refusals; it does nothing.
	isRefusal()
}

// errUnwritable marks a write that failed because the database cannot be
// written at the moment (disk full, file or file system read-only, I/O
// error), as opposed to a bug: the request was fine and may succeed later,
// and nothing of it was stored. errors.go answers it with 503.
var errUnwritable = errors.New("the database cannot be written")

// memoryDB is the -db value that asks for an ephemeral in-memory database.
const memoryDB = ":memory:"

// connParams are the pragmas every connection gets. Each one is there for a
// reason:
//   - journal_mode(WAL): readers never block the writer and the writer never
//     blocks readers, so lists stay fast while pets are being added.
//   - synchronous(FULL): in WAL mode this fsyncs the log on every commit, so a
//     201 survives a power cut, not only a crash of the process (NORMAL would
//     lose the last commits on power loss).
//   - busy_timeout(5000): a connection that finds the file locked (by a
//     backup, or petstore copy reading it) waits up to 5 s instead of failing
//     at once.
//   - foreign_keys(1): SQLite does not enforce REFERENCES unless asked, per
//     connection; with it, no row can name a row that does not exist.
//   - _txlock=immediate: a write transaction takes the write lock when it
//     begins, so it can never fail half-way with SQLITE_BUSY on upgrade.
const connParams = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_txlock=immediate"

// errStoreClosed is what a write returns once Close has begun.
var errStoreClosed = errors.New("store is closed")

// store keeps the data in one SQLite file, or in a PostgreSQL database that
// replicas share (store_postgres.go). Its SQL is in the store_*.go files, one
// per concern; handlers never see SQL or a transaction.
//
// SQLite allows one writer at a time. Rather than let concurrent writers
// collide and fail with "database is locked", all writes go through one
// goroutine that owns a pool of exactly one connection (see write and
// writeLoop); reads use a separate pool, whose SQLite connections are
// query-only and run in parallel thanks to WAL. PostgreSQL keeps the same
// shape, each batch taking one advisory lock so that replicas' batches take
// turns too (writeLock).
type store struct {
	dialect dialect
	writer  *sql.DB
	reader  *sql.DB

	// The prepared statements, declared by each concern's file with the
	// SQL they run.
	petStmts     petStatements
	orderStmts   orderStatements
	eventStmts   eventStatements
	idemStmts    idempotencyStatements
	writeStmts   writeStatements
	webhookStmts webhookStatements
	acmeStmts    acmeStatements
	prepared     []*sql.Stmt // every statement above, to close
	// pages are, on PostgreSQL, the page statements with their LIMIT
	// written out (see store_pages.go).
	pages pageStatements

	// schemaFrom is the schema version the database had when opened, and
	// schemaVersion the one it has now (see migrate).
	schemaFrom, schemaVersion int

	// generations tell the response caches what a commit changed (see
	// http_cache.go).
	generations generations
	// events is the tail of the feed that the streams of this process
	// read, and the signal that wakes them (see store_events_tail.go).
	events *eventTail
	// now stamps the events; the writer reads it once per job.
	now func() time.Time
	// replica replicates the SQLite file (-replicate; nil without it),
	// set by replicate before the first write (store_replica.go).
	replica *replicator

	// background is the store's own goroutines besides the writer (the
	// PostgreSQL event listener), stopped by stopBackground.
	background     sync.WaitGroup
	stopBackground context.CancelFunc

	linger    linger // the writer's own: how long it waits for a batch's writers
	jobs      chan *writeJob
	quit      chan struct{} // closed by Close: the writer stops taking jobs
	stopped   chan struct{} // closed by the writer once it has stopped
	closeOnce sync.Once

	errors atomic.Uint64 // failed database operations, for the metrics
	// commits and committedWrites count the writer's committed batches and
	// the writes in them, for the metrics: their ratio is how many writes
	// shared each commit (and its fsync).
	commits, committedWrites atomic.Uint64
	// streamReads counts the reads of the events table for streams (see
	// streamEvents), for the metrics.
	streamReads atomic.Uint64
}

// openStore opens the database that db names and brings its schema up to
// date: a PostgreSQL URL (postgres:// or postgresql://, see
// store_postgres.go), or else a SQLite file, created if needed, or
// ":memory:" for an ephemeral one. maxConns bounds the connections to
// PostgreSQL (0: the default); SQLite sizes its pools itself.
func openStore(ctx context.Context, db string, maxConns int) (*store, error) {
	if isPostgresURL(db) {
		return openPostgres(ctx, db, maxConns)
	}
	return openSQLite(ctx, db, "")
}

// noAutoCheckpoint turns SQLite's automatic checkpoints off on every
// connection of a file that Litestream replicates (see replicate), in the
// connection string, so that a connection opened again has it too.
const noAutoCheckpoint = "&_pragma=wal_autocheckpoint(0)"

// openReplicatedSQLite opens the SQLite file at path for replication: its
// connections run no checkpoint of their own.
func openReplicatedSQLite(ctx context.Context, path string) (*store, error) {
	return openSQLite(ctx, path, noAutoCheckpoint)
}

// openSQLite opens (creating if needed) the SQLite file at path, with
// params added to every connection's.
func openSQLite(ctx context.Context, path, params string) (*store, error) {
	if err := checkDBPath(path); err != nil {
		return nil, err
	}
	if path != memoryDB {
		// SQLite creates a database with mode 0644, and its -wal and -shm
		// files with the database's mode: the catalogue and the
		// idempotency records would be readable by every local user. A
		// file created here first, 0600, is what SQLite then opens.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		switch {
		case err == nil:
			f.Close()
		case !errors.Is(err, os.ErrExist):
			return nil, err
		}
	}
	dsn := sqliteFileName(path) + "?" + connParams + params
	if path == memoryDB {
		// A plain ":memory:" database is private to one connection, so the
		// pool's connections would each see an empty database of their own.
		// SQLite's memdb VFS shares one in-memory database, by name, among
		// all connections of the process, with ordinary locking (WAL does not
		// apply, so the journal is in memory too). The random name keeps two
		// stores in one process apart; the database lives as long as one
		// connection to it is open.
		dsn = "file:/petstore-" + rand.Text() + "?vfs=memdb&" + connParams
	}
	writer, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	writer.SetMaxOpenConns(1)
	// The one writer connection is kept forever: reopening it would repeat
	// the pragmas and the WAL set-up for nothing (and, for :memory:, it is
	// what keeps the database alive).
	writer.SetConnMaxIdleTime(0)
	writer.SetConnMaxLifetime(0)

	reader, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		writer.Close()
		return nil, err
	}
	// Readers run in parallel under WAL; more connections than cores only
	// adds contention, and each one holds its own page cache: on 2 cores,
	// 2 readers serve as many requests as 4 with 9 MiB less peak RSS
	// (bench/, 1,000,000 pets).
	readers := max(2, runtime.GOMAXPROCS(0))
	reader.SetMaxOpenConns(readers)
	reader.SetMaxIdleConns(readers)
	return newStore(ctx, sqliteDialect, path, writer, reader)
}

// newStore migrates the database behind writer and reader, prepares the
// statements and starts the writer. It closes both pools if it fails.
func newStore(ctx context.Context, d dialect, name string, writer, reader *sql.DB) (*store, error) {
	s := &store{
		dialect: d,
		writer:  writer,
		reader:  reader,
		events:  newEventTail(d != postgresDialect),
		now:     time.Now,
		jobs:    make(chan *writeJob, maxBatch),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	close(s.stopped) // no writer yet: Close must not wait for one
	var err error
	if s.schemaFrom, s.schemaVersion, err = migrate(ctx, writer, d); err != nil {
		s.Close()
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.events.fedByWriter {
		// The writer about to start is the file's only one: from the
		// feed's end on, the tail holds every event, and a stream at the
		// end never reads the table.
		bounds, err := s.eventBounds(ctx)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.events.start(bounds.end)
	}
	s.stopped = make(chan struct{})
	go s.writeLoop()
	return s, nil
}

// statement is a statement to prepare: its SQL, the pool it runs on, and
// where the prepared statement goes: a **sql.Stmt, or, for a statement that
// writes a resource's rows, the funnel's *rowStatement or funnelStmt (see
// store_changes.go), which only the recording helpers run.
type statement struct {
	db    *sql.DB
	dst   any
	query string
}

// prepare compiles the statements once, so a request does not parse SQL.
// Each concern declares its own (statements methods in store_*.go and
// store_write.go).
func (s *store) prepare(ctx context.Context) error {
	for _, st := range slices.Concat(s.petStmts.statements(s), s.orderStmts.statements(s), s.eventStmts.statements(s),
		s.idemStmts.statements(s), s.writeStmts.statements(s), s.webhookStmts.statements(s), s.acmeStmts.statements(s)) {
		stmt, err := st.db.PrepareContext(ctx, s.dialect.sql(st.query))
		if err != nil {
			return fmt.Errorf("prepare %q: %w", st.query, err)
		}
		if err := st.place(stmt); err != nil {
			stmt.Close()
			return err
		}
		s.prepared = append(s.prepared, stmt)
		if s.dialect == postgresDialect && st.db == s.reader {
			s.pages.addPage(stmt, st.query)
		}
	}
	return nil
}

// prepareWantedValues prepares the statements of many rows that the last
// batch needed (see valuesInsert). Only the writer calls it, between
// batches; Close reads what it added once the writer has stopped.
func (s *store) prepareWantedValues() {
	for _, v := range []interface {
		prepareWanted(context.Context, dialect) ([]*sql.Stmt, error)
	}{&s.petStmts.insertRows, &s.eventStmts.insertRows} {
		stmts, err := v.prepareWanted(context.Background(), s.dialect)
		s.prepared = append(s.prepared, stmts...)
		if err != nil {
			s.failed("prepare a statement of many rows", err)
		}
	}
}

// Close stops the writer (a batch in progress finishes first; writes asked
// for afterwards fail with errStoreClosed), empties the response caches and
// closes both pools; the WAL is
// checkpointed when the last connection to the file closes. Calling it again
// does nothing more.
func (s *store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.stopped
		if s.stopBackground != nil {
			s.stopBackground()
		}
		s.background.Wait()
		s.generations.invalidateAll()
		err = s.closeDB()
		if s.replica != nil {
			// Litestream closes after the service's connections, its
			// last sync uploading what they committed.
			err = errors.Join(err, s.replica.close())
		}
	})
	return err
}

// closeDB closes the statements and both pools.
func (s *store) closeDB() error {
	s.pages.close()
	for _, stmt := range s.prepared {
		stmt.Close()
	}
	return errors.Join(s.reader.Close(), s.writer.Close())
}

// failed counts a failed database operation (not one a departed client
// cancelled: that is no fault of the database) and returns err wrapped with
// what was being done. On PostgreSQL it also marks what the error says:
// errUnwritable (a read-only database, a full disk), errDuplicateKey (a unique
// violation), errUnavailable (the database cannot be reached).
func (s *store) failed(what string, err error) error {
	if !errors.Is(err, context.Canceled) {
		s.errors.Add(1)
	}
	err = fmt.Errorf("%s: %w", what, err)
	if s.dialect != postgresDialect {
		return err
	}
	switch {
	case postgresUnwritable(err):
		return fmt.Errorf("%w: %w", errUnwritable, err)
	case postgresDuplicate(err):
		return fmt.Errorf("%w: %w", errDuplicateKey, err)
	case postgresUnavailable(err):
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return err
}

// errorCount is how many database operations have failed since start-up.
func (s *store) errorCount() uint64 { return s.errors.Load() }

// ping checks that the database answers a query, through the read pool that
// serves most requests.
func (s *store) ping(ctx context.Context) error {
	var one int
	if err := s.reader.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return s.failed("ping", err)
	}
	return nil
}

// journalMode reports SQLite's journal mode in force ("wal", or "memory" for
// :memory:), for the start-up log; PostgreSQL has none.
func (s *store) journalMode(ctx context.Context) (string, error) {
	if s.dialect == postgresDialect {
		return "", nil
	}
	var mode string
	if err := s.reader.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return "", s.failed("read journal mode", err)
	}
	return mode, nil
}

// failedWrite is failed for a write: it also marks err with errUnwritable
// when SQLite says the database cannot be written now: SQLITE_FULL (disk
// full, or the page limit reached), SQLITE_READONLY (read-only file or file
// system), SQLITE_IOERR and SQLITE_CANTOPEN (the disk refuses the write or
// the journal). Each of these can go away without a restart, and the next
// write simply tries again.
func (s *store) failedWrite(what string, err error) error {
	err = s.failed(what, err)
	if se, ok := errors.AsType[*sqlite.Error](err); ok {
		switch se.Code() & 0xff { // the primary result code, without the extended bits
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
			return fmt.Errorf("%w: %w", errUnwritable, err)
		}
	}
	return err
}

// sqliteFileName is path as SQLite must be given it to open that very file:
// SQLite reads a name that starts with "file:" as a URI ("file:x.db" would
// open x.db), so such a relative path gets "./" in front.
func sqliteFileName(path string) string {
	if strings.HasPrefix(path, "file:") {
		return "./" + path
	}
	return path
}

// readContext is the context of a read query, and its cancel function. On
// SQLite it is ctx without its cancellation: with a cancellable context the
// driver starts a goroutine per statement to interrupt it, which costs more
// than the short bounded reads of the API (one row by key, or at most 101
// rows of an index range) that it could interrupt; the busy timeout still
// bounds them. On PostgreSQL, across a network, a read is bounded by
// pgQueryTimeout, so that a database that stops answering makes a 503, not a
// request that hangs.
func (s *store) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.dialect == postgresDialect {
		return context.WithTimeout(ctx, pgQueryTimeout)
	}
	return context.WithoutCancel(ctx), func() {}
}

// checkDBPath makes sure the database file can be created or opened: its
// directory exists and accepts a new file.
func checkDBPath(path string) error {
	switch {
	case path == "":
		return errors.New("the database path is empty")
	case path == memoryDB:
		return nil
	case strings.ContainsAny(path, "?#"):
		return fmt.Errorf("%q: the path must not contain '?' or '#'", path)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%q is a directory, not a database file", path)
	}
	dir := filepath.Dir(path)
	probe, err := os.CreateTemp(dir, ".petstore-probe-*")
	if err != nil {
		return fmt.Errorf("cannot create files in directory %q: %v", dir, errors.Unwrap(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// readyTimeout is how long the database may take to answer a readiness
// check before the service reports itself not ready.
const readyTimeout = 2 * time.Second
