package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The events' SQL. An event row is written by finishJob (store_changes.go)
// in the transaction of the change it describes, so it commits exactly when
// the change does. Its id comes from the table's own sequence, taken while
// the batch holds the write lock (SQLite's single writer, or writeLock on
// PostgreSQL): a batch that takes an id commits before the next batch can
// take one, so ids grow in commit order, and a reader that has seen id N
// never finds a smaller one later, whichever replica wrote it.

const (
	eventColumns  = "id, type, occurred_at, subject, data"
	sqlListEvents = "SELECT " + eventColumns + " FROM events WHERE id > ? ORDER BY id LIMIT ?"
	// sqlEventsEnd is the feed's current end: the newest event id, or the
	// prune mark when every event was pruned, so that an id once handed out
	// is never handed out as an end smaller than itself.
	sqlEventsEnd = "SELECT COALESCE((SELECT max(id) FROM events), 0), (SELECT pruned_through FROM event_marks)"
	// sqlPrunableEvents reads the oldest events, in id order, with their
	// instants: pruning deletes a prefix of the ids, never leaving an older
	// event behind a newer one that is gone (see pruneEvents).
	sqlPrunableEvents = "SELECT id, occurred_at FROM events ORDER BY id LIMIT ?"
	sqlPruneEvents    = "DELETE FROM events WHERE id <= ?"
	sqlMarkPruned     = "UPDATE event_marks SET pruned_through = ? WHERE pruned_through < ?"

	sqlInsertTicket = "INSERT INTO event_tickets (digest, api_key_hmac, expires_at) VALUES (?, ?, ?)"
	sqlTakeTicket   = "DELETE FROM event_tickets WHERE digest = ? RETURNING api_key_hmac, expires_at"
	sqlPruneTickets = "DELETE FROM event_tickets WHERE expires_at <= ?"
)

// sqlStreamEvents is sqlListEvents with the prune mark on each row, read
// in the same statement: a stream learns in one query both what to send
// and whether it may (see streamEvents). Its LIMIT is written out, not a
// parameter: PostgreSQL estimates a LIMIT parameter to keep a tenth of the
// rows, so past about ten thousand events the plan made once for every
// value looks dearer than one made for each cursor, and the statement was
// planned again at every read; with the LIMIT known, the plan is made once.
var sqlStreamEvents = "SELECT " + eventColumns + ", (SELECT pruned_through FROM event_marks) FROM events WHERE id > ? ORDER BY id LIMIT " + strconv.Itoa(streamReadBatch)

// listEventsOfTypes is the statement of a type filter (a page of the feed
// with type=, and a webhook's delivery reads). It has one arm per event
// type, in eventTypes' order, each reading its type's events after the
// cursor from that type's index (migration 0011), in id order, and the
// arms are merged by id: a page reads about as many events as it returns,
// whatever the types' shares of the table. Each arm takes the cursor and
// whether the filter keeps its type (an arm whose type is not kept reads
// nothing), so that one statement serves every filter.
//
// It was "type IN (...)" on the table's range after the cursor, which read
// every later event to find a rare type's: about 9 ms at 50,000 events and
// 0.2 s at a million for a page of pet.deleted. Neither database merges
// the ranges of an IN list by id (both read every event of the types kept,
// then sort), hence an arm per type. The types are written out, as the
// service's own constants, never the client's text: an arm's condition
// then implies its partial index's, and PostgreSQL plans each arm for its
// own type.
//
// SQLite reads the arms of a compound SELECT ordered by id in step, as a
// merge, and stops at the LIMIT. Each arm names its index (INDEXED BY):
// without statistics SQLite cannot know that a type is rare, and prefers
// the table's range. PostgreSQL merges the arms (Merge Append) when each
// has its own ORDER BY and LIMIT; without them it reads every event of the
// types kept and sorts them. For a small LIMIT its merge takes, for each
// arm, the plan that starts cheapest: with one index on (type, id), that
// was the primary key's range with the type as a filter, which reads a rare
// type's arm on to its next event, or to the end of the table. A type's own
// index starts as cheap and reads only its events, so every plan takes it.
func (d dialect) listEventsOfTypes() string {
	var b strings.Builder
	for i, typ := range eventTypes {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		if d == postgresDialect {
			fmt.Fprintf(&b, "(SELECT %s FROM events WHERE type = '%s' AND id > ? AND ? ORDER BY id LIMIT ?)", eventColumns, typ)
		} else {
			fmt.Fprintf(&b, "SELECT %s FROM events INDEXED BY %s WHERE type = '%s' AND id > ? AND ?", eventColumns, eventTypeIndexName(typ), typ)
		}
	}
	b.WriteString(" ORDER BY id LIMIT ?")
	return b.String()
}

