package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The webhooks' SQL: the subscriptions (webhooks) and the log of their
// delivery attempts (webhook_deliveries), migration 0009. Both are the
// store's own bookkeeping, not resources of the change feed: their writes go
// through tx.exec and tx.queryRow, and make no event (a subscription's
// changes are not themselves delivered to subscriptions).
//
// The dispatcher's writes are fenced by the lease: a replica records an
// attempt, moves the cursor or gives up only while it still holds the
// subscription's lease (lease_owner = its own id), so a replica that lost
// the lease (it stalled, another took over) changes nothing.

// maxWebhooks bounds the subscriptions, all keys together: each one costs a
// goroutine, a lease and outbound connections.
const maxWebhooks = 100

const (
	webhookColumns = "id, url, types, description, status, status_reason, created_at, secret, previous_secret, previous_until, " +
		"delivered_through, attempts, first_failure_at, next_attempt_at, lease_owner, lease_until"
	sqlCountWebhooks  = "SELECT count(*) FROM webhooks"
	sqlInsertWebhook  = "INSERT INTO webhooks (url, types, description, status, created_at, secret, delivered_through) VALUES (?, ?, ?, 'active', ?, ?, ?) RETURNING " + webhookColumns
	sqlSelectWebhook  = "SELECT " + webhookColumns + " FROM webhooks WHERE id = ?"
	sqlListWebhooks   = "SELECT " + webhookColumns + " FROM webhooks WHERE id > ? ORDER BY id LIMIT ?"
	sqlListWebhooksBy = "SELECT " + webhookColumns + " FROM webhooks WHERE status = ? AND id > ? ORDER BY id LIMIT ?"
	sqlUpdateWebhook  = "UPDATE webhooks SET url = ?, types = ?, description = ?, status = ?, status_reason = ?, delivered_through = ?, " +
		"first_failure_at = ?, next_attempt_at = ? WHERE id = ? RETURNING " + webhookColumns
	sqlDeleteWebhook = "DELETE FROM webhooks WHERE id = ?"
	sqlRotateSecret  = "UPDATE webhooks SET previous_secret = secret, previous_until = ?, secret = ? WHERE id = ? RETURNING " + webhookColumns

	// The dispatcher's statements.
	sqlWebhookCandidates = "SELECT id FROM webhooks WHERE status = 'active' AND (lease_owner IS NULL OR lease_owner = ? OR lease_until < ?) ORDER BY id"
	sqlTakeLease         = "UPDATE webhooks SET lease_owner = ?, lease_until = ? WHERE id = ? AND status = 'active' AND (lease_owner IS NULL OR lease_owner = ? OR lease_until < ?)"
	sqlRenewLeases       = "UPDATE webhooks SET lease_until = ? WHERE lease_owner = ? RETURNING id"
	sqlReleaseLeases     = "UPDATE webhooks SET lease_owner = NULL, lease_until = 0 WHERE lease_owner = ?"
	sqlReleaseLease      = "UPDATE webhooks SET lease_owner = NULL, lease_until = 0 WHERE id = ? AND lease_owner = ?"
	sqlFreeLeases        = "UPDATE webhooks SET lease_owner = NULL, lease_until = 0 WHERE lease_owner IS NOT NULL"
	sqlDelivered         = "UPDATE webhooks SET delivered_through = ?, attempts = 0, first_failure_at = NULL, next_attempt_at = NULL WHERE id = ? AND lease_owner = ? AND delivered_through < ?"
	sqlAttemptFailed     = "UPDATE webhooks SET attempts = ?, first_failure_at = ?, next_attempt_at = ? WHERE id = ? AND lease_owner = ? AND delivered_through = ?"
	sqlGiveUp            = "UPDATE webhooks SET status = 'failing', status_reason = ?, attempts = ?, first_failure_at = ?, next_attempt_at = NULL WHERE id = ? AND lease_owner = ? AND delivered_through = ?"
	sqlPassOver          = "UPDATE webhooks SET delivered_through = ? WHERE id = ? AND lease_owner = ? AND delivered_through < ?"
	sqlInsertDelivery    = "INSERT INTO webhook_deliveries (webhook_id, event_id, attempt, started_at, duration_ms, status_code, error, next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
	sqlListDeliveries    = "SELECT id, event_id, attempt, started_at, duration_ms, status_code, error, next_attempt_at FROM webhook_deliveries WHERE webhook_id = ? AND id < ? ORDER BY id DESC LIMIT ?"
	sqlPruneDeliveries   = "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries WHERE event_id <= ? LIMIT 1000)"
)

