package main

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
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
// never holds back a request for long. The writer lingers for the jobs it
// expects to join a batch (see collect) as long as they have been taking
// to come back (see linger), between minLinger and maxLinger. maxLinger
// is 10 ms, not 2: on one CPU, 32 writers each needing some 100 µs of CPU
// for their next request take 3 ms or more to come back, and a cap of
// 2 ms split their batches (bench https, one CPU: creates over HTTP/2 0.62
// of HTTP/1.1's with 2 ms, 0.75 with 10; on two CPUs the same with both;
// measured again once the writer yields before each batch, 10 ms made 1.11
// times the creates of 2 ms over HTTP/2 on one CPU).
const (
	maxBatch  = 256
	minLinger = 100 * time.Microsecond
	maxLinger = 10 * time.Millisecond
)

// linger is how long the writer waits for the writers it expects to join a
// batch: twice the time they took to come back of late, an average over
// the last batches that had to wait (1/8 of each new one), within minLinger
// and maxLinger. The time writers take to come back after their answer is
// theirs, not the writer's: over HTTP/1.1 on two CPUs, a few hundred
// microseconds; over HTTP/2, where every request is a new goroutine and
// each answer is written by the connection's own, more; on one CPU, more
// again. A fixed wait that suits one splits the batches of another in two
// groups that take turns, each request then waiting for two commits.
type linger struct {
	average time.Duration // of the waits the writers needed, the last batches
}

// wait is the linger of the next batch.
func (l *linger) wait() time.Duration {
	if l.average == 0 {
		return 500 * time.Microsecond // until the writers are measured
	}
	return min(max(2*l.average, minLinger), maxLinger)
}

// observe takes the wait a batch needed for its writers (waited), or, when
// they had not all come when the linger ended (timedOut), the linger that
// was too short, which pushes the next one up.
func (l *linger) observe(waited time.Duration, timedOut bool) {
	if timedOut {
		waited = waited * 3 / 2
	}
	if l.average == 0 {
		l.average = waited
		return
	}
	l.average += (waited - l.average) / 8
}

// writeJob is one write, run by the writer inside the batch transaction.
type writeJob struct {
	ctx  context.Context
	run  func(tx *txn) (any, error)
	done chan jobResult // receives the job's own result, once
	// insertOnly says that the job only inserts pets (a create without an
	// Idempotency-Key, the seed): the writer stages its rows and inserts
	// them with those of the other such jobs of the batch, in one
	// statement (see batchState).
	insertOnly bool
}

// jobResult is what the run of a job whose transaction committed returned,
// or the error that kept it from committing.
type jobResult struct {
	value any
	err   error
	ok    bool // the job ran to its end and its batch committed
}

// txn is what a write job works with: the batch transaction, through the
// store's own write methods (store_*.go), which change rows only through the
// mutation helpers of store_changes.go, each recording the change it makes.
// A job never sees the *sql.Tx itself, so it cannot change a row without a
// record, and so without its event and the caches learning of it.
type txn struct {
	ctx     context.Context
	tx      *sql.Tx
	st      *store
	changes []change // what this job changed, in order
	// batch is what the jobs of one run of a batch share (see stmt and
	// stageOf); nil binds every statement afresh and stages nothing.
	batch *batchState
}

// batchState is what the jobs of one run of a batch share: the statements
// bound to its transaction, and the rows staged for insertion.
//
// A batch of creates would otherwise run one INSERT per row: on
// PostgreSQL, a round trip each, all of them while the batch holds the
// replicas' write lock. So in a run without savepoints, an insert-only job
// (writeJob's insertOnly) does not insert its row: the resource's store
// code takes the next id (read once per batch, under the write lock: no
// other writer takes ids meanwhile), records the creation like any insert
// (stageRow) and stages the row in its resource's rowStage (stageOf). The
// staged rows are inserted, each resource's in one statement, before the
// next job that is not insert-only runs and after the last job
// (flushStaged); a failure there fails the run, which runs again with
// savepoints, where every insert is its own statement. So every statement
// still sees every row inserted before it, and the rows committed are
// those recorded. Which resources stage, and how their rows are written,
// is their store files' own: the funnel knows only rowStage.
type batchState struct {
	bound  map[*sql.Stmt]*sql.Stmt // the statements bound so far
	stage  bool                    // the job running is insert-only: it stages its rows
	stages []rowStage              // the rows staged, a stage per resource, in the order the stages began
}

