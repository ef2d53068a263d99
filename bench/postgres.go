package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the driver the service itself uses

	"petstore/internal/pgcluster"
)

// With -postgres the benchmark starts a PostgreSQL cluster of its own, the
// way the tests do (internal/pgcluster: initdb into a temporary directory,
// the server as the postgres user when the benchmark runs as root, since
// initdb refuses root, on a Unix socket in that directory), but durable:
// fsync and synchronous commit on, as a shop would run it, since the write
// scenarios measure durable commits.

// Time limits on what the benchmark asks of PostgreSQL, so that a server
// that hangs cannot hold the benchmark: initdb and the server's start, each
// (its stop is bounded by pgcluster); loading the pets of one database (a
// million take seconds); and reading the counters around a run.
const (
	pgStartTimeout = time.Minute
	pgLoadTimeout  = 10 * time.Minute
	pgQueryTimeout = 30 * time.Second
)

// pgSettings are the server's settings beyond its defaults. fsync,
// synchronous_commit and full_page_writes are the defaults, written out
// because the benchmark depends on them: every 201 is durable, as on SQLite.
var pgSettings = []string{
	"fsync=on",
	"synchronous_commit=on",
	"full_page_writes=on",
	// The tables of a million pets (about 90 MiB with their indexes) and
	// the rows a run adds fit in it, as they would on a server sized for
	// the shop.
	"shared_buffers=256MB",
	// Three replicas are up at once (one for the 1-replica case, two for
	// the other), each with the service's default pool of 10 connections,
	// and the benchmark's own; 100 leaves room.
	"max_connections=100",
	// A lock wait longer than deadlock_timeout (1 s) leaves a line in the
	// log, as a deadlock does: the benchmark counts both during each run,
	// the signs of a lock convoy.
	"log_lock_waits=on",
}

// pgCluster is the PostgreSQL server the benchmark started.
type pgCluster struct{ *pgcluster.Cluster }

// startPostgres initialises a cluster in a new temporary directory and
// starts its server. The caller removes it with remove, which stops the
// server first.
func startPostgres(ctx context.Context) (*pgCluster, error) {
	c, err := pgcluster.Start(ctx, pgStartTimeout, pgSettings...)
	if err != nil {
		return nil, fmt.Errorf("-postgres: %w; apt-get install postgresql", err)
	}
	return &pgCluster{c}, nil
}

// version is the server's version, as the report names it.
func (c *pgCluster) version(ctx context.Context) (string, error) {
	db, err := sql.Open("pgx", c.url("postgres"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, pgQueryTimeout)
	defer cancel()
	var v string
	if err := db.QueryRowContext(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", fmt.Errorf("PostgreSQL's version: %w", err)
	}
	v, _, _ = strings.Cut(v, " ") // "15.18 (Debian 15.18-0+deb12u1)"
	return "PostgreSQL " + v, nil
}

// url is the URL of one of the cluster's databases.
func (c *pgCluster) url(database string) string { return c.URL(database) }

// stop ends the server, keeping its directory (-keep).
func (c *pgCluster) stop() { c.Stop() }

// remove stops the server and deletes its directory.
func (c *pgCluster) remove() { c.Remove() }

// logFile is the server's log.
func (c *pgCluster) logFile() string { return c.LogFile() }

// lockTrouble is what the server's log says of locks during a run.
type lockTrouble struct {
	deadlocks int64 // transactions aborted by the deadlock detector
	lockWaits int64 // waits for a lock that lasted deadlock_timeout (1 s)
}

// logOffset is the size of the server's log now, where the lines of the
// next run will start.
func (c *pgCluster) logOffset() int64 {
	fi, err := os.Stat(c.logFile())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// lockTroubleSince counts the deadlocks and long lock waits the server
// logged after offset.
func (c *pgCluster) lockTroubleSince(offset int64) (lockTrouble, error) {
	f, err := os.Open(c.logFile())
	if err != nil {
		return lockTrouble{}, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return lockTrouble{}, err
	}
	var t lockTrouble
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.Contains(line, "ERROR:  deadlock detected"):
			t.deadlocks++
		case strings.Contains(line, "LOG:  ") && strings.Contains(line, " still waiting for "):
			t.lockWaits++
		}
	}
	return t, sc.Err()
}

// pids are the server's processes now: the postmaster and its children (a
// backend per connection, the checkpointer, the WAL writer...), whose CPU
// time is the database's share of the cost of a request.
func (c *pgCluster) pids() []int {
	pm := c.Pid()
	if pm == 0 {
		return nil
	}
	pids := []int{pm}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.ppid == pm {
			pids = append(pids, pid)
		}
	}
	return pids
}

