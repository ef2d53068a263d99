package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/prometheus/client_golang/prometheus"
)

// Replication of the SQLite file to object storage (-replicate), through
// Litestream used as a library. Litestream turns the WAL into LTX files,
// uploads them, compacts them into coarser levels, takes snapshots and
// removes what retention no longer needs; it owns checkpointing (the
// service's connections turn SQLite's automatic checkpoints off, and the
// service runs none itself). The service decides when to upload: one loop
// (replicator.run) syncs every second in the background mode, and, with
// -replicate-sync, as soon as a committed write waits for it, every write
// committed while one upload is in flight going together in the next
// (group commit). A write in that mode is answered only once its commit is
// in the replica (see afterReplicated, used by the write funnel).

// errReplicaUnavailable is what a write gets, with -replicate-sync, when its
// commit could not be put in the replica within -replicate-timeout: it is
// committed here, and will be replicated when the store answers again.
var errReplicaUnavailable = errors.New("the replica could not be reached in time")

// errReplicaFenced is a sync refused because this service no longer holds
// the replica's lease: another service may be writing there.
var errReplicaFenced = errors.New("this service does not hold the replica's lease")

// replicaSettings are the settings of -replicate, checked.
type replicaSettings struct {
	target           replicaTarget
	sync             bool          // -replicate-sync
	timeout          time.Duration // -replicate-timeout
	snapshotInterval time.Duration // -replicate-snapshot-interval
	retention        time.Duration // -replicate-retention
}

// on reports whether the database is replicated.
func (r replicaSettings) on() bool { return r.target.raw != "" }

// The levels of the replica. Level 0 is one file per sync, kept a minute
// after it is compacted; level 1 compacts them every second, so that a
// restore can reach any second of the retention window; level 2 every hour,
// so that a restore reads at most a day of snapshots' distance in hours,
// then seconds. Snapshots (Litestream's level 9) come every
// -replicate-snapshot-interval and are kept -replicate-retention, the
// coarser levels with them.
var replicaLevels = litestream.CompactionLevels{{Level: 0}, {Level: 1, Interval: time.Second}, {Level: 2, Interval: time.Hour}}

// l0Retention is how long level 0's files are kept once compacted: level
// 1's compaction lists them every second, so they are kept few.
const l0Retention = time.Minute

// asyncEvery is how often the background mode uploads what was committed.
const asyncEvery = time.Second

// replicaBackoffMax bounds the wait between two tries while the replica
// cannot be reached: the service catches up within that of its return.
const replicaBackoffMax = 4 * time.Second

// replicator keeps the replica of one SQLite file.
type replicator struct {
	log      *slog.Logger
	settings replicaSettings
	db       *litestream.DB
	ls       *litestream.Store
	lease    replicaLease

	kick   chan struct{}   // a write waits, or a sync is wanted
	ctx    context.Context // ended by close: the uploads' and the loop's
	cancel context.CancelFunc
	done   chan struct{} // run has returned

	mu      sync.Mutex
	waiting []*replicaWaiter // writes committed and waiting for a sync to start
	// firstPending is when the oldest commit not yet in the replica was
	// made (zero when caught up); nextPending, the oldest made since the
	// sync in flight began.
	firstPending, nextPending time.Time
	syncing                   bool

	lastSync    atomic.Int64 // Unix nanoseconds of the last successful sync
	errs        atomic.Uint64
	failing     atomic.Bool
	outageStart atomic.Int64 // Unix nanoseconds: when the current outage began
	lastWarn    atomic.Int64 // Unix nanoseconds: the outage's last WARN
	// waits observes how long each batch of writes waited for its commit
	// to be in the replica, with -replicate-sync (registered by the
	// metrics).
	waits prometheus.Histogram
}

// replicaWaiter is a batch of writes committed, waiting for its commit to
// be in the replica: answer runs once, with nil or the reason it is not.
type replicaWaiter struct {
	once     sync.Once
	answered atomic.Bool // finished: a later sync need not keep it
	answer   func(error)
	timer    atomic.Pointer[time.Timer] // set just after the timer starts, which may fire first
	since    time.Time
	r        *replicator
}

// finish answers the waiter, once.
func (w *replicaWaiter) finish(err error) {
	w.once.Do(func() {
		if t := w.timer.Load(); t != nil {
			t.Stop()
		}
		w.r.waits.Observe(time.Since(w.since).Seconds())
		w.answer(err)
		w.answer = nil // its batch's jobs, for the collector
		w.answered.Store(true)
	})
}

