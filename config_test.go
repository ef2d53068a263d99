package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// runConfig runs the program with env and args and no standard input.
func runConfig(t *testing.T, env map[string]string, args ...string) error {
	t.Helper()
	// A configuration accepted where it should be refused serves until the
	// context ends: end it soon, so the test fails then rather than at the
	// suite's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return run(ctx, args, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard)
}

func TestRunRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	aFile := filepath.Join(dir, "a-file")
	writeFile(t, aFile, "not a directory")
	writeFile(t, filepath.Join(dir, "bad-keys"), "sha256:nothex label\n")
	good := makeCert(t, dir, "good", time.Now().Add(24*time.Hour))
	other := makeCert(t, dir, "other", time.Now().Add(24*time.Hour))
	expired := makeCert(t, dir, "expired", time.Now().Add(-time.Minute))
	writeFile(t, filepath.Join(dir, "twice-keys"), "alpha-key-0123456789 a\nbeta-key-0123456789 b\nalpha-key-0123456789 c scopes=pets:read\n")
	alpha := sha256.Sum256([]byte("alpha-key-0123456789"))
	writeFile(t, filepath.Join(dir, "twice-digest-keys"), "alpha-key-0123456789 a\nsha256:"+hex.EncodeToString(alpha[:])+" b scopes=pets:read\n")
	writeFile(t, filepath.Join(dir, "env-again-keys"), "# the same as PETSTORE_API_KEYS\n"+testKey+" narrow scopes=pets:read,events:read\n")
	for name, mode := range map[string]os.FileMode{"group-writable-keys": 0o620, "world-writable-keys": 0o602} {
		writeFile(t, filepath.Join(dir, name), testKey+"\n")
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "short-secret"), "too-short\n")
	writeFile(t, filepath.Join(dir, "shared-secret"), strings.Repeat("s", 40))
	if err := os.Chmod(filepath.Join(dir, "shared-secret"), 0o660); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "readable-secret"), strings.Repeat("s", 40))
	if err := os.Chmod(filepath.Join(dir, "readable-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	held := heldDatabase(t, filepath.Join(dir, "held.db"))
	writeFile(t, filepath.Join(dir, "bad-seed.json"), `[{"name":"Rex","categoryId":1},{"name":"NoCategory"}]`)
	writeFile(t, filepath.Join(dir, "not-json.json"), `{"name":`)

	tests := []struct {
		rule    string
		env     map[string]string
		args    []string
		setting string
		mention string
	}{
		{"an address without a port", map[string]string{"PETSTORE_ADDR": "localhost"}, nil, "-addr (PETSTORE_ADDR)", "host:port"},
		{"a bad -addr flag", nil, []string{"-addr", "nonsense"}, "-addr (PETSTORE_ADDR)", "host:port"},
		{"a port out of range", nil, []string{"-addr", "127.0.0.1:70000"}, "-addr (PETSTORE_ADDR)", "0 to 65535"},
		{"a port that is a name", nil, []string{"-addr", "127.0.0.1:http"}, "-addr (PETSTORE_ADDR)", "0 to 65535"},
		{"an address already in use", map[string]string{"PETSTORE_ADDR": taken.Addr().String()}, nil, "-addr (PETSTORE_ADDR)", "in use"},
		{"a database in a missing directory", nil, []string{"-db", filepath.Join(dir, "missing", "x.db")}, "-db (PETSTORE_DB)", "cannot create files in directory"},
		{"a database under a regular file", nil, []string{"-db", filepath.Join(aFile, "x.db")}, "-db (PETSTORE_DB)", "cannot create files in directory"},
		{"a database path that is a directory", nil, []string{"-db", dir}, "-db (PETSTORE_DB)", "is a directory"},
		{"a database path with '?'", nil, []string{"-db", filepath.Join(dir, "x?.db")}, "-db (PETSTORE_DB)", "'?'"},
		{"an empty database path", nil, []string{"-db", ""}, "-db (PETSTORE_DB)", "empty"},
		{"a database file that is not SQLite", nil, []string{"-db", aFile}, "-db (PETSTORE_DB)", "not a database"},
		{"a database file another process serves", map[string]string{"PETSTORE_DB": held}, nil, "-db (PETSTORE_DB)", fmt.Sprintf("%s is served by process %d", held, os.Getpid())},
		{"a missing key file", nil, []string{"-api-keys-file", filepath.Join(dir, "nope")}, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "cannot read"},
		{"a key file that is a directory", map[string]string{"PETSTORE_API_KEYS_FILE": dir}, nil, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "key file"},
		{"a key file with a bad line", nil, []string{"-api-keys-file", filepath.Join(dir, "bad-keys")}, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "line 1"},
		{"a key file that lists a key twice", nil, []string{"-api-keys-file", filepath.Join(dir, "twice-keys")}, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "line 3 is the same key as line 1"},
		{"a key file that lists a key and its digest", nil, []string{"-api-keys-file", filepath.Join(dir, "twice-digest-keys")}, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "line 2 is the same key as line 1"},
		{"a key file that lists a key of PETSTORE_API_KEYS again", nil, []string{"-api-keys-file", filepath.Join(dir, "env-again-keys")}, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "line 2 is the same key as key 1 of PETSTORE_API_KEYS"},
		{"PETSTORE_API_KEYS with a key twice", map[string]string{"PETSTORE_API_KEYS": "one-key-0123456789, two-key-0123456789,one-key-0123456789"}, nil, "PETSTORE_API_KEYS", "key 3 of PETSTORE_API_KEYS is the same key as key 1"},
		{"PETSTORE_API_KEYS with a digest", map[string]string{"PETSTORE_API_KEYS": "one-key-0123456789,sha256:" + strings.Repeat("ab", 32)}, nil, "PETSTORE_API_KEYS", "key 2 of PETSTORE_API_KEYS reads as a digest"},
		{"PETSTORE_API_KEYS with a digest in upper case", map[string]string{"PETSTORE_API_KEYS": "SHA256:" + strings.Repeat("AB", 32)}, nil, "PETSTORE_API_KEYS", "key 1 of PETSTORE_API_KEYS reads as a digest"},
		{"PETSTORE_API_KEYS with a character no one sees", map[string]string{"PETSTORE_API_KEYS": "one-key-0123456789,two-key-\u200b0123456789"}, nil, "PETSTORE_API_KEYS", "key 2 of PETSTORE_API_KEYS holds an invisible format character (U+200B)"},
		{"PETSTORE_API_KEYS with a byte order mark", map[string]string{"PETSTORE_API_KEYS": "\ufeffone-key-0123456789"}, nil, "PETSTORE_API_KEYS", "key 1 of PETSTORE_API_KEYS holds a byte order mark (U+FEFF)"},
		{"a missing TLS certificate", nil, []string{"-tls-cert", filepath.Join(dir, "none.crt"), "-tls-key", good.keyFile}, "-tls-cert (PETSTORE_TLS_CERT)", "cannot read " + filepath.Join(dir, "none.crt")},
		{"a missing TLS key", map[string]string{"PETSTORE_TLS_CERT": good.certFile, "PETSTORE_TLS_KEY": filepath.Join(dir, "none.key")}, nil, "-tls-key (PETSTORE_TLS_KEY)", "cannot read"},
		{"a TLS key of another certificate", nil, []string{"-tls-cert", good.certFile, "-tls-key", other.keyFile}, "-tls-key (PETSTORE_TLS_KEY)", "are not a certificate and its private key"},
		{"a TLS key given as the certificate", nil, []string{"-tls-cert", good.keyFile, "-tls-key", good.keyFile}, "-tls-cert (PETSTORE_TLS_CERT)", "holds no PEM certificate"},
		{"an expired TLS certificate", nil, []string{"-tls-cert", expired.certFile, "-tls-key", expired.keyFile}, "-tls-cert (PETSTORE_TLS_CERT)", "expired at"},
		{"a TLS certificate without its key", nil, []string{"-tls-cert", good.certFile}, "-tls-key (PETSTORE_TLS_KEY)", "is missing"},
		{"-domain with -tls-cert", nil, []string{"-domain", "shop.example.com", "-tls-cert", good.certFile, "-tls-key", good.keyFile}, "-domain (PETSTORE_DOMAIN)", "one or the other"},
		{"a wildcard domain", nil, []string{"-domain", "*.example.com"}, "-domain (PETSTORE_DOMAIN)", "without a wildcard"},
		{"a domain that is an IP address", map[string]string{"PETSTORE_DOMAIN": "shop.example.com,192.0.2.7"}, nil, "-domain (PETSTORE_DOMAIN)", "IP address"},
		{"an ACME CA over plain HTTP", nil, []string{"-domain", "shop.example.com", "-acme-ca", "http://ca.example.com/dir"}, "-acme-ca (PETSTORE_ACME_CA)", "https URL"},
		{"an ACME setting without -domain", map[string]string{"PETSTORE_ACME_EMAIL": "ops@example.com"}, nil, "-domain (PETSTORE_DOMAIN)", "is missing"},
		{"a plain listener without HTTPS", nil, []string{"-http-addr", "127.0.0.1:0"}, "-http-addr (PETSTORE_HTTP_ADDR)", "beside HTTPS"},
		{"a key file its group can write", nil, []string{"-api-keys-file", filepath.Join(dir, "group-writable-keys")}, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "written by its group or by other users (mode 0620)"},
		{"a key file anyone can write", nil, []string{"-api-keys-file", filepath.Join(dir, "world-writable-keys")}, "-api-keys-file (PETSTORE_API_KEYS_FILE)", "(mode 0602)"},
		{"a missing secret file, named", nil, []string{"-secret-file", filepath.Join(dir, "no-secret")}, "-secret-file (PETSTORE_SECRET_FILE)", "cannot read the secret file " + filepath.Join(dir, "no-secret")},
		{"a secret file other users can read", nil, []string{"-secret-file", filepath.Join(dir, "readable-secret")}, "-secret-file (PETSTORE_SECRET_FILE)", "read by other users (mode 0644)"},
		{"a secret too short", map[string]string{"PETSTORE_SECRET_FILE": filepath.Join(dir, "short-secret")}, nil, "-secret-file (PETSTORE_SECRET_FILE)", "at least 32"},
		{"a secret file its group can write", nil, []string{"-secret-file", filepath.Join(dir, "shared-secret")}, "-secret-file (PETSTORE_SECRET_FILE)", "(mode 0660)"},
		{"a negative timeout", nil, []string{"-read-timeout", "-1s"}, "-read-timeout (PETSTORE_READ_TIMEOUT)", "negative"},
		{"a negative shutdown timeout from the environment", map[string]string{"PETSTORE_SHUTDOWN_TIMEOUT": "-5s"}, nil, "-shutdown-timeout (PETSTORE_SHUTDOWN_TIMEOUT)", "negative"},
		{"a timeout that is not a duration", map[string]string{"PETSTORE_WRITE_TIMEOUT": "soon"}, nil, "PETSTORE_WRITE_TIMEOUT", "soon"},
		{"a header limit too small", nil, []string{"-max-header-bytes", "10"}, "-max-header-bytes (PETSTORE_MAX_HEADER_BYTES)", "at least 1024"},
		{"an unknown log format", map[string]string{"PETSTORE_LOG_FORMAT": "xml"}, nil, "-log-format (PETSTORE_LOG_FORMAT)", "text or json"},
		{"a missing seed file", nil, []string{"-seed", filepath.Join(dir, "none.json")}, "-seed (PETSTORE_SEED)", "cannot read"},
		{"a seed file that is not JSON", nil, []string{"-seed", filepath.Join(dir, "not-json.json")}, "-seed (PETSTORE_SEED)", "JSON array"},
		{"a seed file with an invalid pet", nil, []string{"-seed", filepath.Join(dir, "bad-seed.json")}, "-seed (PETSTORE_SEED)", "pet 1 (counting from 0): field categoryId is required"},
		{"a zero -idempotency-ttl", nil, []string{"-idempotency-ttl", "0s"}, "-idempotency-ttl (PETSTORE_IDEMPOTENCY_TTL)", "not positive"},
		{"an -idempotency-ttl without unit", map[string]string{"PETSTORE_IDEMPOTENCY_TTL": "24"}, nil, "PETSTORE_IDEMPOTENCY_TTL", "24"},
		{"a negative -rate-limit", nil, []string{"-rate-limit", "-1"}, "-rate-limit (PETSTORE_RATE_LIMIT)", "requests per second"},
		{"a -rate-limit that is not a number", map[string]string{"PETSTORE_RATE_LIMIT": "fast"}, nil, "PETSTORE_RATE_LIMIT", "fast"},
		{"an infinite -rate-limit", nil, []string{"-rate-limit", "+Inf"}, "-rate-limit (PETSTORE_RATE_LIMIT)", "requests per second"},
		{"a NaN -rate-limit", nil, []string{"-rate-limit", "NaN"}, "-rate-limit (PETSTORE_RATE_LIMIT)", "requests per second"},
		{"a negative -rate-burst", nil, []string{"-rate-limit", "1", "-rate-burst", "-1"}, "-rate-burst (PETSTORE_RATE_BURST)", "negative"},
		{"a fractional -rate-burst", map[string]string{"PETSTORE_RATE_LIMIT": "1", "PETSTORE_RATE_BURST": "1.5"}, nil, "PETSTORE_RATE_BURST", "1.5"},
		{"a -rate-burst without -rate-limit", nil, []string{"-rate-burst", "5"}, "-rate-burst (PETSTORE_RATE_BURST)", "without -rate-limit"},
		{"a replica URL with a user and password", nil, []string{"-replicate", "s3://AKIAX:secretkey@bucket/path"}, "-replicate (PETSTORE_REPLICATE)", "carries credentials"},
		{"a replica URL with a key in its query", map[string]string{"PETSTORE_REPLICATE": "s3://bucket/path?access-key-id=AKIAX&secret-access-key=secretkey"}, nil, "-replicate (PETSTORE_REPLICATE)", "carries credentials"},
		{"a replica endpoint with credentials", nil, []string{"-replicate", "s3://bucket/path?endpoint=http://u:secretkey@127.0.0.1:9000"}, "-replicate (PETSTORE_REPLICATE)", "the endpoint carries credentials"},
		{"a replica of a PostgreSQL database", map[string]string{"PETSTORE_DB": "postgres://petstore@127.0.0.1:1/petstore"}, []string{"-replicate", "file://" + filepath.Join(dir, "replica")}, "-replicate (PETSTORE_REPLICATE)", "pgBackRest or WAL-G"},
		{"a replica URL of another scheme", nil, []string{"-replicate", "gs://bucket/path"}, "-replicate (PETSTORE_REPLICATE)", "s3://BUCKET/PATH"},
		{"a replica URL without a path", nil, []string{"-replicate", "s3://bucket"}, "-replicate (PETSTORE_REPLICATE)", "s3://BUCKET/PATH"},
		{"a replica URL with an unknown parameter", nil, []string{"-replicate", "s3://bucket/path?storage-class=GLACIER"}, "-replicate (PETSTORE_REPLICATE)", "storage-class"},
		{"a replica of a database in memory", nil, []string{"-db", ":memory:", "-replicate", "file://" + filepath.Join(dir, "replica")}, "-replicate (PETSTORE_REPLICATE)", ":memory:"},
		{"replication settings without -replicate", nil, []string{"-replicate-sync"}, "-replicate (PETSTORE_REPLICATE)", "is missing"},
		{"a replica retention shorter than its snapshots' interval", nil, []string{"-replicate", "file://" + filepath.Join(dir, "replica"), "-replicate-retention", "1h"}, "-replicate-retention (PETSTORE_REPLICATE_RETENTION)", "shorter than -replicate-snapshot-interval"},
		{"a replica timeout of zero", nil, []string{"-replicate", "file://" + filepath.Join(dir, "replica"), "-replicate-timeout", "0s"}, "-replicate-timeout (PETSTORE_REPLICATE_TIMEOUT)", "not positive"},
		{"an S3 replica with AWS_CA_BUNDLE set", map[string]string{"AWS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt"}, []string{"-replicate", "s3://bucket/path?endpoint=http://127.0.0.1:1"}, "AWS_CA_BUNDLE", "SSL_CERT_FILE"},
		{"a profiles address on every interface", nil, []string{"-pprof-addr", ":6060"}, "-pprof-addr (PETSTORE_PPROF_ADDR)", "not a loopback address"},
		{"a profiles address that is not loopback", map[string]string{"PETSTORE_PPROF_ADDR": "192.0.2.1:0"}, nil, "-pprof-addr (PETSTORE_PPROF_ADDR)", "not a loopback address"},
		{"a profiles address without a port", nil, []string{"-pprof-addr", "127.0.0.1"}, "-pprof-addr (PETSTORE_PPROF_ADDR)", "host:port"},
		{"a profiles address already in use", nil, []string{"-pprof-addr", taken.Addr().String()}, "-pprof-addr (PETSTORE_PPROF_ADDR)", "in use"},
		{"an unknown flag", nil, []string{"-bogus"}, "flags", "bogus"},
		{"a positional argument", nil, []string{"extra"}, "arguments", "extra"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			env := map[string]string{"PETSTORE_DB": filepath.Join(dir, "x.db"), "PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_API_KEYS": testKey}
			for k, v := range tt.env {
				env[k] = v
			}
			err := runConfig(t, env, tt.args...)
			ce, ok := errors.AsType[*configError](err)
			if !ok || ce.setting != tt.setting || !strings.Contains(ce.problem, tt.mention) {
				t.Fatalf("run() = %v, want a configError for %s mentioning %q", err, tt.setting, tt.mention)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the error is not one line: %q", err)
			}
			for k := range strings.SplitSeq(tt.env["PETSTORE_API_KEYS"], ",") {
				if k = strings.TrimSpace(k); k != "" && strings.Contains(err.Error(), k) {
					t.Errorf("the error %q repeats a key of PETSTORE_API_KEYS", err)
				}
			}
			if strings.Contains(err.Error(), "secretkey") {
				t.Errorf("the error %q repeats a secret of the replica's URL", err)
			}
		})
	}
}