// webhookStatements are the prepared statements of webhooks.
type webhookStatements struct {
	count, insert, selectOne, selectOneTx, list, listBy, update, remove, rotate *sql.Stmt
	candidates, takeLease, renewLeases, releaseLeases, releaseLease, freeLeases *sql.Stmt
	delivered, attemptFailed, giveUp, passOver, insertDelivery                  *sql.Stmt
	listDeliveries, pruneDeliveries, eventsEndTx                                *sql.Stmt
}

// statements declares the webhooks' statements for prepare.
func (ws *webhookStatements) statements(s *store) []statement {
	return []statement{
		{s.writer, &ws.count, sqlCountWebhooks},
		{s.writer, &ws.insert, sqlInsertWebhook},
		{s.reader, &ws.selectOne, sqlSelectWebhook},
		{s.writer, &ws.selectOneTx, sqlSelectWebhook},
		{s.reader, &ws.list, sqlListWebhooks},
		{s.reader, &ws.listBy, sqlListWebhooksBy},
		{s.writer, &ws.update, sqlUpdateWebhook},
		{s.writer, &ws.remove, sqlDeleteWebhook},
		{s.writer, &ws.rotate, sqlRotateSecret},
		{s.reader, &ws.candidates, sqlWebhookCandidates},
		{s.writer, &ws.takeLease, sqlTakeLease},
		{s.writer, &ws.renewLeases, sqlRenewLeases},
		{s.writer, &ws.releaseLeases, sqlReleaseLeases},
		{s.writer, &ws.releaseLease, sqlReleaseLease},
		{s.writer, &ws.freeLeases, sqlFreeLeases},
		{s.writer, &ws.delivered, sqlDelivered},
		{s.writer, &ws.attemptFailed, sqlAttemptFailed},
		{s.writer, &ws.giveUp, sqlGiveUp},
		{s.writer, &ws.passOver, sqlPassOver},
		{s.writer, &ws.insertDelivery, sqlInsertDelivery},
		{s.reader, &ws.listDeliveries, sqlListDeliveries},
		{s.writer, &ws.pruneDeliveries, sqlPruneDeliveries},
		{s.writer, &ws.eventsEndTx, sqlEventsEnd},
	}
}

// webhookLimitError is the refusal of a subscription past maxWebhooks.
type webhookLimitError struct{ max int }

func (e *webhookLimitError) Error() string {
	return fmt.Sprintf("%d webhook subscriptions exist, the most the service keeps", e.max)
}

// webhook is a subscription as the store keeps it: what the API shows, and
// what only the dispatcher reads (the secrets, the cursor, the retry state
// and the lease). Instants are zero when the column is NULL.
type webhook struct {
	ID           int64
	URL          string
	Patterns     []string // the type patterns as given: ["*"] for every type
	Description  string
	Status       string
	StatusReason string // "" unless failing
	CreatedAt    time.Time

	secret         string
	previousSecret string
	previousUntil  time.Time

	deliveredThrough int64 // the newest event id delivered or passed over
	attempts         int   // attempts made of the next event
	firstFailureAt   time.Time
	nextAttemptAt    time.Time

	leaseOwner string
	leaseUntil int64 // Unix milliseconds
}

// msTime reads a nullable Unix-milliseconds column.
func msTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// nullMS writes an instant as a nullable Unix-milliseconds column.
func nullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// nullText writes a string as a nullable column: "" is NULL.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// scanWebhook reads a row of webhookColumns.
func scanWebhook(row interface{ Scan(...any) error }, w *webhook) error {
	var types string
	var reason, prevSecret, owner sql.NullString
	var prevUntil, firstFailure, nextAttempt sql.NullInt64
	var created int64
	if err := row.Scan(&w.ID, &w.URL, &types, &w.Description, &w.Status, &reason, &created, &w.secret, &prevSecret, &prevUntil,
		&w.deliveredThrough, &w.attempts, &firstFailure, &nextAttempt, &owner, &w.leaseUntil); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(types), &w.Patterns); err != nil {
		return fmt.Errorf("webhook %d: types %q: %w", w.ID, types, err)
	}
	w.StatusReason, w.previousSecret, w.leaseOwner = reason.String, prevSecret.String, owner.String
	w.CreatedAt = time.UnixMilli(created).UTC()
	w.previousUntil, w.firstFailureAt, w.nextAttemptAt = msTime(prevUntil), msTime(firstFailure), msTime(nextAttempt)
	return nil
}

