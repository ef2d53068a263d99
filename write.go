package main

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"
)

// Group commit. With synchronous=FULL every commit waits for an fsync, which
// costs far more than the inserts it makes durable. So writes are not
// committed one by one: each is a writeJob handed to one writer goroutine,
// which runs every job waiting at that moment inside one transaction, commits
// once (one fsync for all of them) and only then answers each job. A request
// is still answered only after its own row is on disk, and a job that fails
// is undone alone, without disturbing the others in the batch (see
// runBatch).
//
// Any write can join the shared transaction, not only createPet: a feature
// that must record another row atomically with a pet passes one function
// doing both to write, as the idempotent create does with its key's row.

// maxBatch bounds how many jobs share one transaction, so that one commit
// never holds back a request for long; maxLinger bounds how long the writer
// waits for the jobs it expects to join a batch (see collect).
const (
	maxBatch  = 256
	maxLinger = 500 * time.Microsecond
)

// writeEffect says what a write job does to the pets the API serves, so that
// the response caches drop exactly what a commit may have changed.
type writeEffect int

const (
	// onlyAppendsPets: the job inserts new pets (each with an id greater
	// than every id before it) or writes tables the API's reads never
	// show; it never changes or deletes an existing pet.
	onlyAppendsPets writeEffect = iota
	// changesPets: the job may change or delete existing pets. Every
	// cached answer is dropped after its commit.
	changesPets
)

// writeJob is one write, run by the writer inside the batch transaction.
type writeJob struct {
	ctx    context.Context
	effect writeEffect
	run    func(ctx context.Context, tx *sql.Tx) error
	done   chan error // receives the job's own result, once
}