// heldDatabase holds the lock of the database at path until the test ends,
// as another process serving it would, and returns path.
func heldDatabase(t *testing.T, path string) string {
	t.Helper()
	lock, err := lockDatabase(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lock.release)
	return path
}

// TestBadConfigurationExitsWithCode2BeforeListening: the real binary, given a
// setting that cannot work, prints one line naming it and exits 2 without
// listening; a TLS file that is a FIFO, a device or too long is such a
// setting, refused at once.
func TestBadConfigurationExitsWithCode2BeforeListening(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.crt")
	good := makeCert(t, dir, "good", time.Now().Add(24*time.Hour))
	fifo := filepath.Join(dir, "fifo.key")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.crt")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.crt")
	writeFile(t, big, string(mustRead(t, good.certFile))+strings.Repeat("#", maxPEMFileLen))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-read-timeout", "-3s"}, "petstore: -read-timeout (PETSTORE_READ_TIMEOUT): -3s is negative; use 0 for no limit\n"},
		{[]string{"-tls-cert", missing, "-tls-key", missing}, "petstore: -tls-cert (PETSTORE_TLS_CERT): cannot read " + missing + ": no such file or directory\n"},
		// Each read at once, never waited on nor read without end.
		{[]string{"-tls-cert", good.certFile, "-tls-key", fifo}, "petstore: -tls-key (PETSTORE_TLS_KEY): " + fifo + " is not a regular file (its type is named pipe (FIFO)); refusing it\n"},
		{[]string{"-tls-cert", zero, "-tls-key", good.keyFile}, "petstore: -tls-cert (PETSTORE_TLS_CERT): " + zero + " is not a regular file (its type is device); refusing it\n"},
		{[]string{"-tls-cert", big, "-tls-key", good.keyFile}, "petstore: -tls-cert (PETSTORE_TLS_CERT): " + big + " is longer than 1048576 bytes; refusing it\n"},
	} {
		// Bounded, so that a file read without end fails the test, not the
		// machine, and one that blocks fails it in time.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `ulimit -v 1048576 && exec "$0" "$@"`, bin}, tt.args...)...)
		cmd.Env = append(os.Environ(), "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB="+filepath.Join(t.TempDir(), "x.db"))
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: exit: %v, want exit code 2", tt.args, err)
		}
		if diff := cmp.Diff(tt.want, stderr.String()); diff != "" {
			t.Errorf("%v: stderr mismatch (-want +got):\n%s", tt.args, diff)
		}
		if stdout.Len() != 0 {
			t.Errorf("%v: stdout = %q, want nothing (it never listened)", tt.args, stdout.String())
		}
	}
}