// patternsJSON is the types column of patterns.
func patternsJSON(patterns []string) string {
	b, _ := json.Marshal(patterns) // strings always encode
	return string(b)
}

// webhookNotFound is the refusal of an id no subscription has.
func webhookNotFound(id int64) error { return &notFoundError{what: "webhook subscription", id: id} }

// webhookFilter says whether the caller may see and manage a subscription
// that delivers the given type patterns (see mayManageWebhook); nil lets
// every subscription through, for the dispatcher. The store applies it
// inside the read or the transaction of each operation, so a subscription
// is refused exactly as if it did not exist: webhookNotFound, and absent
// from the lists.
type webhookFilter func(patterns []string) bool

// allows reports whether f lets w through.
func (f webhookFilter) allows(w webhook) bool { return f == nil || f(w.Patterns) }

// newWebhook is a validated createWebhook request.
type newWebhook struct {
	URL         string
	Patterns    []string
	Description string
}

// createWebhook stores a new active subscription whose cursor is the feed's
// end, read in the same transaction: delivery starts with the first event
// committed after the subscription (the write lock orders the two).
func (s *store) createWebhook(ctx context.Context, nw newWebhook, secret string, at time.Time) (webhook, error) {
	o, err := write(ctx, s, func(tx *txn) (outcome[webhook], error) {
		var n int
		if err := tx.queryRow(tx.st.webhookStmts.count).Scan(&n); err != nil {
			return outcome[webhook]{}, tx.st.failed("count webhooks", err)
		}
		if n >= maxWebhooks {
			return refuse[webhook](&webhookLimitError{max: maxWebhooks})
		}
		var end, pruned int64
		if err := tx.queryRow(tx.st.webhookStmts.eventsEndTx).Scan(&end, &pruned); err != nil {
			return outcome[webhook]{}, tx.st.failed("read the event feed's end", err)
		}
		var w webhook
		err := scanWebhook(tx.queryRow(tx.st.webhookStmts.insert, nw.URL, patternsJSON(nw.Patterns), nw.Description, at.UnixMilli(), secret, max(end, pruned)), &w)
		if err != nil {
			return outcome[webhook]{}, tx.st.failedWrite("insert webhook", err)
		}
		return outcome[webhook]{value: w}, nil
	})
	return o.result(err)
}

// getWebhook returns the subscription id, or a *notFoundError when there is
// none, or none that filter lets through.
func (s *store) getWebhook(ctx context.Context, id int64, filter webhookFilter) (webhook, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	var w webhook
	err := scanWebhook(s.webhookStmts.selectOne.QueryRowContext(ctx, id), &w)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !filter.allows(w)) {
		return webhook{}, webhookNotFound(id)
	}
	if err != nil {
		return webhook{}, s.failed("select webhook", err)
	}
	return w, nil
}

// listWebhooks returns a page of the subscriptions that filter lets
// through, of the given status unless it is "". Those it leaves out are
// skipped, reading on until the page is full (there are at most
// maxWebhooks), so a page is short only at the end.
func (s *store) listWebhooks(ctx context.Context, status string, pr pageRequest, filter webhookFilter) (page[webhook], error) {
	var items []webhook
	for {
		var p page[webhook]
		var err error
		if status == "" {
			p, err = queryPage(ctx, s, "list webhooks", s.webhookStmts.list, pr, scanWebhook)
		} else {
			p, err = queryPage(ctx, s, "list webhooks", s.webhookStmts.listBy, pr, scanWebhook, status)
		}
		if err != nil {
			return page[webhook]{}, err
		}
		for _, w := range p.items {
			if filter.allows(w) {
				items = append(items, w)
			}
		}
		switch {
		case len(items) > pr.limit:
			return page[webhook]{items: items[:pr.limit], more: true}, nil
		case !p.more:
			return page[webhook]{items: items}, nil
		}
		pr.after = p.items[len(p.items)-1].ID
	}
}