// startReplica opens Litestream on the SQLite file at path and starts
// replicating it as settings say: the lease taken (a service holding it
// already is an error naming it), the first sync done, the loop running.
func startReplica(ctx context.Context, log *slog.Logger, path string, settings replicaSettings) (*replicator, error) {
	log = log.With("replica", settings.target.String())
	lease, err := newReplicaLease(ctx, settings.target, log)
	if err != nil {
		return nil, err
	}
	if err := lease.acquire(ctx); err != nil {
		return nil, err
	}
	r := &replicator{log: log, settings: settings, lease: lease, kick: make(chan struct{}, 1), done: make(chan struct{}),
		waits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "petstore_replica_write_wait_seconds",
			Help:    "With -replicate-sync, how long a write waited, once committed, for its commit to be in the replica (or for -replicate-timeout to pass).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		})}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := r.open(ctx, path); err != nil {
		lease.release(context.WithoutCancel(ctx))
		return nil, err
	}
	go r.run()
	return r, nil
}

// open opens Litestream's store over the file and syncs once, so that a
// replica that cannot be written is known at start.
func (r *replicator) open(ctx context.Context, path string) error {
	r.db = litestream.NewDB(path)
	r.db.Replica = litestream.NewReplicaWithClient(r.db, r.settings.target.client(slog.New(minLevel{r.log.Handler(), slog.LevelWarn}), r.settings.timeout, r.lease))
	// The service uploads (run); Litestream's own loop would retry a
	// store that is gone with a back-off of up to five minutes.
	r.db.Replica.MonitorEnabled = false
	r.ls = litestream.NewStore([]*litestream.DB{r.db}, replicaLevels)
	// Litestream logs each compaction and snapshot at INFO: one a second
	// under writes. Its warnings and errors are kept.
	quiet := slog.New(minLevel{r.log.Handler(), slog.LevelWarn})
	r.ls.Logger = quiet
	r.db.SetLogger(quiet)
	r.ls.SnapshotInterval = r.settings.snapshotInterval
	r.ls.SnapshotRetention = r.settings.retention
	r.ls.SetL0Retention(l0Retention)
	if err := r.ls.Open(ctx); err != nil {
		return fmt.Errorf("open the replica: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, max(r.settings.timeout, time.Minute))
	defer cancel()
	if err := r.db.SyncAndWait(sctx); err != nil {
		r.ls.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("the first upload to the replica failed: %w", err)
	}
	r.lastSync.Store(time.Now().UnixNano())
	return nil
}

// afterReplicated calls answer once every commit made so far is in the
// replica, with nil, or with errReplicaUnavailable when that takes longer
// than -replicate-timeout (or the service lost the lease). It never blocks.
func (r *replicator) afterReplicated(answer func(error)) {
	w := &replicaWaiter{answer: answer, since: time.Now(), r: r}
	w.timer.Store(time.AfterFunc(r.settings.timeout, func() { w.finish(errReplicaUnavailable) }))
	r.mu.Lock()
	r.waiting = append(r.waiting, w)
	r.mu.Unlock()
	r.wake()
}

// committed records that a write committed now: the lag counts from the
// oldest commit not in the replica. In the background mode nothing waits
// for it.
func (r *replicator) committed(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.syncing {
		if r.nextPending.IsZero() {
			r.nextPending = at
		}
		return
	}
	if r.firstPending.IsZero() {
		r.firstPending = at
	}
}

// wake asks the loop for a sync.
func (r *replicator) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run is the loop that uploads: at once when a write waits (sync mode),
// otherwise every second, and while the replica cannot be reached, after a
// wait that doubles up to replicaBackoffMax. It returns when close is
// called.
func (r *replicator) run() {
	defer close(r.done)
	tick := time.NewTicker(asyncEvery)
	defer tick.Stop()
	var backoff time.Duration
	for {
		if backoff > 0 {
			if !r.pause(backoff) {
				return
			}
		} else {
			select {
			case <-r.kick:
			case <-tick.C:
			case <-r.closing():
				return
			}
		}
		if err := r.syncOnce(); err != nil {
			backoff = min(max(2*backoff, 250*time.Millisecond), replicaBackoffMax)
			continue
		}
		backoff = 0
	}
}

// pause waits d, or until close; it reports whether to go on.
func (r *replicator) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.closing():
		return false
	}
}

// closing is closed when the replicator is asked to stop.
func (r *replicator) closing() <-chan struct{} { return r.ctx.Done() }

