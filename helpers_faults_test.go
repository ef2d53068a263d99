package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Test helpers: faults a test makes happen (writes held, a read-only
// database, a connection cut, a database out of reach).

// holdWrites makes the next writes of ts wait, from another connection,
// until release is called (at the latest when the test ends): on SQLite it
// holds the file's write lock, on PostgreSQL a lock on the tables that every
// write of the API changes first (reads go on). A held write gives up after
// 5 s (SQLite's busy timeout, or the batch timeout on PostgreSQL), so a test
// uses it at once.
func (ts *testServer) holdWrites(t *testing.T) (release func()) {
	t.Helper()
	driver, lock := "sqlite", []string{"BEGIN IMMEDIATE"}
	if isPostgresURL(ts.DBPath) {
		driver, lock = "pgx", []string{"BEGIN", "LOCK TABLE pets, orders IN EXCLUSIVE MODE"}
	}
	db, err := sql.Open(driver, ts.DBPath)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	for _, stmt := range lock {
		if _, err := conn.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	return release
}

// setReadOnly makes the writer of ts refuse every write, as a read-only
// file or file system (SQLITE_READONLY) or a read-only PostgreSQL (a
// standby, SQLSTATE 25006) does, or lets it write again.
func (ts *testServer) setReadOnly(t *testing.T, on bool) {
	t.Helper()
	stmt := map[bool]string{true: "PRAGMA query_only = 1", false: "PRAGMA query_only = 0"}[on]
	if isPostgresURL(ts.DBPath) {
		stmt = map[bool]string{true: "SET default_transaction_read_only = on", false: "SET default_transaction_read_only = off"}[on]
	}
	// The writer has one connection, so the setting holds for every write.
	if _, err := ts.Store.writer.ExecContext(t.Context(), stmt); err != nil {
		t.Fatal(err)
	}
}

// exec runs a statement on the writer's database directly, past the store,
// in the dialect of ts (written with ? parameters).
func (ts *testServer) exec(t *testing.T, query string, args ...any) error {
	t.Helper()
	_, err := ts.Store.writer.ExecContext(t.Context(), ts.Store.dialect.sql(query), args...)
	return err
}

// tcpProxy forwards the connections it accepts on 127.0.0.1 to target,
// until cut, which closes them all and refuses new ones: to a client behind
// it, the server at target stops answering.
type tcpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// newProxy starts a proxy on 127.0.0.1 to address on network ("tcp", or
// "unix" for a socket file), closed when the test ends.
func newProxy(t testing.TB, network, address string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial(network, address)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

// cut closes every connection and refuses new ones.
func (p *tcpProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// unreachableServer returns a server whose PostgreSQL database stopped
// answering after it started: its connections go through a proxy that is then
// cut. Without PostgreSQL, it returns false (and fails the test in CI), after
// recording the part of the test that cannot run.
func unreachableServer(t *testing.T) (*testServer, bool) {
	t.Helper()
	if _, err := sharedPostgres(); err != nil {
		if os.Getenv(ciVariable) != "" {
			t.Fatalf("an unreachable database needs PostgreSQL: %v; %s=1 means every part must run", err, ciVariable)
		}
		noteSkipped(fmt.Sprintf("skipped %s (%v); to run it: %s", postgresPart, err, enablePostgres))
		return nil, false
	}
	u, err := url.Parse(postgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	// The test cluster listens on a Unix socket (pgcluster): the proxy
	// reaches it there, and the service reaches the proxy over TCP.
	q := u.Query()
	proxy := newProxy(t, "unix", filepath.Join(q.Get("host"), ".s.PGSQL."+q.Get("port")))
	q.Del("host")
	q.Del("port")
	u.Host, u.RawQuery = proxy.ln.Addr().String(), q.Encode()
	ts := newTestServer(t, atPath(u.String()))
	proxy.cut()
	return ts, true
}
