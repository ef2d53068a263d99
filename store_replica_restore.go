package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// Reading a replica back (petstore restore): which states it can give, and
// writing one of them into a new SQLite file. A state is a transaction of
// Litestream's (a TXID: one per sync that found commits, not one per SQLite
// commit), dated by when its sync began, in milliseconds, by the clock of
// the service that wrote it. What a restore at a time gives is what
// Litestream's own plan gives (CalcRestorePlan, over one listing of the
// replica), and the restore is then made by that plan's last transaction, so
// that what is printed is exactly what was restored.

// restoreSlack is how much older than the time asked a restore may be
// without saying so. Level 0 keeps each sync's file for a minute, and a
// restore within that minute is exact to the sync; level 1 keeps one file
// per second of writes for the retention window, and a restore there lands
// on the last second boundary before the time asked: with a sync every
// second (the background mode), the last sync before that boundary may be
// up to two seconds before the time. Further than that, the replica cannot
// tell what was committed in between, and the restore is refused.
const restoreSlack = 2 * time.Second

// replicaCallTimeout bounds each of a restore's calls to the store (a
// listing, the reading of one file).
const replicaCallTimeout = time.Minute

// replicaPoint is a state a replica can restore: a transaction, and when
// its sync began.
type replicaPoint struct {
	txid ltx.TXID
	at   time.Time
}

// String is the point as the command prints it.
func (p replicaPoint) String() string {
	return fmt.Sprintf("%s (transaction %s)", replicaTime(p.at), p.txid)
}

// replicaTime is a replica's time as the command prints it: RFC 3339 in
// UTC, to the millisecond, as Litestream records it.
func replicaTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// replicaFiles is every file of a replica, level by level (0 to 8, then
// Litestream's snapshots, level 9), each level in the order of its
// transactions, read once with the times Litestream recorded.
type replicaFiles struct {
	target replicaTarget
	levels [litestream.SnapshotLevel + 1][]*ltx.FileInfo
}

// quietLog is the library's logger during a restore: what goes wrong comes
// back as an error, and the command prints its own lines only.
func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// listReplica lists every file of the replica at target through client. A
// file:// replica whose directory does not exist, and a replica that holds
// no file, are errors that say so.
func listReplica(ctx context.Context, target replicaTarget, client litestream.ReplicaClient) (*replicaFiles, error) {
	if !target.s3() {
		if _, err := os.Stat(target.dir); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("there is no replica at %s: the directory does not exist; name the -replicate URL the service wrote to", target)
		}
	}
	files := &replicaFiles{target: target}
	empty := true
	for level := range files.levels {
		itr, err := client.LTXFiles(ctx, level, 0, true)
		if err != nil {
			return nil, fmt.Errorf("cannot read the replica at %s: %w", target, err)
		}
		for itr.Next() {
			files.levels[level] = append(files.levels[level], itr.Item())
		}
		err = itr.Err()
		if cerr := itr.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read the replica at %s: %w", target, err)
		}
		empty = empty && len(files.levels[level]) == 0
	}
	if empty {
		return nil, fmt.Errorf("the replica at %s is empty: it holds no snapshot and no change (a service replicating there writes its first snapshot as it starts)", target)
	}
	return files, nil
}

// all calls yield with every file of every level.
func (f *replicaFiles) all(yield func(*ltx.FileInfo)) {
	for _, level := range f.levels {
		for _, info := range level {
			yield(info)
		}
	}
}

// first is the earliest state the replica can restore: that of the
// earliest file a restore can start from (a snapshot, or a file that begins
// with the first transaction); zero if there is none.
func (f *replicaFiles) first() replicaPoint {
	var first *ltx.FileInfo
	f.all(func(info *ltx.FileInfo) {
		if (info.Level == litestream.SnapshotLevel || info.MinTXID == 1) && (first == nil || info.CreatedAt.Before(first.CreatedAt)) {
			first = info
		}
	})
	if first == nil {
		return replicaPoint{}
	}
	return replicaPoint{txid: first.MaxTXID, at: first.CreatedAt}
}