// write runs fn inside a write transaction shared with the other writes
// waiting at the same moment, and returns once that transaction is committed
// (fn's error, or the commit's, when either fails). fn must do all its work
// through tx and must not keep tx: it is committed by the writer. fn may run
// more than once (when another job of its batch fails, the batch is rolled
// back and run again): only the run whose transaction commits counts, so fn
// must set its results afresh on each run and act on nothing outside tx. fn
// runs on the writer goroutine, so it must not call write itself (that would
// wait for the writer forever).
func (s *store) write(ctx context.Context, effect writeEffect, fn func(ctx context.Context, tx *sql.Tx) error) error {
	job := &writeJob{ctx: ctx, effect: effect, run: fn, done: make(chan error, 1)}
	select {
	case s.jobs <- job:
	case <-s.quit:
		return errStoreClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once taken, a job is answered after its batch ends: waiting for that
	// even if ctx ends means a request never returns while its row may
	// still commit. Only a writer that stopped first never answers.
	select {
	case err := <-job.done:
		return err
	case <-s.stopped:
		select {
		case err := <-job.done:
			return err
		default:
			return errStoreClosed
		}
	}
}

// writeLoop is the writer goroutine: it takes the jobs in batches until
// Close, then signals that it has stopped.
func (s *store) writeLoop() {
	defer close(s.stopped)
	batch := make([]*writeJob, 0, maxBatch)
	expect := 1
	for {
		select {
		case job := <-s.jobs:
			batch = append(batch[:0], job)
		case <-s.quit:
			// Jobs still queued are refused, not run: Close comes after
			// the server has drained its requests, so there are none
			// unless a caller raced Close.
			for {
				select {
				case job := <-s.jobs:
					job.done <- errStoreClosed
				default:
					return
				}
			}
		}
		batch = s.collect(batch, expect)
		expect = s.runBatch(batch)
		clear(batch) // let the finished jobs be collected
	}
}

// collect adds to batch the jobs already waiting. When fewer than expect are
// there, it lingers up to maxLinger for the others. Under steady concurrent
// load, the clients answered by the last commit are sending their next
// requests right now; committing without them would split the writers into
// two groups that take turns, each request waiting for two fsyncs instead of
// one. A lone writer (expect 1) never waits.
func (s *store) collect(batch []*writeJob, expect int) []*writeJob {
	expect = min(expect, maxBatch)
	for len(batch) < maxBatch {
		select {
		case job := <-s.jobs:
			batch = append(batch, job)
			continue
		default:
		}
		break
	}
	if len(batch) >= expect {
		return batch
	}
	timer := time.NewTimer(maxLinger)
	defer timer.Stop()
	for len(batch) < expect {
		select {
		case job := <-s.jobs:
			batch = append(batch, job)
		case <-timer.C:
			return batch
		}
	}
	return batch
}

// errRetryWithSavepoints is how attemptBatch says that a job failed in a
// batch run without savepoints, so the batch must run again with them.
var errRetryWithSavepoints = errors.New("a job failed; run the batch again with savepoints")

// runBatch runs the jobs in one transaction, commits it, moves the versions,
// then answers every job. It returns how many jobs the next batch should
// expect: the writers active during this one, its own and those that queued
// meanwhile. Most batches have no failing job, so they first run
// without savepoints (three statements fewer per job). When a job fails, that
// attempt is rolled back whole and the batch runs again with a savepoint
// around each job, so that only the failed jobs are undone.
func (s *store) runBatch(batch []*writeJob) (expect int) {
	results, effect, committed, err := s.attemptBatch(batch, false)
	if errors.Is(err, errRetryWithSavepoints) {
		results, effect, committed, err = s.attemptBatch(batch, true)
	}
	if committed {
		// The versions move after the commit and before any job is
		// answered: a read that starts after a client saw its 201 sees
		// the new versions, so it is never served an answer cached from
		// before the commit.
		s.versions.committed(effect)
	}
	expect = len(batch) + len(s.jobs)
	for i, job := range batch {
		if results[i] == nil {
			results[i] = err
		}
		job.done <- results[i]
	}
	return expect
}

// attemptBatch runs the jobs in one transaction and commits it when a job
// wrote. results holds each job's own error; err is the transaction's, which
// every job without an error of its own shares, counted and marked as
// failedWrite does (so that a full or read-only disk is a 503, not a 500).
func (s *store) attemptBatch(batch []*writeJob, savepoints bool) (results []error, effect writeEffect, committed bool, err error) {
	results = make([]error, len(batch))
	// The transaction belongs to the batch, not to any one request: a
	// client that goes away must not roll back the others' rows.
	bg := context.Background()
	tx, err := s.writer.BeginTx(bg, nil)
	if err != nil {
		return results, effect, false, s.failedWrite("begin write transaction", err)
	}
	defer tx.Rollback() // a no-op after Commit
	wrote := false
	for i, job := range batch {
		if err := job.ctx.Err(); err != nil {
			// The request ended while it waited: its write never starts.
			results[i] = err
			continue
		}
		// Once started, a job runs to its end: interrupting a statement
		// half-way would only waste the work (see readContext).
		ctx := context.WithoutCancel(job.ctx)
		switch {
		case !savepoints:
			if err := job.run(ctx, tx); err != nil {
				if len(batch) > 1 {
					return results, effect, false, errRetryWithSavepoints
				}
				// Alone in the transaction, its failure leaves nothing
				// to commit.
				results[i] = err
				continue
			}
		default:
			jobErr, txErr := s.runInSavepoint(ctx, tx, job)
			if txErr != nil {
				// The transaction itself is in doubt: nothing in it may
				// be committed.
				return results, effect, false, txErr
			}
			if jobErr != nil {
				results[i] = jobErr
				continue
			}
		}
		wrote = true
		effect = max(effect, job.effect)
	}
	if !wrote {
		return results, effect, false, nil
	}
	if err := tx.Commit(); err != nil {
		return results, effect, false, s.failedWrite("commit write transaction", err)
	}
	return results, effect, true, nil
}

// runInSavepoint runs one job inside a savepoint, so that its failure
// (jobErr) undoes only its own statements. txErr means the transaction can no
// longer be trusted.
func (s *store) runInSavepoint(ctx context.Context, tx *sql.Tx, job *writeJob) (jobErr, txErr error) {
	if _, err := tx.StmtContext(ctx, s.savepoint).ExecContext(ctx); err != nil {
		return nil, s.failedWrite("savepoint", err)
	}
	jobErr = job.run(ctx, tx)
	if jobErr != nil {
		if _, err := tx.StmtContext(ctx, s.rollbackTo).ExecContext(ctx); err != nil {
			return nil, s.failedWrite("rollback to savepoint", err)
		}
	}
	if _, err := tx.StmtContext(ctx, s.release).ExecContext(ctx); err != nil {
		return nil, s.failedWrite("release savepoint", err)
	}
	return jobErr, nil
}

// versions count the commits that touched pets, for the response caches. A
// cached answer records the versions read before its query ran; it may be
// served only while they still hold (see cacheEntry.fresh).
type versions struct {
	appends atomic.Uint64 // commits of any write
	changes atomic.Uint64 // commits that may have changed or deleted a pet
}

// snapshot is the pair of versions at one instant.
type snapshot struct{ appends, changes uint64 }

// now reads both versions. Both move only after a commit and are read
// before the query that fills a cache entry, so that query always ran after
// every commit the snapshot counts.
func (v *versions) now() snapshot {
	return snapshot{appends: v.appends.Load(), changes: v.changes.Load()}
}

// committed records a commit with the given effect.
func (v *versions) committed(effect writeEffect) {
	if effect == changesPets {
		v.changes.Add(1)
	}
	v.appends.Add(1)
}