func TestHelpListsEveryOption(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run(t.Context(), []string{"-h"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(-h) = %v, want flag.ErrHelp", err)
	}
	for _, want := range [][]string{
		{"-addr", "PETSTORE_ADDR", ":8080"},
		{"-db", "PETSTORE_DB", "petstore.db"},
		{"-api-keys-file", "PETSTORE_API_KEYS_FILE", "(none)"},
		{"-log-format", "PETSTORE_LOG_FORMAT", "text"},
		{"-seed", "PETSTORE_SEED", "(none)"},
		{"-read-header-timeout", "PETSTORE_READ_HEADER_TIMEOUT", "5s"},
		{"-read-timeout", "PETSTORE_READ_TIMEOUT", "30s"},
		{"-write-timeout", "PETSTORE_WRITE_TIMEOUT", "30s"},
		{"-idle-timeout", "PETSTORE_IDLE_TIMEOUT", "2m0s"},
		{"-shutdown-timeout", "PETSTORE_SHUTDOWN_TIMEOUT", "10s"},
		{"-max-header-bytes", "PETSTORE_MAX_HEADER_BYTES", "65536"},
		{"-idempotency-ttl", "PETSTORE_IDEMPOTENCY_TTL", "24h0m0s"},
		{"-rate-limit", "PETSTORE_RATE_LIMIT", "0"},
		{"-rate-burst", "PETSTORE_RATE_BURST", "0"},
		{"", "PETSTORE_API_KEYS", "(none)"},
		{"backup -db FILE OUT.db"},
		{"restore -from URL -db PATH [-at TIME]"},
		{"restore -from URL -list"},
		{"hash-key"},
	} {
		found := false
		for line := range strings.SplitSeq(out.String(), "\n") {
			if fields := strings.Fields(line); containsAll(fields, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("-h output has no line with %q:\n%s", want, out.String())
		}
	}
}

// containsAll reports whether the words of line include every non-empty
// entry of want, in order, as whole words or joined phrases.
func containsAll(words, want []string) bool {
	line := " " + strings.Join(words, " ") + " "
	for _, w := range want {
		if w != "" && !strings.Contains(line, " "+w+" ") {
			return false
		}
	}
	return true
}

func TestParseKeyFile(t *testing.T) {
	t.Parallel()
	digest := func(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }
	hexOf := func(key string) string { d := digest(key); return hex.EncodeToString(d[:]) }
	// entry is the entry of key: its digest, its id under testSecret, and
	// label, or without one the label of its id.
	entry := func(key, label string) keyEntry {
		if label == "" {
			label = callerLabel(testSecret, key)
		}
		return keyEntry{digest: digest(key), id: keyID(testSecret, key), label: label, scopes: everyScope}
	}
	// short is entry for a key given in full that is shorter than
	// minKeyLen, which start-up warns about.
	short := func(key, label string) keyEntry {
		e := entry(key, label)
		e.short = true
		return e
	}
	psk := newPSK()
	tests := []struct {
		rule string
		file string
		want []keyEntry
	}{
		{"a plain key gets a label from its id", "alpha-key-0123456789\n",
			[]keyEntry{entry("alpha-key-0123456789", "")}},
		{"a labelled key", "alpha-key-0123456789 shop-frontend\n",
			[]keyEntry{entry("alpha-key-0123456789", "shop-frontend")}},
		{"a key shorter than 16 characters is marked", "alpha-key\n",
			[]keyEntry{short("alpha-key", "")}},
		{"a hashed key", "sha256:" + hexOf("beta") + "\n",
			[]keyEntry{entry("beta", "")}},
		{"a hashed key with a label, in upper-case hex", "sha256:" + strings.ToUpper(hexOf("beta")) + " billing\n",
			[]keyEntry{entry("beta", "billing")}},
		{"comments, blank lines and indentation", "# keys for prod\n\n   alpha-key   web # rotated 2026-11\n\t# gone-key\nbeta",
			[]keyEntry{short("alpha-key", "web"), short("beta", "")}},
		{"two keys may share a label (rotation)", "old-key-0123456789 web\nnew-key-0123456789 web\n",
			[]keyEntry{entry("old-key-0123456789", "web"), entry("new-key-0123456789", "web")}},
		{"an empty file", "", nil},
		{"a line ending of Windows (CRLF) is no invisible character", "alpha-key-0123456789 web\r\nbeta\r\n",
			[]keyEntry{entry("alpha-key-0123456789", "web"), short("beta", "")}},
		{"a key of openssl rand -base64, with + / and =", "q1+w2/E3r4T5y6U7i8O9p0AsDfGhJkLzXcVbNm12345=\n",
			[]keyEntry{entry("q1+w2/E3r4T5y6U7i8O9p0AsDfGhJkLzXcVbNm12345=", "")}},
		{"a key of petstore keys new", psk + " shop\n", []keyEntry{entry(psk, "shop")}},
		{"a key of 32 hex digits (openssl rand -hex 16) is no digest", "0123456789abcdef0123456789ABCDEF\n",
			[]keyEntry{entry("0123456789abcdef0123456789ABCDEF", "")}},
		{"a key with a colon and fewer hex digits than a digest", "shop:0123456789abcdef0123456789abcde\n",
			[]keyEntry{entry("shop:0123456789abcdef0123456789abcde", "")}},
		{"a key of visible letters beyond ASCII", "clé-d’accès-0123456789 web\n",
			[]keyEntry{entry("clé-d’accès-0123456789", "web")}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			got, err := parseKeyFile(strings.NewReader(tt.file), testSecret)
			if err != nil {
				t.Fatalf("parseKeyFile: %v", err)
			}
			// Where a key is listed is for the error that refuses one
			// listed twice (see TestAKeyListedTwiceIsRefused).
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(keyEntry{}), cmpopts.IgnoreFields(keyEntry{}, "source")); diff != "" {
				t.Errorf("parseKeyFile mismatch (-want +got):\n%s", diff)
			}
		})
	}

	bad := []struct {
		rule, file, mention string
	}{
		{"three words", "secret-key label extra\n", "line 1"},
		{"a digest that is not hex", "ok-key\nsha256:zz" + strings.Repeat("0", 62) + "\n", "line 2"},
		{"a short digest", "sha256:abcd\n", "64 hex digits"},
		{"a label with a space-like character", "secret-key bad/label\n", "label"},
		{"a label too long", "secret-key " + strings.Repeat("x", 65) + "\n", "label"},
		{"a byte order mark at the start of the file", "\ufeffsha256:" + hexOf("secret-key") + " shop\n", "line 1: starts with a byte order mark"},
		{"a byte order mark at the start of a file that opens with a comment", "\ufeff# keys\nsecret-key-0123456789\n", "line 1: starts with a byte order mark"},
	}
	for _, tt := range bad {
		t.Run("refused: "+tt.rule, func(t *testing.T) {
			_, err := parseKeyFile(strings.NewReader(tt.file), testSecret)
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("parseKeyFile = %v, want an error mentioning %q", err, tt.mention)
			}
			if strings.Contains(err.Error(), "secret-key") || strings.Contains(err.Error(), "ok-key") || strings.Contains(err.Error(), hexOf("secret-key")) {
				t.Errorf("the error repeats a key: %v", err)
			}
		})
	}
}