// plan is the state Litestream's restore plan gives at the time at (the
// files synced at or before it, to the millisecond), or, with a zero at, the
// latest state, over this listing. The state is dated by the latest file of
// the plan: from then on a restore at a time gives it (a compacted file
// carries the time of its last transaction; a snapshot, the time it was
// taken), so that -at that time restores it again.
func (f *replicaFiles) plan(ctx context.Context, client litestream.ReplicaClient, at time.Time) (replicaPoint, error) {
	var before time.Time // the plan takes the files strictly before it
	if !at.IsZero() {
		before = at.Truncate(time.Millisecond).Add(time.Millisecond)
	}
	plan, err := litestream.CalcRestorePlan(ctx, listedClient{client, f}, 0, before, quietLog())
	if err != nil {
		return replicaPoint{}, fmt.Errorf("the replica at %s cannot be restored: %w", f.target, err)
	}
	p := replicaPoint{txid: plan[len(plan)-1].MaxTXID}
	for _, info := range plan {
		if info.CreatedAt.After(p.at) {
			p.at = info.CreatedAt
		}
	}
	return p, nil
}

// listedClient is a replica's client whose listings are those of one
// replicaFiles, so that the plan and the checks around it see the same
// files, and the replica is listed once.
type listedClient struct {
	litestream.ReplicaClient
	files *replicaFiles
}

// LTXFiles lists the files of level from the listing.
func (c listedClient) LTXFiles(_ context.Context, level int, seek ltx.TXID, _ bool) (ltx.FileIterator, error) {
	var infos []*ltx.FileInfo
	if level >= 0 && level < len(c.files.levels) {
		for _, info := range c.files.levels[level] {
			if info.MinTXID >= seek {
				infos = append(infos, info)
			}
		}
	}
	return ltx.NewFileInfoSliceIterator(infos), nil
}

// pointAt is the state to restore for the time at (zero: the latest), or
// why the replica cannot give it: at is before the first state it keeps,
// or the state it would give is older than at by more than restoreSlack
// while later changes exist (see exactAt).
func (f *replicaFiles) pointAt(ctx context.Context, client litestream.ReplicaClient, at time.Time) (replicaPoint, error) {
	if at.IsZero() {
		return f.plan(ctx, client, at)
	}
	if first := f.first(); !first.at.IsZero() && at.Truncate(time.Millisecond).Before(first.at) {
		window := "from " + first.String()
		if last, err := f.plan(ctx, client, time.Time{}); err == nil {
			window += " to " + last.String()
		}
		return replicaPoint{}, fmt.Errorf("%s is before the first restorable time: the replica at %s can restore %s (petstore restore -list shows its snapshots); older states were never replicated there, or are past -replicate-retention", replicaTime(at), f.target, window)
	}
	p, err := f.plan(ctx, client, at)
	if err != nil {
		return replicaPoint{}, err
	}
	return p, f.exactAt(at, p)
}

// exactAt refuses a restore at the time at that would silently give an
// older state: Litestream's plan ends with the last file wholly before at,
// and once the files of each sync are gone (level 0 is kept a minute), the
// changes after got may be kept only together with later ones. The state
// got is the one at at when nothing follows it, when the very next
// transaction is dated by a file that ends with it (it is then after at; a
// snapshot is dated when it was taken, not by its last transaction), or
// when got is within restoreSlack of at; otherwise the replica cannot tell.
func (f *replicaFiles) exactAt(at time.Time, got replicaPoint) error {
	var later, cont *ltx.FileInfo // the first file after got; the first that continues it
	dated := false
	f.all(func(info *ltx.FileInfo) {
		if info.MaxTXID <= got.txid {
			return
		}
		dated = dated || info.MaxTXID == got.txid+1 && info.Level != litestream.SnapshotLevel
		if later == nil || info.MinTXID < later.MinTXID {
			later = info
		}
		if info.MinTXID <= got.txid+1 && (cont == nil || info.MaxTXID < cont.MaxTXID ||
			info.MaxTXID == cont.MaxTXID && info.CreatedAt.Before(cont.CreatedAt)) {
			cont = info
		}
	})
	if later == nil || dated || at.Sub(got.at) <= restoreSlack {
		return nil
	}
	older := at.Sub(got.at).Round(time.Millisecond)
	if cont == nil {
		return fmt.Errorf("the replica at %s cannot give the state at %s: it holds no file for the transactions after %s up to %s (a gap), so a restore at %s would give the state at %s, %v earlier. Restore -at %s for that state",
			f.target, replicaTime(at), got.txid, later.MinTXID-1, replicaTime(at), replicaTime(got.at), older, replicaTime(got.at))
	}
	after := replicaPoint{txid: cont.MaxTXID, at: cont.CreatedAt}
	return fmt.Errorf("the replica at %s cannot give the state at %s: it keeps the transactions between %s and %s only together, no longer sync by sync (level 0 keeps each sync a minute, level 1 each second of writes), so a restore at %s would give the state at %s, %v earlier. Restore -at %s for that state, or -at %s for the state with those transactions",
		f.target, replicaTime(at), got, after, replicaTime(at), replicaTime(got.at), older, replicaTime(got.at), replicaTime(after.at))
}