// webhookPatch is a validated merge patch of a subscription: the fields to
// set, nil for those to keep.
type webhookPatch struct {
	URL         *string
	Patterns    []string // nil: keep
	Description *string
	Status      *string // active or paused
}

// updateWebhook applies patch to the subscription id at the instant at.
// Re-activating a subscription (from paused or failing) resumes with the
// first event it has not delivered, at once: the retry schedule starts
// again, and a cursor behind the prune mark moves up to it (those events
// are gone; see docs/webhooks.md). A new URL is tried at once too.
func (s *store) updateWebhook(ctx context.Context, id int64, patch webhookPatch, filter webhookFilter) (webhook, error) {
	o, err := write(ctx, s, func(tx *txn) (outcome[webhook], error) {
		w, err := tx.selectWebhook(id, filter)
		if err != nil {
			return outcome[webhook]{}, err
		}
		if w.ID == 0 {
			return refuse[webhook](webhookNotFound(id))
		}
		retryNow := false
		if patch.URL != nil && *patch.URL != w.URL {
			w.URL, retryNow = *patch.URL, true
		}
		if patch.Patterns != nil {
			w.Patterns = patch.Patterns
		}
		if patch.Description != nil {
			w.Description = *patch.Description
		}
		if patch.Status != nil && *patch.Status != w.Status {
			if *patch.Status == webhookActive {
				var end, pruned int64
				if err := tx.queryRow(tx.st.webhookStmts.eventsEndTx).Scan(&end, &pruned); err != nil {
					return outcome[webhook]{}, tx.st.failed("read the event feed's end", err)
				}
				w.deliveredThrough = max(w.deliveredThrough, pruned)
				w.firstFailureAt, retryNow = time.Time{}, true
			}
			w.Status, w.StatusReason = *patch.Status, ""
		}
		if retryNow {
			w.nextAttemptAt = time.Time{}
		}
		err = scanWebhook(tx.queryRow(tx.st.webhookStmts.update, w.URL, patternsJSON(w.Patterns), w.Description, w.Status, nullText(w.StatusReason),
			w.deliveredThrough, nullMS(w.firstFailureAt), nullMS(w.nextAttemptAt), id), &w)
		if err != nil {
			return outcome[webhook]{}, tx.st.failedWrite("update webhook", err)
		}
		return outcome[webhook]{value: w}, nil
	})
	return o.result(err)
}

// selectWebhook reads the subscription id in the transaction, for a change
// of it; its ID is 0 when there is none, or none that filter lets through.
func (tx *txn) selectWebhook(id int64, filter webhookFilter) (webhook, error) {
	var w webhook
	err := scanWebhook(tx.queryRow(tx.st.webhookStmts.selectOneTx, id), &w)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return webhook{}, nil
	case err != nil:
		return webhook{}, tx.st.failed("select webhook", err)
	case !filter.allows(w):
		return webhook{}, nil
	}
	return w, nil
}

// deleteWebhook deletes the subscription id, if filter lets it through, and
// its delivery log.
func (s *store) deleteWebhook(ctx context.Context, id int64, filter webhookFilter) error {
	o, err := write(ctx, s, func(tx *txn) (outcome[struct{}], error) {
		w, err := tx.selectWebhook(id, filter)
		if err != nil {
			return outcome[struct{}]{}, err
		}
		if w.ID == 0 {
			return refuse[struct{}](webhookNotFound(id))
		}
		if _, err := tx.exec("delete webhook", tx.st.webhookStmts.remove, id); err != nil {
			return outcome[struct{}]{}, err
		}
		return outcome[struct{}]{}, nil
	})
	_, err = o.result(err)
	return err
}

// rotateWebhookSecret makes secret the secret of the subscription id, if
// filter lets it through; the one it replaces still signs until
// overlapUntil. A secret older than that one is forgotten.
func (s *store) rotateWebhookSecret(ctx context.Context, id int64, secret string, overlapUntil time.Time, filter webhookFilter) (webhook, error) {
	o, err := write(ctx, s, func(tx *txn) (outcome[webhook], error) {
		w, err := tx.selectWebhook(id, filter)
		if err != nil {
			return outcome[webhook]{}, err
		}
		if w.ID == 0 {
			return refuse[webhook](webhookNotFound(id))
		}
		err = scanWebhook(tx.queryRow(tx.st.webhookStmts.rotate, overlapUntil.UnixMilli(), secret, id), &w)
		if err != nil {
			return outcome[webhook]{}, tx.st.failedWrite("rotate webhook secret", err)
		}
		return outcome[webhook]{value: w}, nil
	})
	return o.result(err)
}