// createPostgresDatabase makes the database name on the cluster with the
// service's schema and n pets, as createDatabase does for a SQLite file:
// the binary bin makes the schema at a first start, then loadPostgresPets
// fills the table.
func createPostgresDatabase(ctx context.Context, c *pgCluster, bin, name string, n int64) error {
	admin, err := sql.Open("pgx", c.url("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	createCtx, cancel := context.WithTimeout(ctx, pgQueryTimeout)
	defer cancel()
	// name is made by the benchmark from a number, never from input.
	if _, err := admin.ExecContext(createCtx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return createDatabase(ctx, bin, c.url(name), n)
}

// loadPostgresPets inserts n pets into the pets table of the PostgreSQL
// database at url (whose schema the service has made) with one INSERT ...
// SELECT over generate_series, the same names, categories and statuses as
// loadPets, then VACUUM ANALYZE: the visibility map that index-only scans
// need, and the statistics the planner needs, as a database that has lived
// for a while would have them; then a CHECKPOINT, as SQLite's WAL is
// checkpointed after its load.
func loadPostgresPets(ctx context.Context, url string, n int64) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, pgLoadTimeout)
	defer cancel()
	res, err := db.ExecContext(ctx, `
		INSERT INTO pets (name, category_id, status)
		SELECT 'pet-' || i, i % 10 + 1, CASE i % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'pending' ELSE 'sold' END
		FROM generate_series(1, $1::bigint) AS i`, n)
	if err != nil {
		return fmt.Errorf("insert %d pets: %w", n, err)
	}
	if got, err := res.RowsAffected(); err != nil || got != n {
		return fmt.Errorf("insert %d pets: %d rows inserted (%v)", n, got, err)
	}
	if _, err := db.ExecContext(ctx, "VACUUM ANALYZE"); err != nil {
		return fmt.Errorf("vacuum analyze: %w", err)
	}
	// The pages the load dirtied are written now, not by the next
	// checkpoints while the scenarios run: the checkpointer is one of the
	// server's processes whose CPU a run counts, and a page's first change
	// after a checkpoint writes the whole page to the WAL.
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// pgCounters are what the benchmark reads of a PostgreSQL database before
// and after a run, to see how the writes were committed.
type pgCounters struct {
	nextXID   int64 // the next transaction id the cluster will assign
	pets      int64 // rows of pets
	orders    int64 // rows of orders
	delivered int64 // rows of orders delivered
}

// readPGCounters reads the counters of the database db. The next
// transaction id is the snapshot's xmax, read without taking an id:
// PostgreSQL assigns one to every transaction that writes, and only to
// those, so its difference over a run is the number of write transactions
// (commits that waited for the WAL flush, and the rare rollbacks) the
// cluster ran; the other databases of the cluster are idle meanwhile.
// pg_stat_database's xact_commit would count read-only transactions too
// (every read outside a transaction is one), and PostgreSQL 15 publishes a
// backend's counts up to 10 s late, so it cannot be read right after a run.
func readPGCounters(ctx context.Context, db *sql.DB) (pgCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, pgQueryTimeout)
	defer cancel()
	var c pgCounters
	err := db.QueryRowContext(ctx, `SELECT
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		(SELECT count(*) FROM pets),
		(SELECT count(*) FROM orders),
		(SELECT count(*) FROM orders WHERE status = 'delivered')`).Scan(&c.nextXID, &c.pets, &c.orders, &c.delivered)
	return c, err
}

// writesSince is the number of writes done between before and c: pets
// created, orders placed, orders delivered (each of the API's write
// requests that the scenarios send does one of them).
func (c pgCounters) writesSince(before pgCounters) int64 {
	return (c.pets - before.pets) + (c.orders - before.orders) + (c.delivered - before.delivered)
}

// procStat is what /proc/PID/stat says of a process that the benchmark uses.
type procStat struct {
	ppid int
	cpu  time.Duration // user and system time, its own and its reaped children's
}

// clockTicks is the unit of the times in /proc/PID/stat, USER_HZ: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// readProcStat reads /proc/PID/stat; ok is false when the process is gone.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// The command name, in brackets, may hold spaces: the fields counted
	// here are those after it, from the state (field 3 of proc(5)).
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return procStat{}, false
	}
	f := strings.Fields(rest)
	if len(f) < 15 {
		return procStat{}, false
	}
	st := procStat{}
	st.ppid, _ = strconv.Atoi(f[1])
	var ticks int64
	for _, s := range f[11:15] { // utime, stime, cutime, cstime
		t, _ := strconv.ParseInt(s, 10, 64)
		ticks += t
	}
	st.cpu = time.Duration(ticks) * time.Second / clockTicks
	return st, true
}

// cpuTime is the CPU time the processes pids have used so far; a process
// that has exited counts for nothing.
func cpuTime(pids []int) map[int]time.Duration {
	m := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if st, ok := readProcStat(pid); ok {
			m[pid] = st.cpu
		}
	}
	return m
}

// cpuUsed is the CPU time used between the readings before and after: the
// processes started in between count from zero; one that exited in between
// (a PostgreSQL backend whose connection a pool replaced) counts in its
// parent's children's time, which holds its whole life, so what it had used
// before is taken off.
func cpuUsed(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	for pid, t := range before {
		if _, ok := after[pid]; !ok {
			d -= t
		}
	}
	return d
}