// eventTypeIndexName is the name of the partial index of the events of typ
// (migration 0011): events_pet_created for pet.created.
func eventTypeIndexName(typ string) string {
	return "events_" + strings.ReplaceAll(typ, ".", "_")
}

// sqlInsertEventsJSON writes the events of a batch on PostgreSQL: any
// number of them, from one parameter holding a JSON array of [type,
// occurred_at, subject, data] arrays, inserted in the array's order (so
// their ids grow in that order; json, not jsonb: the strings come out
// exactly as they went in). The batch's events cost one round trip, which
// also sends the notification that wakes the streams of every replica (see
// eventsChannel) rather than a round trip of its own. SQLite inserts them
// with statements of VALUES (see valuesInsert).
const sqlInsertEventsJSON = `WITH inserted AS (
	INSERT INTO events (type, occurred_at, subject, data)
	SELECT e->>0, (e->>1)::bigint, e->>2, e->>3 FROM json_array_elements(?::json) WITH ORDINALITY AS t(e, n) ORDER BY n
	RETURNING id)
SELECT id FROM inserted CROSS JOIN pg_notify('` + eventsChannel + `', '')`

// eventStatements are the prepared statements of events.
type eventStatements struct {
	list, stream, listOfTypes, end, prunable, prune, markPruned *sql.Stmt
	insertTicket, takeTicket, pruneTickets                      *sql.Stmt
	insert                                                      *sql.Stmt    // PostgreSQL's
	insertRows                                                  valuesInsert // SQLite's
}

// statements declares the events' statements for prepare.
func (es *eventStatements) statements(s *store) []statement {
	out := []statement{
		{s.reader, &es.list, sqlListEvents},
		{s.reader, &es.stream, sqlStreamEvents},
		{s.reader, &es.listOfTypes, s.dialect.listEventsOfTypes()},
		{s.reader, &es.end, sqlEventsEnd},
		{s.writer, &es.prunable, sqlPrunableEvents},
		{s.writer, &es.prune, sqlPruneEvents},
		{s.writer, &es.markPruned, sqlMarkPruned},
		{s.writer, &es.insertTicket, sqlInsertTicket},
		{s.writer, &es.takeTicket, sqlTakeTicket},
		{s.writer, &es.pruneTickets, sqlPruneTickets},
	}
	if s.dialect == postgresDialect {
		return append(out, statement{s.writer, &es.insert, sqlInsertEventsJSON})
	}
	return append(out, es.insertRows.statements(s.writer, "INSERT INTO events (type, occurred_at, subject, data)", 4, " RETURNING id")...)
}

// eventWritten is what the writer tells the event feed of an event a batch
// committed.
type eventWritten struct {
	id  int64
	typ string
}

// insertEvents writes events, in their order, and returns what the feed is
// told of them once the batch commits.
func (tx *txn) insertEvents(events []Event) ([]eventWritten, error) {
	ids, err := tx.insertEventRows(events)
	if err != nil {
		return nil, tx.st.failedWrite("insert events", err)
	}
	if len(ids) != len(events) {
		return nil, fmt.Errorf("insert events: %d ids returned for %d events", len(ids), len(events))
	}
	// The ids were taken in the events' order; RETURNING need not list
	// them in that order.
	slices.Sort(ids)
	written := make([]eventWritten, len(events))
	for i, id := range ids {
		written[i] = eventWritten{id: id, typ: events[i].Type}
	}
	return written, nil
}