// delivery is one attempt to deliver an event, as the log keeps it.
type delivery struct {
	ID            int64
	WebhookID     int64
	EventID       int64
	Attempt       int
	StartedAt     time.Time
	Duration      time.Duration
	StatusCode    int    // 0: no HTTP answer came
	Error         string // "": none
	NextAttemptAt time.Time
}

// scanDelivery reads a row of sqlListDeliveries.
func scanDelivery(row interface{ Scan(...any) error }, d *delivery) error {
	var started, durationMS int64
	var status sql.NullInt64
	var errText sql.NullString
	var next sql.NullInt64
	if err := row.Scan(&d.ID, &d.EventID, &d.Attempt, &started, &durationMS, &status, &errText, &next); err != nil {
		return err
	}
	d.StartedAt, d.Duration = time.UnixMilli(started).UTC(), time.Duration(durationMS)*time.Millisecond
	d.StatusCode, d.Error, d.NextAttemptAt = int(status.Int64), errText.String, msTime(next)
	return nil
}

// listDeliveries returns a page of the delivery log of the subscription id,
// newest first: the attempts with an id below before.
func (s *store) listDeliveries(ctx context.Context, id, before int64, limit int, filter webhookFilter) (page[delivery], error) {
	if _, err := s.getWebhook(ctx, id, filter); err != nil {
		return page[delivery]{}, err
	}
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	rows, err := s.webhookStmts.listDeliveries.QueryContext(ctx, id, before, limit+1)
	if err != nil {
		return page[delivery]{}, s.failed("list deliveries", err)
	}
	defer rows.Close()
	items := make([]delivery, 0, limit+1)
	for rows.Next() {
		d := delivery{WebhookID: id}
		if err := scanDelivery(rows, &d); err != nil {
			return page[delivery]{}, s.failed("list deliveries", err)
		}
		items = append(items, d)
	}
	if err := rows.Err(); err != nil {
		return page[delivery]{}, s.failed("list deliveries", err)
	}
	if len(items) > limit {
		return page[delivery]{items: items[:limit], more: true}, nil
	}
	return page[delivery]{items: items}, nil
}

// webhookCandidates are the active subscriptions whose lease is free, held
// by owner already, or expired at now.
func (s *store) webhookCandidates(ctx context.Context, owner string, now time.Time) ([]int64, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	rows, err := s.webhookStmts.candidates.QueryContext(ctx, owner, now.UnixMilli())
	if err != nil {
		return nil, s.failed("list webhook candidates", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, s.failed("list webhook candidates", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, s.failed("list webhook candidates", err)
	}
	return ids, nil
}

// takeWebhookLease gives owner the lease of the subscription id until
// until, when it is active and its lease is free, owner's already, or
// expired at now.
func (s *store) takeWebhookLease(ctx context.Context, id int64, owner string, until, now time.Time) (bool, error) {
	n, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("take webhook lease", tx.st.webhookStmts.takeLease, owner, until.UnixMilli(), id, owner, now.UnixMilli())
	})
	return n == 1, err
}

// renewWebhookLeases extends every lease owner holds to until, and returns
// their ids: a subscription missing from them was deleted or taken over,
// and its delivery stops at once. (One paused stops by itself, after the
// attempt in progress.)
func (s *store) renewWebhookLeases(ctx context.Context, owner string, until time.Time) (map[int64]bool, error) {
	return write(ctx, s, func(tx *txn) (map[int64]bool, error) {
		rows, err := tx.query(tx.st.webhookStmts.renewLeases, until.UnixMilli(), owner)
		if err != nil {
			return nil, tx.st.failedWrite("renew webhook leases", err)
		}
		defer rows.Close()
		held := map[int64]bool{}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return nil, tx.st.failed("renew webhook leases", err)
			}
			held[id] = true
		}
		if err := rows.Err(); err != nil {
			return nil, tx.st.failedWrite("renew webhook leases", err)
		}
		return held, nil
	})
}

