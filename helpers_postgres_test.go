package main

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"petstore/internal/pgcluster"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Test helpers: the PostgreSQL half of the suite (a throwaway cluster the
// tests start, a database of its own for each test, the second run of the
// HTTP tests) and a test in a process of its own.

// backendVariable selects the backend of newTestServer in the second run;
// pgURLVariable passes it the first run's cluster.
const (
	backendVariable = "PETSTORE_TEST_BACKEND"
	pgURLVariable   = "PETSTORE_TEST_POSTGRES_URL"
)

// testBackend is "postgres" in the second run, "" (SQLite) otherwise.
var testBackend = os.Getenv(backendVariable)

// onPostgres collects the top-level tests that run again on PostgreSQL:
// those that started a newTestServer on its default database.
var onPostgres struct {
	mu    sync.Mutex
	names map[string]bool
}

// rerunOnPostgres records that t's top-level test runs again on PostgreSQL.
func rerunOnPostgres(t testing.TB) {
	name, _, _ := strings.Cut(t.Name(), "/")
	onPostgres.mu.Lock()
	defer onPostgres.mu.Unlock()
	if onPostgres.names == nil {
		onPostgres.names = map[string]bool{}
	}
	onPostgres.names[name] = true
}

// pgCluster is a PostgreSQL server the tests started (internal/pgcluster,
// which bench/ uses too), with the tests' settings: on a Unix socket in its
// own directory, so that no TCP port is reserved and none can be taken
// from it, even across a restart.
type pgCluster struct{ *pgcluster.Cluster }

// testPostgres is the cluster of this test binary, started on first use and
// stopped by TestMain.
var testPostgres struct {
	once    sync.Once
	cluster *pgCluster
	url     string // of its petstore database
	err     error
}

// pgTestSettings are the test clusters' settings beyond the defaults. They
// run without fsync: the tests stop them cleanly, never by a power cut.
// Every test that runs on PostgreSQL has a database of its own, with the
// connections of its stores, and a few hundred run at once.
var pgTestSettings = []string{"max_connections=500", "fsync=off", "full_page_writes=off", "shared_buffers=64MB", "log_min_messages=fatal"}

// pgStartTimeout bounds initdb, and then the server's start.
const pgStartTimeout = 30 * time.Second

// startPostgresCluster initialises and starts a new cluster.
func startPostgresCluster() (*pgCluster, error) {
	c, err := pgcluster.Start(context.Background(), pgStartTimeout, pgTestSettings...)
	if err != nil {
		return nil, err
	}
	return &pgCluster{c}, nil
}

// start starts the server again after stop.
func (c *pgCluster) start() error { return c.Start(context.Background(), pgStartTimeout) }

// stop shuts the server down, keeping everything committed, and waits for
// it to exit.
func (c *pgCluster) stop() { c.Stop() }

// url is the URL of a database of the cluster.
func (c *pgCluster) url(database string) string { return c.URL(database) }

// remove stops the cluster and deletes its files.
func (c *pgCluster) remove() { c.Remove() }

// sharedPostgres returns the URL of the petstore database of this test
// binary's cluster, starting it on first use: the first run's own, or, in
// the second run, the one the first run passed down.
func sharedPostgres() (string, error) {
	testPostgres.once.Do(func() {
		if u := os.Getenv(pgURLVariable); u != "" {
			testPostgres.url = u
			return
		}
		c, err := startPostgresCluster()
		if err != nil {
			testPostgres.err = err
			return
		}
		testPostgres.cluster = c
		db, err := sql.Open("pgx", c.url("postgres"))
		if err == nil {
			_, err = db.Exec("CREATE DATABASE petstore")
			db.Close()
		}
		if err == nil {
			// The names of the tests' databases (postgresSchema), made
			// here once: CREATE SEQUENCE IF NOT EXISTS is not safe
			// against itself, and the tests run in parallel.
			db, err = sql.Open("pgx", c.url("petstore"))
			if err == nil {
				_, err = db.Exec("CREATE SEQUENCE petstore_test_databases")
				db.Close()
			}
		}
		testPostgres.url, testPostgres.err = c.url("petstore"), err
	})
	return testPostgres.url, testPostgres.err
}

// The one line that says the PostgreSQL parts were skipped, and how to run
// them: every part that needs PostgreSQL records the same line, so a run
// without it prints it once.
const (
	postgresPart   = "every PostgreSQL part of the suite (its second run of the HTTP tests, replicas, faults, copy)"
	enablePostgres = "apt-get install postgresql (the tests start throwaway clusters themselves)"
)

// postgresSchema returns the URL of an empty database of the shared
// cluster, the test's own until it ends (see testDatabase).
func postgresSchema(t testing.TB) string {
	t.Helper()
	return testDatabase(t, func() (string, error) { return "template1", nil })
}

// migratedPostgres returns the URL of a database of the shared cluster
// that holds what openStore's migrations make, and nothing else, the
// test's own until it ends: a copy of the test binary's migrated template
// (migratedTemplate), as newTestServer copies a migrated SQLite file.
func migratedPostgres(t testing.TB) string {
	t.Helper()
	return testDatabase(t, migratedTemplate)
}

// testDatabase returns the URL of a new database of the shared cluster,
// a copy of the template that template names, and drops it when the test
// ends. It skips the test (fails it in CI) when PostgreSQL is not
// installed. A database rather than a schema: the replicas' write lock
// (writeLock) and pg_locks are per database, so tests that run at once
// never wait on each other's batches (a test that holds its writes would
// otherwise hold every other test's). Both statements go through the
// cluster's admin pool (postgresAdmin): on this 2-core VM a new connection
// costs the machine about 45 ms of CPU (PostgreSQL forks a process for
// it), so a test makes none beyond its stores' own. A copy of the migrated
// template, made and dropped, measured 205 ms of CPU with its store opened
// and closed, where migrating a database and emptying it for the next
// test took 280.
func testDatabase(t testing.TB, template func() (string, error)) string {
	t.Helper()
	base, err := sharedPostgres()
	missingPart(t, postgresPart, enablePostgres, err)
	admin, err := postgresAdmin()
	if err != nil {
		t.Fatal(err)
	}
	from, err := template()
	if err != nil {
		t.Fatal(err)
	}
	name, err := createDatabase(t.Context(), admin, from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// After the test's own clean-ups (registered later, run first).
		// FORCE ends the connections a process the test killed may leave
		// for a moment.
		if _, err := admin.Exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop the test's database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// createDatabase creates a database as a copy of template and returns its
// name: t1, t2..., numbered by a sequence of the cluster
// (petstore_test_databases, made with it), so that the two runs of the test
// binary never make the same name.
func createDatabase(ctx context.Context, admin *sql.DB, template string) (string, error) {
	var n int64
	if err := admin.QueryRowContext(ctx, "SELECT nextval('petstore_test_databases')").Scan(&n); err != nil {
		return "", err
	}
	// The names are made here, from a number, never from input.
	name := fmt.Sprintf("t%d", n)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template); err != nil {
		return "", fmt.Errorf("create the test's database: %w", err)
	}
	return name, nil
}

// testPostgresAdmin is the pool of connections to the shared cluster's
// petstore database that creates and drops the tests' databases, open
// until the test binary exits, and the migrated template.
var testPostgresAdmin struct {
	once sync.Once
	db   *sql.DB
	err  error

	templateOnce sync.Once
	template     string
	templateErr  error
}

// postgresAdmin returns the admin pool, opening it on first use. It keeps
// as many connections as tests run at once, so that none is opened twice.
func postgresAdmin() (*sql.DB, error) {
	testPostgresAdmin.once.Do(func() {
		base, err := sharedPostgres()
		if err != nil {
			testPostgresAdmin.err = err
			return
		}
		db, err := sql.Open("pgx", base)
		if err != nil {
			testPostgresAdmin.err = err
			return
		}
		db.SetMaxIdleConns(testsAtOnce)
		testPostgresAdmin.db = db
	})
	return testPostgresAdmin.db, testPostgresAdmin.err
}

// migratedTemplate returns the name of this test binary's migrated
// template: a database that openStore migrated and closed, made on first
// use. No connection to it stays open, as a copy needs.
func migratedTemplate() (string, error) {
	testPostgresAdmin.templateOnce.Do(func() {
		admin, err := postgresAdmin()
		if err != nil {
			testPostgresAdmin.templateErr = err
			return
		}
		ctx := context.Background()
		name, err := createDatabase(ctx, admin, "template1")
		if err == nil {
			base, _ := sharedPostgres()
			u, _ := url.Parse(base)
			u.Path = "/" + name
			var st *store
			if st, err = openStore(ctx, u.String(), 0); err == nil {
				err = st.Close()
			}
		}
		if err == nil {
			// No test may connect to it by mistake.
			_, err = admin.ExecContext(ctx, "ALTER DATABASE "+name+" WITH ALLOW_CONNECTIONS false")
		}
		testPostgresAdmin.template, testPostgresAdmin.templateErr = name, err
	})
	return testPostgresAdmin.template, testPostgresAdmin.templateErr
}

// startOnPostgres starts the tests that rerunOnPostgres recorded again, in
// a second run of this test binary, on PostgreSQL; wait waits for it and
// returns 1 when it failed (see startPart).
func startOnPostgres() (wait func() int) {
	onPostgres.mu.Lock()
	names := slices.Sorted(maps.Keys(onPostgres.names))
	onPostgres.mu.Unlock()
	if len(names) == 0 {
		return func() int { return 0 }
	}
	url, err := sharedPostgres()
	if err != nil {
		if os.Getenv(ciVariable) != "" {
			fmt.Fprintf(os.Stderr, "the PostgreSQL half of the suite cannot run: %v; %s=1 means every part must run (%s)\n", err, ciVariable, enablePostgres)
			return func() int { return 1 }
		}
		noteSkipped(fmt.Sprintf("skipped %s (%v); to run it: %s", postgresPart, err, enablePostgres))
		return func() int { return 0 }
	}
	cmd := exec.Command(os.Args[0], sideRunArgs(names, postgresTestsAtOnce)...)
	cmd.Env = append(os.Environ(), backendVariable+"=postgres", pgURLVariable+"="+url)
	cmd.Env = append(cmd.Env, builtBinaryEnv()...)
	return startPart(cmd, fmt.Sprintf("the PostgreSQL run of %d tests", len(names)))
}

// How many tests each of the runs after the main one runs at once, unless
// -parallel says otherwise. Over HTTPS, two: its tests that load a service
// to its bounds (the hostile tests, 2,250 streams against the body budget
// within the read timeout) hold those bounds' timing only with the
// machine's cores not shared much more. On PostgreSQL, four: at two, the
// run used less than one core of two, its tests waiting on the database;
// at eight, a test's commit of 3,082 pets in one transaction outlasted the
// write batch's 5 s bound (pgBatchTimeout), as it did once at four in CI's
// run (it commits them in ten on PostgreSQL since), and without the race
// detector the run took longer.
const (
	postgresTestsAtOnce = 4
	tlsTestsAtOnce      = 2
)

// sideRunArgs are the arguments of a run of this test binary after the
// main one, for the tests names: the main run's, but for its files (its
// log for go test's cache, a coverage profile, profiles), its choice of
// tests, and, unless the command line set it, its -parallel: atOnce.
func sideRunArgs(names []string, atOnce int) []string {
	args := argsWithout("test.testlogfile", "test.coverprofile", "test.gocoverdir", "test.run", "test.skip", "test.cpuprofile", "test.memprofile", "test.trace")
	args = append(args, "-test.run=^("+strings.Join(names, "|")+")$")
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-test.parallel") }) {
		args = append(args, "-test.parallel="+strconv.Itoa(atOnce))
	}
	return args
}

// argsWithout returns this test binary's arguments but for the flags named
// in drop, each left out with its value, whether given as -flag=value (as go
// test passes them) or as -flag value (the binary run by hand). A value kept
// alone would end the new run's flags before those appended after it.
func argsWithout(drop ...string) []string {
	var args []string
	for i := 1; i < len(os.Args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(os.Args[i], "-"), "=")
		if slices.Contains(drop, name) {
			if !hasValue {
				i++
			}
			continue
		}
		args = append(args, os.Args[i])
	}
	return args
}