// insertEventRows inserts events, in their order, and returns their ids.
func (tx *txn) insertEventRows(events []Event) ([]int64, error) {
	ids := make([]int64, 0, len(events))
	if tx.st.dialect != postgresDialect {
		args := make([]any, 0, 4*len(events))
		for _, ev := range events {
			args = append(args, ev.Type, ev.OccurredAt.UnixMilli(), ev.Subject, string(ev.Data))
		}
		return tx.st.eventStmts.insertRows.queryIDs(tx, args, ids)
	}
	rows, err := tx.query(tx.st.eventStmts.insert, string(appendEventRows(nil, events)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// appendEventRows appends events as the JSON array that sqlInsertEventsJSON reads:
// one [type, occurred_at, subject, data] array each, data (itself JSON)
// as a string.
func appendEventRows(dst []byte, events []Event) []byte {
	dst = append(dst, '[')
	for i, ev := range events {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		dst = appendJSONString(dst, ev.Type)
		dst = append(dst, ',')
		dst = strconv.AppendInt(dst, ev.OccurredAt.UnixMilli(), 10)
		dst = append(dst, ',')
		dst = appendJSONString(dst, ev.Subject)
		dst = append(dst, ',')
		dst = appendJSONString(dst, string(ev.Data))
		dst = append(dst, ']')
	}
	return append(dst, ']')
}

// scanEvent reads a row of eventColumns.
func scanEvent(row interface{ Scan(...any) error }, ev *Event, more ...any) error {
	var at int64
	var data string
	if err := row.Scan(append([]any{&ev.ID, &ev.Type, &at, &ev.Subject, &data}, more...)...); err != nil {
		return err
	}
	ev.OccurredAt = time.UnixMilli(at).UTC()
	ev.Data = []byte(data)
	return nil
}

// listEvents returns up to limit events with an id greater than after, in
// id order, of the given types unless types is empty.
func (s *store) listEvents(ctx context.Context, after int64, limit int, types []string) ([]Event, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	stmt := s.eventStmts.list
	if len(types) > 0 {
		stmt = s.eventStmts.listOfTypes
	}
	// On PostgreSQL, the LIMITs written out (see store_pages.go).
	page, sized := s.pageStatement(ctx, stmt, limit)
	args := []any{after}
	if len(types) > 0 {
		args = typeFilterArgs(s.dialect, after, types, limit, sized)
	}
	if sized {
		stmt = page
	} else {
		args = append(args, limit)
	}
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, s.failed("list events", err)
	}
	defer rows.Close()
	events := make([]Event, 0, min(limit, 128))
	for rows.Next() {
		var ev Event
		if err := scanEvent(rows, &ev); err != nil {
			return nil, s.failed("list events", err)
		}
		events = append(events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, s.failed("list events", err)
	}
	return events, nil
}

// typeFilterArgs are the arguments of listEventsOfTypes before its last
// LIMIT: for each event type, the cursor and whether types holds it, and on
// PostgreSQL the arm's LIMIT unless the statement has its LIMITs written
// out (sized).
func typeFilterArgs(d dialect, after int64, types []string, limit int, sized bool) []any {
	args := make([]any, 0, 3*len(eventTypes)+1)
	for _, typ := range eventTypes {
		args = append(args, after, slices.Contains(types, typ))
		if d == postgresDialect && !sized {
			args = append(args, limit)
		}
	}
	return args
}

// streamEvents returns up to streamReadBatch events with an id greater than
// after, in id order, and the prune mark as the same statement read it: when
// the mark is past after, events after it are gone, and none of those
// returned may be sent as if they followed it. With no event after after, the
// mark is not read (0): there is nothing to send, and the next read that
// finds an event tells.
func (s *store) streamEvents(ctx context.Context, after int64) (events []Event, prunedThrough int64, err error) {
	s.streamReads.Add(1)
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	rows, err := s.eventStmts.stream.QueryContext(ctx, after)
	if err != nil {
		return nil, 0, s.failed("list events", err)
	}
	defer rows.Close()
	events = make([]Event, 0, streamReadBatch)
	for rows.Next() {
		var ev Event
		if err := scanEvent(rows, &ev, &prunedThrough); err != nil {
			return nil, 0, s.failed("list events", err)
		}
		events = append(events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.failed("list events", err)
	}
	return events, prunedThrough, nil
}

// eventBounds are the ends of the feed as the database holds it.
type eventBounds struct {
	end           int64 // the newest id handed out (0: none yet)
	prunedThrough int64 // every event up to this id was pruned
}

// eventBounds reads the feed's bounds.
func (s *store) eventBounds(ctx context.Context) (eventBounds, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	var b eventBounds
	if err := s.eventStmts.end.QueryRowContext(ctx).Scan(&b.end, &b.prunedThrough); err != nil {
		return eventBounds{}, s.failed("read the event feed's end", err)
	}
	b.end = max(b.end, b.prunedThrough)
	return b, nil
}

// pruneChunkEvents is how many events one prune write deletes at most, for
// the same reason as pruneChunk.
const pruneChunkEvents = 1000

// pruneEvents deletes the events that occurred at or before cutoff, oldest
// first and one chunk per write, and moves the prune mark past them. It
// deletes only a prefix of the ids: an event that occurred after cutoff
// stops it, even when older-looking ones follow (a clock stepped back), so
// that a cursor is either before the mark (410) or finds every event after
// it. It returns how many it deleted.
func (s *store) pruneEvents(ctx context.Context, cutoff time.Time) (int64, error) {
	type pruned struct{ through, n int64 }
	var total int64
	for {
		p, err := write(ctx, s, func(tx *txn) (pruned, error) {
			through, n, err := tx.prunableEvents(cutoff)
			if err != nil || n == 0 {
				return pruned{}, err
			}
			if _, err := tx.exec("prune events", tx.st.eventStmts.prune, through); err != nil {
				return pruned{}, err
			}
			if _, err := tx.exec("mark pruned events", tx.st.eventStmts.markPruned, through, through); err != nil {
				return pruned{}, err
			}
			return pruned{through, n}, nil
		})
		if err == nil && p.n > 0 {
			// A stream whose cursor is now below the mark must read the
			// table, which tells it its events are gone.
			s.events.pruned(p.through)
		}
		total += p.n
		if err != nil || p.n < pruneChunkEvents {
			return total, err
		}
	}
}

// prunableEvents finds the longest prefix of the oldest pruneChunkEvents
// events that occurred at or before cutoff: its last id and its length.
func (tx *txn) prunableEvents(cutoff time.Time) (through, n int64, err error) {
	rows, err := tx.query(tx.st.eventStmts.prunable, pruneChunkEvents)
	if err != nil {
		return 0, 0, tx.st.failed("find prunable events", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, at int64
		if err := rows.Scan(&id, &at); err != nil {
			return 0, 0, tx.st.failed("find prunable events", err)
		}
		if at > cutoff.UnixMilli() {
			break
		}
		through, n = id, n+1
	}
	if err := rows.Err(); err != nil {
		return 0, 0, tx.st.failed("find prunable events", err)
	}
	return through, n, nil
}

// ticketDigest is what the database keeps of a stream ticket: its SHA-256,
// so that the table holds nothing a reader of it could open a stream with.
func ticketDigest(ticket string) []byte {
	d := sha256.Sum256([]byte(ticket))
	return d[:]
}

// storeTicket records a stream ticket for the API key whose identity is
// keyID, valid until expires.
func (s *store) storeTicket(ctx context.Context, ticket string, keyID [sha256.Size]byte, expires time.Time) error {
	_, err := write(ctx, s, func(tx *txn) (struct{}, error) {
		_, err := tx.exec("store ticket", tx.st.eventStmts.insertTicket, ticketDigest(ticket), keyID[:], expires.UnixMilli())
		return struct{}{}, err
	})
	return err
}

// takeTicket consumes a stream ticket: it is deleted whether or not it is
// still valid, so that it opens one stream at most. ok is false when the
// ticket is unknown, used, or expired at now.
func (s *store) takeTicket(ctx context.Context, ticket string, now time.Time) (keyID [sha256.Size]byte, ok bool, err error) {
	type taken struct {
		keyID   []byte
		expires int64
	}
	t, err := write(ctx, s, func(tx *txn) (taken, error) {
		var t taken
		err := tx.queryRow(tx.st.eventStmts.takeTicket, ticketDigest(ticket)).Scan(&t.keyID, &t.expires)
		if errors.Is(err, sql.ErrNoRows) {
			return taken{}, nil
		}
		if err != nil {
			return taken{}, tx.st.failedWrite("take ticket", err)
		}
		return t, nil
	})
	if err != nil || t.keyID == nil || t.expires <= now.UnixMilli() {
		return keyID, false, err
	}
	copy(keyID[:], t.keyID)
	return keyID, true, nil
}

// pruneTickets deletes the tickets expired at now.
func (s *store) pruneTickets(ctx context.Context, now time.Time) (int64, error) {
	return write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("prune tickets", tx.st.eventStmts.pruneTickets, now.UnixMilli())
	})
}

// eventsChannel is the PostgreSQL notification channel on which a batch
// that committed events wakes the streams of every replica.
const eventsChannel = "petstore_events"

// pruneEventsEvery prunes the events older than retention, and the expired
// stream tickets, now and then every interval until ctx is done.
func pruneEventsEvery(ctx context.Context, log *slog.Logger, st *store, retention, interval time.Duration, now func() time.Time) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := st.pruneEvents(ctx, now().Add(-retention))
		if err == nil {
			_, err = st.pruneTickets(ctx, now())
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.WarnContext(ctx, "pruning events failed; will retry", "err", err)
		case n > 0:
			log.InfoContext(ctx, "pruned events past their retention", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

const (
	// streamReadBatch is how many events a stream reads per query.
	streamReadBatch = 100
)