// releaseWebhookLeases frees the leases owner holds: of the subscription id,
// or every one when id is 0.
func (s *store) releaseWebhookLeases(ctx context.Context, owner string, id int64) error {
	_, err := write(ctx, s, func(tx *txn) (int64, error) {
		if id == 0 {
			return tx.exec("release webhook leases", tx.st.webhookStmts.releaseLeases, owner)
		}
		return tx.exec("release webhook lease", tx.st.webhookStmts.releaseLease, id, owner)
	})
	return err
}

// freeLeftWebhookLeases frees, on SQLite, every lease of a subscription, and
// returns how many there were. It runs as the dispatcher starts: a SQLite
// file is served by one process, which holds its lock (see lockDatabase), so
// a lease found then was left by a process that died (SIGKILL, a crash, a
// power cut) without releasing it, and waiting for it to expire would hold
// back deliveries for up to -webhook-lease. On PostgreSQL a lease may be a
// live replica's: they are kept, and expire as they would.
func (s *store) freeLeftWebhookLeases(ctx context.Context) (int64, error) {
	if s.dialect == postgresDialect {
		return 0, nil
	}
	return write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("free webhook leases", tx.st.webhookStmts.freeLeases)
	})
}

// attemptOutcome is what became of an attempt, for recordAttempt.
type attemptOutcome struct {
	delivered bool
	giveUp    string // when not "": the subscription becomes failing, for this reason
	// The retry state after a failed attempt.
	firstFailureAt time.Time
	nextAttemptAt  time.Time
}

// recordAttempt logs the attempt d of the subscription w and moves its
// state on by out, if owner still holds the lease and the cursor has not
// moved: it reports false, writing nothing, otherwise.
func (s *store) recordAttempt(ctx context.Context, owner string, w webhook, d delivery, out attemptOutcome) (bool, error) {
	return write(ctx, s, func(tx *txn) (bool, error) {
		var n int64
		var err error
		ws := tx.st.webhookStmts
		switch {
		case out.delivered:
			n, err = tx.exec("record webhook delivery", ws.delivered, d.EventID, w.ID, owner, d.EventID)
		case out.giveUp != "":
			n, err = tx.exec("record webhook failure", ws.giveUp, out.giveUp, d.Attempt, nullMS(out.firstFailureAt), w.ID, owner, w.deliveredThrough)
		default:
			n, err = tx.exec("record webhook failure", ws.attemptFailed, d.Attempt, nullMS(out.firstFailureAt), nullMS(out.nextAttemptAt), w.ID, owner, w.deliveredThrough)
		}
		if err != nil || n == 0 {
			return false, err
		}
		var status, next any
		if d.StatusCode != 0 {
			status = d.StatusCode
		}
		next = nullMS(d.NextAttemptAt)
		_, err = tx.exec("insert webhook delivery", ws.insertDelivery, w.ID, d.EventID, d.Attempt, d.StartedAt.UnixMilli(), d.Duration.Milliseconds(), status, nullText(d.Error), next)
		return err == nil, err
	})
}

// passOverEvents moves the cursor of the subscription w to through, past
// events it does not subscribe to, if owner holds its lease.
func (s *store) passOverEvents(ctx context.Context, owner string, id, through int64) error {
	_, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("pass over events", tx.st.webhookStmts.passOver, through, id, owner, through)
	})
	return err
}

// failWebhook sets the subscription w to failing for reason, if owner holds
// its lease and its cursor has not moved.
func (s *store) failWebhook(ctx context.Context, owner string, w webhook, reason string) error {
	_, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("fail webhook", tx.st.webhookStmts.giveUp, reason, w.attempts, nullMS(w.firstFailureAt), w.ID, owner, w.deliveredThrough)
	})
	return err
}

// pruneDeliveries deletes the delivery log of the events up to through
// (those pruned from the feed), a chunk per write.
func (s *store) pruneDeliveries(ctx context.Context, through int64) (int64, error) {
	var total int64
	for {
		n, err := write(ctx, s, func(tx *txn) (int64, error) {
			return tx.exec("prune webhook deliveries", tx.st.webhookStmts.pruneDeliveries, through)
		})
		total += n
		if err != nil || n < 1000 {
			return total, err
		}
	}
}