// batchChanges is what the jobs of a batch changed: in the caches' terms,
// and as the events that describe it, in the order of the changes (written
// by attemptBatch after the last job, then as the feed is told of them).
type batchChanges struct {
	cache   changeSet
	events  []Event
	written []eventWritten
}

// add merges what one job changed.
func (b *batchChanges) add(cs changeSet, events []Event) {
	b.cache.add(cs)
	b.events = append(b.events, events...)
}

// writeLock is the PostgreSQL advisory lock that every write batch of every
// replica takes first, held until it commits: the replicas' batches commit
// one after another, as SQLite's single writer's do. That gives two things
// the service relies on. Rows are added in the order of their ids: no
// replica can commit id 11 while id 10 is still open, which a client paging
// between the two commits would skip. And no two batches ever wait for each
// other's rows, so they can never deadlock: a batch takes the lock before
// any row, and the one that holds it waits for nobody. It costs one
// statement per batch, and a batch holds many writes.
const writeLock = 7_370_616_460

// write runs job inside a write transaction shared with the other writes
// waiting at the same moment, and returns what job returned once that
// transaction is committed. Outcomes a client can expect (no such pet, a key
// already used) are part of T, not errors: an error means the job failed,
// and the job is undone alone. job may run more than once (when another job
// of its batch fails, the batch runs again), but the caller only ever sees
// the result of the run that committed, so job must only act through tx.
// job runs on the writer goroutine, so it must not call write itself.
func write[T any](ctx context.Context, s *store, job func(tx *txn) (T, error)) (T, error) {
	return submit(ctx, s, false, job)
}

// writeInserts is write for a job that only inserts pets (tx.insertPet,
// nothing else): the writer inserts them with the pets of the other such
// jobs of its batch, in one statement (see batchState).
func writeInserts[T any](ctx context.Context, s *store, job func(tx *txn) (T, error)) (T, error) {
	return submit(ctx, s, true, job)
}

// submit is write and writeInserts.
func submit[T any](ctx context.Context, s *store, insertOnly bool, job func(tx *txn) (T, error)) (T, error) {
	var zero T
	j := &writeJob{ctx: ctx, done: make(chan jobResult, 1), run: func(tx *txn) (any, error) { return job(tx) }, insertOnly: insertOnly}
	select {
	case s.jobs <- j:
	case <-s.quit:
		return zero, errStoreClosed
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	// Once taken, a job is answered after its batch ends: waiting for that
	// even if ctx ends means a request never returns while its row may
	// still commit. Only a writer that stopped first never answers.
	var res jobResult
	select {
	case res = <-j.done:
	case <-s.stopped:
		select {
		case res = <-j.done:
		default:
			if s.replica == nil || !s.replica.settings.sync {
				return zero, errStoreClosed
			}
			// Committed and waiting for the replica, whose close
			// answers it (after the writer has stopped).
			res = <-j.done
		}
	}
	if res.err != nil {
		return zero, res.err
	}
	v, _ := res.value.(T) // a nil interface value asserts to zero
	return v, nil
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
					job.done <- jobResult{err: errStoreClosed}
				default:
					return
				}
			}
		}
		batch = s.collect(batch, expect)
		expect = s.runBatch(batch)
		s.prepareWantedValues()
		if s.replica != nil && s.replica.settings.sync {
			// A new slice for the next batch: the replicator answers
			// this one's jobs once their commit is in the replica.
			batch = make([]*writeJob, 0, maxBatch)
			continue
		}
		clear(batch) // let the finished jobs be collected
	}
}

