package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// This file is `petstore keys`: issuing keys (new) and showing what a key
// file holds (list). The service itself reads keys in auth.go.

// runKeys is `petstore keys new|list ...`.
func runKeys(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &configError{"keys", "expected new or list (petstore keys new -h, petstore keys list -h)"}
	}
	switch args[0] {
	case "new":
		return runKeysNew(args[1:], time.Now(), stdout, stderr)
	case "list":
		return runKeysList(args[1:], getenv, time.Now(), stdout, stderr)
	}
	return &configError{"keys", fmt.Sprintf("unknown command %q; expected new or list", args[0])}
}

// runKeysNew is `petstore keys new [-label L] [-scopes S] [-expires 90d|DATE]
// [-file F]`: it prints a fresh psk_ key on the first line of stdout (shown
// this once: only its digest is kept), and either prints the key-file line
// for it on the second or, with -file, appends that line to the file.
func runKeysNew(args []string, now time.Time, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("petstore keys new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	label := fs.String("label", "", "the caller's name in logs and metrics: 1 to 64 letters, digits, '.', '_' or '-'")
	scopes := fs.String("scopes", string(scopeAll), "comma-separated scopes, without spaces (* is every scope):"+scopeHelp())
	expires := fs.String("expires", "", "when the key stops working: a number of days (90d), a date (2027-03-01, UTC) or an RFC 3339 time; default: never")
	file := fs.String("file", "", "key file to append the key's line to (created with mode 0600 if missing); default: print the line")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &configError{"keys new", err.Error()}
	}
	if fs.NArg() > 0 {
		return &configError{"keys new", fmt.Sprintf("unexpected %q; all settings are flags (see -h)", fs.Arg(0))}
	}
	if *label != "" {
		// What the service would refuse in the key file.
		if err := checkLabel(*label); err != nil {
			return &configError{"-label", err.Error()}
		}
	}
	set, err := parseScopes(*scopes)
	if err != nil {
		return &configError{"-scopes", strings.TrimPrefix(err.Error(), "scopes= takes ")}
	}
	var until time.Time
	if *expires != "" {
		if until, err = parseKeyExpiry(*expires, now); err != nil {
			return &configError{"-expires", err.Error()}
		}
	}
	key := newPSK()
	line := keyFileLine(key, *label, set, until)
	if *file == "" {
		_, err := fmt.Fprintf(stdout, "%s\n%s\n", key, line)
		fmt.Fprintln(stderr, "petstore: the first line is the key: give it to its client now, it is not kept anywhere. The second is its line for the key file: add it, then send SIGHUP to the service (systemctl reload petstore, or kill -HUP <pid>).")
		return err
	}
	if err := appendKeyLine(*file, line); err != nil {
		return &configError{"-file", err.Error()}
	}
	if _, err := fmt.Fprintln(stdout, key); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "petstore: the key above is shown only now: give it to its client. Its line is added to %s; send SIGHUP to the service to load it (systemctl reload petstore, or kill -HUP <pid>).\n", *file)
	return nil
}

// parseKeyExpiry reads -expires: a number of days from now ("90d"), or what
// expires= takes, with parseExpiry, so that keys new refuses what the key
// file would (an expiry before earliestExpiryYear). A time already past is
// refused.
func parseKeyExpiry(value string, now time.Time) (time.Time, error) {
	var t time.Time
	if days, ok := strings.CutSuffix(value, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 100*366 {
			return t, errors.New("a number of days is 1d to 36600d")
		}
		t = now.UTC().Add(time.Duration(n) * 24 * time.Hour).Truncate(time.Second)
	} else {
		var err error
		if t, err = parseExpiry(value); errors.Is(err, errExpiryTooEarly) {
			return t, err // as the key file says it
		} else if err != nil {
			return t, errors.New("expected a number of days (90d), a date (2027-03-01, UTC) or an RFC 3339 time (2027-03-01T12:00:00Z)")
		}
	}
	if !t.After(now) {
		return t, fmt.Errorf("%s is already past", t.Format(time.RFC3339))
	}
	return t, nil
}