// syncOnce uploads everything committed before it began and answers the
// writes that waited for it. A failure is counted and logged (once per
// outage, then every minute), and the waiting writes keep waiting for the
// next try, until their own timeout.
func (r *replicator) syncOnce() error {
	r.mu.Lock()
	batch := r.waiting
	r.waiting = nil
	r.syncing = true
	r.mu.Unlock()
	start := time.Now()
	err := r.upload(start)
	r.mu.Lock()
	r.syncing = false
	if err == nil {
		r.firstPending, r.nextPending = r.nextPending, time.Time{}
	} else {
		if r.firstPending.IsZero() {
			r.firstPending = r.nextPending
		}
		r.nextPending = time.Time{}
		// The next try covers them, but for those answered already (their
		// timeout passed): an outage of hours keeps no batch it answered.
		batch = slices.DeleteFunc(batch, func(w *replicaWaiter) bool { return w.answered.Load() })
		r.waiting = append(batch, r.waiting...)
	}
	r.mu.Unlock()
	if err != nil {
		if r.ctx.Err() == nil { // not the upload close cut short
			r.failed(err)
		}
		return err
	}
	r.lastSync.Store(start.UnixNano())
	if r.failing.CompareAndSwap(true, false) {
		r.log.Info("the replica is reachable again; replication caught up", "down_for", time.Since(r.lastFailureStart()))
	}
	for _, w := range batch {
		w.finish(nil)
	}
	return nil
}

// upload syncs the WAL to Litestream's files and them to the replica,
// within the replica timeout and the lease's life (each write of the
// replica's client is fenced by the lease too).
func (r *replicator) upload(start time.Time) error {
	until, ok := r.lease.heldUntil(start)
	if !ok {
		return errReplicaFenced
	}
	ctx, cancel := context.WithDeadline(r.ctx, earliest(start.Add(r.settings.timeout), until))
	defer cancel()
	return r.db.SyncAndWait(ctx)
}

// failed counts a failed sync and logs it: a WARN for the first of an
// outage, with the store's error, and one a minute while it lasts.
func (r *replicator) failed(err error) {
	r.errs.Add(1)
	now := time.Now()
	if r.failing.CompareAndSwap(false, true) {
		r.outageStart.Store(now.UnixNano())
		r.lastWarn.Store(now.UnixNano())
		r.log.Warn("the replica cannot be written; the service serves on and retries", "err", err, "sync_mode", r.settings.sync)
		return
	}
	if now.Sub(time.Unix(0, r.lastWarn.Load())) >= time.Minute {
		r.lastWarn.Store(now.UnixNano())
		r.log.Warn("the replica still cannot be written", "err", err, "down_for", now.Sub(r.lastFailureStart()).Round(time.Second), "lag", r.lag(now).Round(time.Second))
	}
}

// lastFailureStart is when the current (or last) outage began.
func (r *replicator) lastFailureStart() time.Time { return time.Unix(0, r.outageStart.Load()) }

// lag is the age of the oldest commit not yet in the replica; 0 when it is
// caught up.
func (r *replicator) lag(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstPending.IsZero() {
		return 0
	}
	return now.Sub(r.firstPending)
}

// lastSyncTime is when the last successful sync began.
func (r *replicator) lastSyncTime() time.Time { return time.Unix(0, r.lastSync.Load()) }

// errorCount is how many syncs have failed since start-up.
func (r *replicator) errorCount() uint64 { return r.errs.Load() }

// close stops the loop, answers the writes still waiting (a last sync
// covers them, within the timeout), closes Litestream (its own last sync
// included) and gives the lease up. The store's connections are closed
// before it.
func (r *replicator) close() error {
	r.cancel()
	<-r.done
	ctx, cancel := context.WithTimeout(context.Background(), max(r.settings.timeout, 10*time.Second))
	defer cancel()
	err := r.ls.Close(ctx) // its last sync uploads what is left
	r.mu.Lock()
	batch := r.waiting
	r.waiting = nil
	r.mu.Unlock()
	for _, w := range batch {
		if err != nil {
			w.finish(errReplicaUnavailable)
		} else {
			w.finish(nil)
		}
	}
	r.lease.release(ctx)
	return err
}

// replicate starts replicating the store's SQLite file at path as settings
// say. The service's connection that writes stops SQLite's automatic
// checkpoints: Litestream owns checkpointing, and a checkpoint it did not
// run could move pages it has not read yet. It must be called before the
// first write.
func (s *store) replicate(ctx context.Context, log *slog.Logger, path string, settings replicaSettings) error {
	if _, err := s.writer.ExecContext(ctx, "PRAGMA wal_autocheckpoint = 0"); err != nil {
		return s.failed("turn automatic checkpoints off", err)
	}
	r, err := startReplica(ctx, log, path, settings)
	if err != nil {
		return err
	}
	s.replica = r
	return nil
}

// replicated waits until every commit made so far is in the replica, with
// -replicate-sync (errReplicaUnavailable past -replicate-timeout); without
// it, it returns at once.
func (s *store) replicated(ctx context.Context) error {
	if s.replica == nil || !s.replica.settings.sync {
		return nil
	}
	done := make(chan error, 1)
	s.replica.afterReplicated(func(err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// minLevel is a log handler that drops the records below its level.
type minLevel struct {
	slog.Handler
	level slog.Level
}

// Enabled drops what is below the level.
func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

// WithAttrs keeps the level.
func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.level}
}

// WithGroup keeps the level.
func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.level}
}