// collect adds to batch the jobs already waiting. When fewer than expect are
// there, it lingers for the others (see linger). Under steady concurrent
// load, the clients answered by the last commit are sending their next
// requests right now; committing without them would split the writers into
// two groups that take turns, each request waiting for two fsyncs instead of
// one. A lone writer (expect 1) never waits.
func (s *store) collect(batch []*writeJob, expect int) []*writeJob {
	expect = min(expect, maxBatch)
	// The writer yields once first. A request that queues a job wakes this
	// goroutine into the next slot of its P, ahead of every other goroutine
	// ready to run; with one P (a one-CPU host), those are the other
	// requests on their way to the queue, so the writer took the jobs one
	// at a time, every create paying a commit of its own, and with a batch
	// of one, expected one next time and never lingered. Yielding lets them
	// queue first (bench https -baseline, one CPU: 2.6 times the creates
	// over HTTP/2; 1.1 jobs a commit before, 23 after). With nothing else
	// to run it returns at once.
	runtime.Gosched()
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
	start := time.Now()
	wait := s.linger.wait()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(batch) < expect {
		select {
		case job := <-s.jobs:
			batch = append(batch, job)
		case <-timer.C:
			s.linger.observe(wait, true)
			return batch
		}
	}
	s.linger.observe(time.Since(start), false)
	return batch
}

// errRetryWithSavepoints is how attemptBatch says that a job failed in a
// batch run without savepoints, so the batch must run again with them.
var errRetryWithSavepoints = errors.New("a job failed; run the batch again with savepoints")

// runBatch runs the jobs in one transaction, commits it, publishes what the
// jobs changed to the caches, then answers every job. It returns how many
// jobs the next batch should expect: the writers active during this one, its
// own and those that queued meanwhile. Most batches have no failing job, so
// they first run without savepoints (three statements fewer per job). When a
// job fails, that attempt is rolled back whole and the batch runs again with
// a savepoint around each job, so that only the failed jobs are undone.
func (s *store) runBatch(batch []*writeJob) (expect int) {
	results, changes, committed, err := s.attemptBatch(batch, false)
	if errors.Is(err, errRetryWithSavepoints) {
		results, changes, committed, err = s.attemptBatch(batch, true)
	}
	if committed {
		s.commits.Add(1)
		s.committedWrites.Add(uint64(len(batch)))
		// Published after the commit and before any job is answered: a
		// read that starts after a client saw its 2xx finds the caches'
		// generations moved, so it is never served an answer cached from
		// before the commit, and a stream is woken before the client could
		// tell it of the change.
		s.generations.publish(changes.cache)
		if len(changes.written) > 0 {
			for i, ev := range changes.written {
				changes.events[i].ID = ev.id
			}
			s.events.committed(changes.events)
		}
	}
	expect = len(batch) + len(s.jobs)
	for i := range results {
		if !results[i].ok && results[i].err == nil {
			results[i].err = err
		}
	}
	if committed && s.replica != nil {
		s.replica.committed(s.now())
		if s.replica.settings.sync {
			// Answered once the commit is in the replica, by the
			// replicator, while this goroutine goes on to the next batch.
			s.replica.afterReplicated(func(err error) { answerJobs(batch, results, err) })
			return expect
		}
	}
	answerJobs(batch, results, nil)
	return expect
}

// answerJobs answers each job of a batch with its result; with replicaErr,
// the jobs whose writes committed get it instead (they are committed here,
// not yet in the replica).
func answerJobs(batch []*writeJob, results []jobResult, replicaErr error) {
	for i, job := range batch {
		if replicaErr != nil && results[i].ok {
			results[i] = jobResult{err: replicaErr}
		}
		job.done <- results[i]
	}
}