// aloneVariable marks a run of the test binary that inAProcessOfItsOwn
// started for one test.
const aloneVariable = "PETSTORE_TEST_ALONE"

// inAProcessOfItsOwn is for a test that measures something of the whole
// process (its heap) and so cannot share it with the tests running in
// parallel. In the test's own process it returns true, and the test goes
// on. Otherwise it runs this test binary again for t's test alone, reports
// that run's failure as t's, and returns false: the test ends there.
func inAProcessOfItsOwn(t *testing.T) bool {
	t.Helper()
	if os.Getenv(aloneVariable) == t.Name() {
		return true
	}
	// As in startOnPostgres: the files are this run's, and the new run
	// chooses its test.
	args := argsWithout("test.testlogfile", "test.coverprofile", "test.gocoverdir", "test.run", "test.skip", "test.count", "test.cpuprofile", "test.memprofile", "test.trace")
	args = append(args, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), aloneVariable+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s in a process of its own: %v\n%s", t.Name(), err, out)
	}
	return false
}

// dbFor is the -db of a test that starts the service itself (with startRun
// or startBinary) and may run on either backend: path, a SQLite file, in the
// first run, which records the test to run again; in the PostgreSQL run, a
// schema of its own, the same one for the same path within the test.
func dbFor(t *testing.T, path string) string {
	t.Helper()
	if testBackend != "postgres" {
		rerunOnPostgres(t)
		return path
	}
	dbForSchemas.mu.Lock()
	defer dbForSchemas.mu.Unlock()
	if dbForSchemas.urls == nil {
		dbForSchemas.urls = map[string]string{}
	}
	if u, ok := dbForSchemas.urls[path]; ok {
		return u
	}
	u := postgresSchema(t)
	dbForSchemas.urls[path] = u
	return u
}

// dbForSchemas remembers the schema dbFor gave each path.
var dbForSchemas struct {
	mu   sync.Mutex
	urls map[string]string
}

// openDB opens a database as a test reads it past the service: a SQLite
// file or a PostgreSQL URL.
func openDB(t *testing.T, db string) *sql.DB {
	t.Helper()
	driver := "sqlite"
	if isPostgresURL(db) {
		driver = "pgx"
	}
	conn, err := sql.Open(driver, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