// restoreReplica writes into path the state of the replica for the time at
// (zero: the latest) and returns it. A file the plan named that the
// service's retention removed meanwhile (the replica is read while it may
// still be written) makes it list and plan again, twice at most.
func restoreReplica(ctx context.Context, target replicaTarget, client litestream.ReplicaClient, at time.Time, path string) (replicaPoint, error) {
	for attempt := 0; ; attempt++ {
		files, err := listReplica(ctx, target, client)
		if err != nil {
			return replicaPoint{}, err
		}
		p, err := files.pointAt(ctx, client, at)
		if err != nil {
			return replicaPoint{}, err
		}
		err = restoreInto(ctx, client, p.txid, path)
		if errors.Is(err, litestream.ErrTxNotAvailable) && attempt < 2 {
			continue
		}
		return p, err
	}
}

// restoreInto writes the state of transaction txid into path, which must
// not exist. As petstore backup does, the file is written in a private
// directory made next to path (mode 0700: nobody else can open it there),
// mode 0600, checked with PRAGMA integrity_check, made durable, and only
// then given its name, by a hard link, which never replaces a file nor
// follows a symbolic link: path appears whole, or not at all.
func restoreInto(ctx context.Context, client litestream.ReplicaClient, txid ltx.TXID, path string) error {
	dir := filepath.Dir(path)
	work, err := os.MkdirTemp(dir, ".petstore-restore-*")
	if err != nil {
		return &configError{"restore -db", fmt.Sprintf("cannot create files in directory %q: %v", dir, errors.Unwrap(err))}
	}
	defer os.RemoveAll(work)
	// Absolute, so that SQLite never reads the name as a "file:" URI.
	tmp, err := filepath.Abs(filepath.Join(work, "restore.db"))
	if err != nil {
		return err
	}
	// A Replica logs through its DB's logger, and through slog.Default()
	// without one: this DB, never opened, only carries the logger.
	r := litestream.NewReplicaWithClient(&litestream.DB{Logger: quietLog()}, client)
	opt := litestream.NewRestoreOptions()
	opt.OutputPath, opt.TXID = tmp, txid
	if err := r.Restore(ctx, opt); err != nil {
		return fmt.Errorf("restore transaction %s: %w", txid, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	if err := checkIntegrity(ctx, tmp); err != nil {
		return err
	}
	if err := syncPath(tmp); err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return &configError{"restore -db", fmt.Sprintf("%s already exists; refusing to overwrite it", path)}
		}
		return fmt.Errorf("name the restored database %s: %w", path, err)
	}
	return syncPath(dir)
}

// checkIntegrity runs PRAGMA integrity_check, the full one, on the SQLite
// file at path, read only.
func checkIntegrity(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return fmt.Errorf("the restored database cannot be checked: %w", err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		problems = append(problems, line)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("the restored database cannot be checked: %w", err)
	}
	if !slices.Equal(problems, []string{"ok"}) {
		return fmt.Errorf("the restored database fails its integrity check: %q", problems)
	}
	return nil
}