// attemptBatch runs the jobs in one transaction and commits it when a job
// succeeded. results holds each job's own result; err is the transaction's,
// which every job without a result of its own shares, counted and marked as
// failedWrite does (so that a full or read-only disk is a 503, not a 500).
// changes is what the jobs that succeeded changed. Its steps: begin the
// batch's transaction, run the jobs, write what they staged and their
// events, commit.
func (s *store) attemptBatch(batch []*writeJob, savepoints bool) (results []jobResult, changes batchChanges, committed bool, err error) {
	results = make([]jobResult, len(batch))
	bt, err := s.beginBatch()
	if err != nil {
		return results, changes, false, err
	}
	defer bt.end()
	succeeded, err := bt.runJobs(batch, savepoints, results, &changes)
	if err != nil || !succeeded {
		return results, changes, false, err
	}
	if err := bt.writeStagedAndEvents(len(batch), &changes); err != nil {
		clear(results)
		return results, changes, false, err
	}
	if err := bt.sqlTx.Commit(); err != nil {
		// Every job shares the commit's failure, whatever it returned.
		clear(results)
		return results, changes, false, s.failedWrite("commit write transaction", err)
	}
	return results, changes, true, nil
}

// batchTx is one run of a batch: its transaction, the context its
// statements run on, and what its jobs share.
type batchTx struct {
	s      *store
	ctx    context.Context
	cancel context.CancelFunc
	sqlTx  *sql.Tx
	shared *batchState
}

// beginBatch begins a batch's transaction (on PostgreSQL, with the write
// lock taken). The transaction belongs to the batch, not to any one
// request: a client that goes away must not roll back the others' rows.
// On PostgreSQL, across a network, a database that stops answering fails
// the batch (pgBatchTimeout) rather than hold every writer of this replica.
func (s *store) beginBatch() (*batchTx, error) {
	bt := &batchTx{s: s, ctx: context.Background(), cancel: func() {}, shared: &batchState{bound: map[*sql.Stmt]*sql.Stmt{}}}
	if s.dialect == postgresDialect {
		bt.ctx, bt.cancel = context.WithTimeout(bt.ctx, pgBatchTimeout)
	}
	var err error
	if bt.sqlTx, err = s.writer.BeginTx(bt.ctx, nil); err != nil {
		bt.cancel()
		return nil, s.failedWrite("begin write transaction", err)
	}
	if s.dialect == postgresDialect {
		if _, err := bt.sqlTx.ExecContext(bt.ctx, "SELECT pg_advisory_xact_lock($1)", writeLock); err != nil {
			bt.end()
			return nil, s.failedWrite("take the write lock", err)
		}
	}
	return bt, nil
}

// end rolls the transaction back (a no-op after Commit) and ends its
// context.
func (bt *batchTx) end() {
	bt.sqlTx.Rollback()
	bt.cancel()
}

// txn is a job's view of the batch's transaction.
func (bt *batchTx) txn() *txn { return &txn{ctx: bt.ctx, tx: bt.sqlTx, st: bt.s, batch: bt.shared} }

// runJobs runs each job of the batch whose request still waits, putting
// its result in results and what it changed in changes. It reports whether
// any job succeeded, or errRetryWithSavepoints when, without savepoints, a
// job failed (the run must start again with them), or the transaction's
// error.
func (bt *batchTx) runJobs(batch []*writeJob, savepoints bool, results []jobResult, changes *batchChanges) (succeeded bool, err error) {
	for i, job := range batch {
		if err := job.ctx.Err(); err != nil {
			// The request ended while it waited: its write never starts.
			results[i].err = err
			continue
		}
		// Once started, a job runs to its end, on the batch's context:
		// interrupting a statement half-way would only waste the work.
		tx := bt.txn()
		if !savepoints && !job.insertOnly && bt.shared.hasStaged() {
			// This job may read or change what the staged rows hold.
			if err := tx.flushStaged(); err != nil {
				return false, errRetryWithSavepoints
			}
		}
		bt.shared.stage = !savepoints && job.insertOnly
		value, cs, events, jobErr, txErr := bt.runJob(tx, job, savepoints, len(batch))
		switch {
		case txErr != nil:
			return false, txErr
		case jobErr != nil:
			results[i].err = jobErr
			continue
		}
		results[i] = jobResult{value: value, ok: true}
		succeeded = true
		changes.add(cs, events)
	}
	return succeeded, nil
}

