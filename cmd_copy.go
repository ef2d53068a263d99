package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// runCopy is `petstore copy -from SRC -to DST`: it moves a shop's data
// between databases, each a SQLite file or a PostgreSQL URL, for instance
// from the file a shop started with to the PostgreSQL its replicas share.
func runCopy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("petstore copy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the database to copy: a SQLite file or a postgres:// URL")
	to := fs.String("to", "", "the database to copy into, which must hold no data: a SQLite file (created if missing) or a postgres:// URL")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: petstore copy -from SRC -to DST\n\n"+
			"Copies every pet, order, idempotency record, event and prune mark, with their ids, and the\n"+
			"ACME account and certificates (-domain), from one snapshot of SRC\n"+
			"to DST in one transaction, and moves DST's id sequences past SRC's. DST gets the schema if\n"+
			"it has none, and must hold no data. SRC may keep serving: writes committed after the copy\n"+
			"began are not copied. Replicas serving DST wait for the copy before they write. Webhook\n"+
			"subscriptions are not copied (the summary counts them): create them again on DST.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &configError{"copy", err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return &configError{"copy", fmt.Sprintf("unexpected %q: name the databases with -from and -to", fs.Arg(0))}
	case *from == "" || *to == "":
		return &configError{"copy", "name both databases: petstore copy -from SRC -to DST"}
	case *from == *to:
		return &configError{"copy", "-from and -to name the same database"}
	case *from == memoryDB || *to == memoryDB:
		return &configError{"copy", "an in-memory database lives only inside its process; copy from or to a file or a PostgreSQL URL"}
	}
	if !isPostgresURL(*from) {
		// openStore would create a missing file and copy its nothing.
		if fi, err := os.Stat(*from); err != nil || !fi.Mode().IsRegular() {
			return &configError{"copy -from", fmt.Sprintf("%q is not an existing database file", *from)}
		}
	}
	moved, err := copyDatabase(ctx, *from, *to)
	if err != nil {
		return err
	}
	var counts []string
	for _, m := range moved {
		if m.table.notCopied == "" {
			counts = append(counts, fmt.Sprintf("%d %s", m.rows, m.table.noun))
		}
	}
	fmt.Fprintf(stdout, "copied %s from %s to %s\n", listOf(counts), redactDB(*from), redactDB(*to))
	for _, m := range moved {
		if m.table.notCopied != "" && m.rows > 0 {
			fmt.Fprintf(stdout, "did not copy %d %s: %s\n", m.rows, m.table.noun, m.table.notCopied)
		}
	}
	return nil
}

// listOf joins items as a sentence does: "a", "a and b", "a, b and c".
func listOf(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// copyDatabase copies from src to dst (see copyStore). Both are opened as the
// service opens them, so each is first brought to this binary's schema
// version.
func copyDatabase(ctx context.Context, src, dst string) ([]tableRows, error) {
	// A SQLite file a service serves is not written under it (its memory
	// would miss the rows), nor served while the copy writes it: the copy
	// holds its lock. -from is read without one, live or not.
	lock, err := lockDatabase(dst)
	if err != nil {
		return nil, &configError{"copy -to", err.Error()}
	}
	defer lock.release()
	from, err := openStore(ctx, src, 0)
	if err != nil {
		return nil, &configError{"copy -from", err.Error()}
	}
	defer from.Close()
	to, err := openStore(ctx, dst, 0)
	if err != nil {
		return nil, &configError{"copy -to", err.Error()}
	}
	defer to.Close()
	moved, err := copyStore(ctx, from, to)
	if ne, ok := errors.AsType[*notEmptyError](err); ok {
		return nil, &configError{"copy -to", fmt.Sprintf("%s already holds data (%d rows in %s); copy only into an empty database", redactDB(dst), ne.rows, ne.table)}
	}
	return moved, err
}
