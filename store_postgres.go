package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // registers pgx for database/sql; the binary stays CGO-free
)

// PostgreSQL is the scale-out backend: any number of replicas of the binary
// on one database. The store's code is the same as on SQLite (database/sql,
// the statements of store_*.go in the dialect of store_dialect.go); what differs is
// here: opening the pools, and telling a database that is unreachable (503,
// retry) or a transaction that lost a race (try again) from a failure.

// The timeouts that keep a request from waiting on an unreachable database
// for longer than a client would: a request that needs PostgreSQL while it is
// down answers 503 within about 5 s.
const (
	pgConnectTimeout  = 3 * time.Second // opening a connection
	pgQueryTimeout    = 5 * time.Second // a read
	pgBatchTimeout    = 5 * time.Second // a write batch, from BEGIN to COMMIT
	defaultDBMaxConns = 10              // per replica: the writer's 1 and 9 readers
)

// errUnavailable marks an operation that failed because the database cannot
// be reached now (stopped, restarting, the network down): the request may
// succeed later, and errors.go answers 503 with Retry-After.
var errUnavailable = errors.New("the database is not reachable")

// errDuplicateKey marks an insert refused by a unique constraint: on
// PostgreSQL, another replica stored the same idempotency key first.
var errDuplicateKey = errors.New("duplicate key")

// isPostgresURL reports whether the -db setting names a PostgreSQL database.
func isPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// redactDB is the -db setting as logs and errors may show it: a PostgreSQL
// URL without its password.
func redactDB(db string) string {
	if !isPostgresURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	// libpq also takes the password, and the password of the client's TLS
	// key, as query parameters.
	q := u.Query()
	hidden := false
	for _, name := range []string{"password", "sslpassword"} {
		if q.Has(name) {
			q.Set(name, "xxxxx")
			hidden = true
		}
	}
	if hidden {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// openPostgres connects to the PostgreSQL database at dbURL (a libpq URL,
// query parameters such as sslmode passed through) with at most maxConns
// connections: one for the writer, the others for reads.
func openPostgres(ctx context.Context, dbURL string, maxConns int) (*store, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		// pgx's message may quote the URL; ours names it without the password.
		return nil, fmt.Errorf("%s is not a PostgreSQL URL that pgx accepts (see https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS)", redactDB(dbURL))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	if maxConns == 0 {
		maxConns = defaultDBMaxConns
	}
	writer := stdlib.OpenDB(*cfg)
	writer.SetMaxOpenConns(1)
	reader := stdlib.OpenDB(*cfg)
	reader.SetMaxOpenConns(max(1, maxConns-1))
	reader.SetMaxIdleConns(max(1, maxConns-1))
	// A connection is replaced now and then, so that a replica rebalances
	// after a failover and never keeps a connection the server forgot.
	for _, db := range []*sql.DB{writer, reader} {
		db.SetConnMaxLifetime(30 * time.Minute)
	}
	pingCtx, cancel := context.WithTimeout(ctx, pgConnectTimeout+pgQueryTimeout)
	defer cancel()
	if err := writer.PingContext(pingCtx); err != nil {
		writer.Close()
		reader.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %s", redactDB(dbURL), pgErrorText(err))
	}
	s, err := newStore(ctx, postgresDialect, redactDB(dbURL), writer, reader)
	if err != nil {
		return nil, err
	}
	listenCtx, stop := context.WithCancel(context.Background())
	s.stopBackground = stop
	s.background.Go(func() { s.listenForEvents(listenCtx, cfg) })
	s.background.Go(func() { s.fillEventTail(listenCtx) })
	return s, nil
}

// listenForEvents asks for a read of the events' tail (see
// store_events_tail.go) whenever a batch of any replica commits events (the
// batch's statement that writes them sends the notification inside the
// batch's transaction, see insertEvents, so it arrives only if the batch
// committed). It holds one connection of its own, outside the pools,
// LISTENing until ctx ends; when the connection fails it asks for a read (a
// notification may have been lost meanwhile) and connects again a second
// later. A notification is only a wake-up: the tail is read from the table,
// and also every second, so a lost one delays an event by a second at most.
func (s *store) listenForEvents(ctx context.Context, cfg *pgx.ConnConfig) {
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+eventsChannel); err == nil {
				s.events.heard()
				for err == nil {
					_, err = conn.WaitForNotification(ctx)
					if err == nil {
						s.events.heard()
					}
				}
			}
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(closeCtx)
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// pgErrorText describes a connection error without the connection string,
// which pgx may include.
func pgErrorText(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Message + " (SQLSTATE " + pe.Code + ")"
	}
	if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return "cannot connect: " + errors.Unwrap(ce).Error()
	}
	return err.Error()
}

// postgresUnavailable reports whether err says the database cannot be
// reached now, as opposed to a query that failed: a refused or dropped
// connection, a server shutting down or starting, too many connections, a
// timeout.
func postgresUnavailable(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // admin or crash shutdown, cannot connect now
			return true
		case pe.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, new(*pgconn.ConnectError)) ||
		pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "connection reset")
}

// postgresTransient reports whether err says a transaction lost a race with
// another one (a deadlock between two replicas' batches, a serialization
// failure): the same job succeeds if run again.
func postgresTransient(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03")
}

// postgresUnwritable reports whether err says the database takes no writes
// now, as SQLITE_READONLY and SQLITE_FULL do: a read-only transaction (a
// standby, or default_transaction_read_only), a full disk.
func postgresUnwritable(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pe.Code == "25006" || pe.Code == "53100")
}

// postgresDuplicate reports whether err is a unique violation.
func postgresDuplicate(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "23505"
}