// runJob runs one job: alone in the transaction without savepoints (a
// failure of a job among others, or a transient one, is txErr
// errRetryWithSavepoints: the batch runs again with savepoints), inside
// its own savepoint otherwise (see runInSavepoint). jobErr is the job's own
// failure, which undoes only it; txErr, one that the transaction cannot be
// trusted after.
func (bt *batchTx) runJob(tx *txn, job *writeJob, savepoints bool, batchLen int) (value any, cs changeSet, events []Event, jobErr, txErr error) {
	if savepoints {
		return bt.s.runInSavepoint(tx, job)
	}
	value, err := job.run(tx)
	if err != nil {
		if batchLen > 1 || bt.s.transient(err) {
			return nil, cs, nil, nil, errRetryWithSavepoints
		}
		// Alone in the transaction, its failure leaves nothing to commit.
		return nil, cs, nil, err, nil
	}
	cs, events = tx.finishJob(bt.s.now())
	return value, cs, events, nil, nil
}

// writeStagedAndEvents writes, after the last job, the rows still staged
// and the events of every job that succeeded, in one statement: one round
// trip per batch on PostgreSQL, rather than one per change. There the same
// statement notifies the listeners of every replica, which PostgreSQL
// delivers when, and only if, the transaction commits: a wake-up, never
// the data (the streams read the events from the table).
func (bt *batchTx) writeStagedAndEvents(batchLen int, changes *batchChanges) error {
	if bt.shared.hasStaged() {
		if err := bt.txn().flushStaged(); err != nil {
			if batchLen > 1 || bt.s.transient(err) {
				return errRetryWithSavepoints
			}
			return err
		}
	}
	if len(changes.events) == 0 {
		return nil
	}
	var err error
	changes.written, err = bt.txn().insertEvents(changes.events)
	return err
}

// writeStatements are the savepoint statements of a batch run with
// savepoints (see runInSavepoint).
type writeStatements struct {
	savepoint, release, rollbackTo *sql.Stmt
}

// statements declares the batch's statements for prepare.
func (ws *writeStatements) statements(s *store) []statement {
	return []statement{
		{s.writer, &ws.savepoint, "SAVEPOINT job"},
		{s.writer, &ws.release, "RELEASE job"},
		{s.writer, &ws.rollbackTo, "ROLLBACK TO job"},
	}
}

// transientTries is how many times a job that lost a race with another
// transaction (see transient) runs before its request gets the error.
const transientTries = 3

// runInSavepoint runs one job inside a savepoint, so that its failure
// (jobErr) undoes only its own statements. A job that lost a race with
// another replica's transaction runs again, up to transientTries times.
// txErr means the transaction can no longer be trusted.
func (s *store) runInSavepoint(tx *txn, job *writeJob) (value any, cs changeSet, events []Event, jobErr, txErr error) {
	for try := 1; ; try++ {
		if _, err := tx.exec("savepoint", s.writeStmts.savepoint); err != nil {
			return nil, cs, nil, nil, err
		}
		tx.changes = tx.changes[:0]
		value, jobErr = job.run(tx)
		if jobErr == nil {
			cs, events = tx.finishJob(s.now())
		}
		if jobErr != nil {
			if _, err := tx.exec("rollback to savepoint", s.writeStmts.rollbackTo); err != nil {
				return nil, cs, nil, nil, err
			}
		}
		if _, err := tx.exec("release savepoint", s.writeStmts.release); err != nil {
			return nil, cs, nil, nil, err
		}
		if jobErr == nil || !s.transient(jobErr) || try == transientTries {
			return value, cs, events, jobErr, nil
		}
	}
}

// transient reports whether err is a job's loss of a race with another
// transaction, which running it again may win (only PostgreSQL, with other
// replicas writing, has such races).
func (s *store) transient(err error) bool {
	return s.dialect == postgresDialect && postgresTransient(err)
}