// keyFileLine is the key file's line for key: its digest (so that the file
// holds no key), its label, and its scopes and expiry when they are not the
// defaults.
func keyFileLine(key, label string, set scopeSet, expires time.Time) string {
	var b strings.Builder
	d := sha256.Sum256([]byte(key))
	b.WriteString("sha256:" + hex.EncodeToString(d[:]))
	if label != "" {
		b.WriteString(" " + label)
	}
	b.WriteString(" scopes=" + set.String())
	if !expires.IsZero() {
		b.WriteString(" expires=" + expires.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// appendKeyLine appends line to the key file at path, creating it with mode
// 0600 when missing. A file that is not regular, or that another user could
// change (see checkPrivateFile), is refused, as the service would refuse it.
func appendKeyLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return fmt.Errorf("cannot open %s: %v", path, errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot read %s: %v", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (its type is %s); refusing it", path, fileType(fi.Mode()))
	}
	if err := checkPrivateFile(path, f, 0o022); err != nil {
		return fmt.Errorf("%s %w; refusing it, as whoever can change it can add a key", path, err)
	}
	// A last line without its newline would join the new one.
	if size := fi.Size(); size > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, size-1); err != nil {
			return fmt.Errorf("cannot read %s: %v", path, err)
		}
		if last[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("cannot write %s: %v", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cannot write %s: %v", path, err)
	}
	return f.Close()
}

// runKeysList is `petstore keys list -file F`: each entry's label, id,
// scopes and expiry, never a digest. The ids are the ones the service logs
// and reports in its metrics, so they need its secret: -secret-file, or the
// file beside -db, as the service finds them (and their variables). Without
// a readable secret the ids show as "?".
func runKeysList(args []string, getenv func(string) string, now time.Time, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("petstore keys list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("file", getenv(envName("api-keys-file")), "the key file ("+envName("api-keys-file")+")")
	secretFile := fs.String("secret-file", getenv(envName("secret-file")), "the service's secret file, for the ids ("+envName("secret-file")+"); default: the database path + .secret")
	dbPath := fs.String("db", cmp.Or(getenv(envName("db")), "petstore.db"), "the service's database, beside which its secret is by default ("+envName("db")+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &configError{"keys list", err.Error()}
	}
	if fs.NArg() > 0 {
		return &configError{"keys list", fmt.Sprintf("unexpected %q; all settings are flags (see -h)", fs.Arg(0))}
	}
	if *file == "" {
		return &configError{"-file", "name the key file to list"}
	}
	secretPath := *secretFile
	if secretPath == "" && *dbPath != memoryDB && !isPostgresURL(*dbPath) {
		secretPath = defaultSecretFile(*dbPath)
	}
	var secret []byte
	if secretPath != "" {
		s, err := readSecret(secretPath)
		if err != nil {
			fmt.Fprintf(stderr, "petstore: ids unknown (?): %v\n", err)
		}
		secret = s
	} else {
		fmt.Fprintln(stderr, "petstore: ids unknown (?): give -secret-file, the service's secret")
	}
	entries, err := readKeyFile(*file, secret)
	if err != nil {
		return &configError{"-file", err.Error()}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LABEL\tID\tSCOPES\tEXPIRES")
	for _, e := range entries {
		id, label := e.shortID(), e.label
		if secret == nil {
			id = "?"
			if label == "key-"+e.shortID() {
				label = "(none)" // the label made from its id, which is unknown
			}
		}
		expiry := "never"
		switch {
		case e.expired(now):
			expiry = e.expires.Format(time.RFC3339) + " (expired)"
		case !e.expires.IsZero():
			expiry = e.expires.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", label, id, e.scopes, expiry)
	}
	return tw.Flush()
}
