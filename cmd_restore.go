package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/benbjohnson/litestream"
)

// This file is `petstore restore`: the database written back from the
// replica that -replicate keeps (store_replica_restore.go reads it). Its
// exit codes: 2 when the command line is wrong (a flag, a URL, a time that
// cannot be, a file that already exists), 1 when the replica cannot give
// what was asked (none there, empty, unreadable, a time outside what it
// keeps or that it can only give older); in both cases nothing is written.

// restoreRequest is what the command line of petstore restore asks.
type restoreRequest struct {
	target     replicaTarget
	db         string    // the file to write ("" with -list)
	at         time.Time // zero: the latest state
	list       bool
	secretFile string // where the secret of the restored database must be
}

// runRestore is `petstore restore -from URL -db PATH [-at TIME]`, which
// writes the database as the replica holds it at TIME (by default its latest
// state) into PATH and prints which state that is, and `petstore restore
// -from URL -list`, which prints the states the replica can give.
func runRestore(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	req, err := parseRestore(args, getenv, time.Now(), stderr)
	if err != nil {
		return err
	}
	client := req.target.client(quietLog(), replicaCallTimeout, nil)
	if req.list {
		return listRestorable(ctx, req.target, client, stdout)
	}
	p, err := restoreReplica(ctx, req.target, client, req.at, req.db)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s to %s as of %s\n", req.target, req.db, p)
	warnNoSecret(stderr, req.secretFile)
	return nil
}

// parseRestore reads and checks petstore restore's command line; now is
// what a time in the future is measured against.
func parseRestore(args []string, getenv func(string) string, now time.Time, stderr io.Writer) (restoreRequest, error) {
	fs := flag.NewFlagSet("petstore restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the replica: the service's -replicate URL, s3://BUCKET/PATH?endpoint=... (credentials from the AWS environment) or file:///DIR")
	db := fs.String("db", "", "the SQLite file to write, which must not exist")
	at := fs.String("at", "", "an RFC 3339 time (2026-11-28T16:35:58Z): the database as it stood then; default: the latest commit in the replica")
	list := fs.Bool("list", false, "print the first and last restorable times and the snapshots; write nothing")
	secret := fs.String("secret-file", getenv(envName("secret-file")), "the secret file the restored database will be served with (env PETSTORE_SECRET_FILE), warned about if missing; default: PATH.secret")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: petstore restore -from URL -db PATH [-at TIME]\n       petstore restore -from URL -list\n\n"+
			"Writes into PATH, which must not exist, the database as the replica held it at TIME (by default its\n"+
			"latest commit), checked and made durable before it gets its name, and prints the time and transaction\n"+
			"restored. The replica is only read: the service may keep replicating into it. Exit 2: the command line\n"+
			"is wrong; exit 1: the replica cannot give what was asked (docs/operations.md).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return restoreRequest{}, err
		}
		return restoreRequest{}, &configError{"restore", err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return restoreRequest{}, &configError{"restore", fmt.Sprintf("unexpected %q; all settings are flags (see -h)", fs.Arg(0))}
	case *from == "":
		return restoreRequest{}, &configError{"restore", "name the replica: petstore restore -from URL -db PATH (the service's -replicate URL)"}
	case *list && (*db != "" || *at != ""):
		return restoreRequest{}, &configError{"restore -list", "writes nothing; give it without -db and -at"}
	case !*list && *db == "":
		return restoreRequest{}, &configError{"restore", "name the file to write: petstore restore -from URL -db PATH"}
	}
	target, err := parseReplicaURL(*from)
	if err != nil {
		return restoreRequest{}, &configError{"restore -from", err.Error()}
	}
	if target.s3() && getenv("AWS_CA_BUNDLE") != "" {
		return restoreRequest{}, &configError{"AWS_CA_BUNDLE", "is set, and the replica's S3 client cannot use it; unset it, and put a private CA in the system's trust store or in SSL_CERT_FILE, which Go reads"}
	}
	req := restoreRequest{target: target, db: *db, list: *list, secretFile: *secret}
	if req.list {
		return req, nil
	}
	if req.secretFile == "" {
		req.secretFile = defaultSecretFile(req.db)
	}
	if req.at, err = parseRestoreTime(*at, now); err != nil {
		return restoreRequest{}, err
	}
	return req, checkRestorePath(req.db)
}

// parseRestoreTime reads -at: an RFC 3339 time, not after now; "" is the
// zero time, the latest state.
func parseRestoreTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, &configError{"restore -at", fmt.Sprintf("%q is not an RFC 3339 time such as 2026-11-28T16:35:58Z or 2026-11-28T17:35:58.250+01:00", abbreviate(s))}
	}
	if t.After(now) {
		return time.Time{}, &configError{"restore -at", fmt.Sprintf("%s is in the future (it is %s): a replica holds only what it received; leave -at out for its latest commit", replicaTime(t), replicaTime(now))}
	}
	return t, nil
}

// checkRestorePath refuses a -db that is not a new SQLite file.
func checkRestorePath(path string) error {
	switch {
	case path == memoryDB:
		return &configError{"restore -db", "an in-memory database lives only inside its process; restore into a file"}
	case isPostgresURL(path):
		return &configError{"restore -db", "a restore writes a SQLite file; restore into a file, then move it with petstore copy -from FILE -to URL"}
	}
	// Lstat: a symbolic link, dangling or not, is a name already taken.
	if _, err := os.Lstat(path); err == nil {
		return &configError{"restore -db", fmt.Sprintf("%s already exists; refusing to overwrite it: restore into a new path, then move it into place with the service stopped (docs/operations.md)", path)}
	}
	return nil
}

// listRestorable prints the states the replica can give, one line each: the
// first and the last, then every snapshot (when it was taken, the
// transaction it holds the database at, and its size).
func listRestorable(ctx context.Context, target replicaTarget, client litestream.ReplicaClient, w io.Writer) error {
	files, err := listReplica(ctx, target, client)
	if err != nil {
		return err
	}
	last, err := files.plan(ctx, client, time.Time{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "first restorable: %s\n", files.first())
	fmt.Fprintf(w, "last restorable: %s\n", last)
	for _, s := range files.levels[litestream.SnapshotLevel] {
		fmt.Fprintf(w, "snapshot: %s (transaction %s, %d bytes)\n", replicaTime(s.CreatedAt), s.MaxTXID, s.Size)
	}
	return nil
}

// warnNoSecret warns, on one line, when the secret file the restored
// database will be served with is missing: the replica holds the database,
// never the secret (docs/keys.md).
func warnNoSecret(stderr io.Writer, file string) {
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		return
	}
	fmt.Fprintf(stderr, "petstore: warning: no secret file at %s, and the replica does not hold it: served with another secret, the restored database gives every API key a new identity, so its idempotency records lose their replays (a retry becomes a new request) and callers without a label get new names in logs and metrics; copy the secret it was served with (the file beside the old service's database, named after it with .secret, or its -secret-file) to %s, mode 0600, before starting the service (docs/keys.md)\n", file, file)
}