func TestTheSecretKeepsKeysOutOfTheDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "pets.db")
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": dbPath, "PETSTORE_API_KEYS": testKey}
	callerOf := func(t *testing.T, rs *runningService) string {
		t.Helper()
		recs := rs.Stderr.find(t, "INFO", "request")
		if len(recs) == 0 {
			t.Fatalf("no access line logged")
		}
		return recs[len(recs)-1].field("caller")
	}
	rs := startRun(t, env, "-log-format", "json")
	if res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, map[string]string{idempotencyHeader: "once"}); res.Status != http.StatusCreated {
		t.Fatalf("create: status %d, body %s", res.Status, res.Body)
	}
	if err := rs.stop(t); err != nil {
		t.Fatal(err)
	}

	t.Run("a secret is made next to the database, readable by its owner only", func(t *testing.T) {
		fi, err := os.Stat(defaultSecretFile(dbPath))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("secret file: %v, mode %v; want 0600", err, fi.Mode().Perm())
		}
		if n := len(secretOf(t, dbPath)); n < minSecretLen {
			t.Errorf("the made secret has %d characters, want at least %d", n, minSecretLen)
		}
	})
	t.Run("the database holds the key's HMAC, never its digest", func(t *testing.T) {
		digest := sha256.Sum256([]byte(testKey))
		id := keyID(secretOf(t, dbPath), testKey)
		b, err := os.ReadFile(dbPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), string(digest[:])) {
			t.Errorf("the database file holds the SHA-256 digest of the key")
		}
		if !strings.Contains(string(b), string(id[:])) {
			t.Errorf("the database file does not hold the key's HMAC: the record is scoped by something else")
		}
	})
	t.Run("a caller's label comes from the secret, the same at each start", func(t *testing.T) {
		rs := startRun(t, env, "-log-format", "json")
		doRequest(t, rs.URL, "GET", "/v1/pets", "", nil)
		want := callerLabel(secretOf(t, dbPath), testKey)
		if got := callerOf(t, rs); got != want {
			t.Errorf("caller %q, want %q", got, want)
		}
		if naive := sha256.Sum256([]byte(testKey)); want == "key-"+hex.EncodeToString(naive[:4]) {
			t.Errorf("the label %s is the key's digest", want)
		}
	})
	t.Run("replicas given one secret file name a caller alike", func(t *testing.T) {
		shared := filepath.Join(t.TempDir(), "secret")
		writeFile(t, shared, strings.Repeat("r", 40)+"\n")
		var labels []string
		for range 2 {
			rs := startRun(t, map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": filepath.Join(t.TempDir(), "pets.db"),
				"PETSTORE_API_KEYS": testKey, "PETSTORE_SECRET_FILE": shared}, "-log-format", "json")
			doRequest(t, rs.URL, "GET", "/v1/pets", "", nil)
			labels = append(labels, callerOf(t, rs))
		}
		want := callerLabel([]byte(strings.Repeat("r", 40)), testKey)
		if diff := cmp.Diff([]string{want, want}, labels); diff != "" {
			t.Errorf("labels mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestHashKey(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := run(t.Context(), []string{"hash-key"}, os.Getenv, strings.NewReader("s3cret-key\n"), &out, io.Discard); err != nil {
		t.Fatalf("hash-key: %v", err)
	}
	d := sha256.Sum256([]byte("s3cret-key"))
	if diff := cmp.Diff("sha256:"+hex.EncodeToString(d[:])+"\n", out.String()); diff != "" {
		t.Errorf("hash-key output mismatch (-want +got):\n%s", diff)
	}

	// The printed line, in a key file, accepts the key.
	keyFile := filepath.Join(t.TempDir(), "keys")
	writeFile(t, keyFile, strings.TrimSpace(out.String())+" hashed-client\n")
	rs := startRun(t, map[string]string{
		"PETSTORE_ADDR":          "127.0.0.1:0",
		"PETSTORE_DB":            filepath.Join(t.TempDir(), "pets.db"),
		"PETSTORE_API_KEYS_FILE": keyFile,
		"PETSTORE_API_KEYS":      testKey, // both sources together
	})
	for _, key := range []string{"s3cret-key", testKey} {
		if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer " + key}); res.Status != 200 {
			t.Errorf("key from %s: status %d, want 200", map[bool]string{true: "the file", false: "the environment"}[key == "s3cret-key"], res.Status)
		}
	}

	err := run(t.Context(), []string{"hash-key"}, os.Getenv, strings.NewReader("\n"), io.Discard, io.Discard)
	if _, ok := errors.AsType[*configError](err); !ok {
		t.Errorf("hash-key with an empty line = %v, want a configError", err)
	}
}

// TestRedactDBHidesEveryPassword: a PostgreSQL URL is shown in logs and
// errors without its password, whether in the user information or in the
// query parameters libpq reads it from.
func TestRedactDBHidesEveryPassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ db, want string }{
		{"petstore.db", "petstore.db"},
		{"postgres://shop:s3cret@db.example:5432/petstore?sslmode=require", "postgres://shop:xxxxx@db.example:5432/petstore?sslmode=require"},
		{"postgresql://shop@db.example/petstore?password=s3cret&sslmode=verify-full", "postgresql://shop@db.example/petstore?password=xxxxx&sslmode=verify-full"},
		{"postgres://shop@db.example/petstore?sslpassword=s3cret", "postgres://shop@db.example/petstore?sslpassword=xxxxx"},
		{"postgres://shop:s3cret@db.example:port/petstore", "postgres://(unparsable URL)"},
	} {
		if got := redactDB(tc.db); got != tc.want {
			t.Errorf("redactDB(%q) = %q, want %q", tc.db, got, tc.want)
		}
	}
}
