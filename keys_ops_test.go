package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestKeysNewIsAcceptedThroughTheKeyFileAndSIGHUP issues a read-only key
// with the real binary, appends it to a running service's key file, and
// sends SIGHUP: the key is then accepted for reads and refused for writes,
// keys list shows it, the key about to expire is warned about at start and
// at the reload, and nothing the service says holds a key or a digest.
func TestKeysNewIsAcceptedThroughTheKeyFileAndSIGHUP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	keyFile, db := filepath.Join(dir, "keys"), filepath.Join(dir, "pets.db")
	const admin, partner = "admin-key-0123456789abcdef", "partner-key-0123456789abcdef"
	soon := time.Now().UTC().Add(3 * 24 * time.Hour).Truncate(time.Second)
	writeFile(t, keyFile, fmt.Sprintf("%s admin\n%s partner scopes=orders:read expires=%s\n", admin, partner, soon.Format(time.RFC3339)))
	svc := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_LOG_FORMAT=json", "PETSTORE_DB="+db, "PETSTORE_API_KEYS_FILE="+keyFile)
	secret, err := readSecret(db + ".secret")
	if err != nil {
		t.Fatal(err)
	}
	idOf := func(key string) string { id := keyID(secret, key); return hex.EncodeToString(id[:4]) }

	const expiring = "an API key expires within 7 days; issue a new one (petstore keys new) and rotate its clients to it"
	svc.waitForLog(t, expiring)
	warning := svc.Stderr.find(t, "WARN", expiring)[0]
	if got, want := []string{warning.field("caller"), warning.field("id")}, []string{"partner", idOf(partner)}; !slices.Equal(got, want) {
		t.Errorf("the expiry warning names %v, want %v", got, want)
	}

	cmd := exec.Command(bin, "keys", "new", "-label", "shop", "-scopes", "pets:read", "-expires", "90d", "-file", keyFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("keys new: %v\n%s", err, stderr.String())
	}
	key := strings.TrimSuffix(stdout.String(), "\n")
	if !validPSK(key) {
		t.Fatalf("keys new printed %q, want one psk_ key", stdout.String())
	}
	if !strings.Contains(stderr.String(), "SIGHUP") {
		t.Errorf("keys new -file does not say to send SIGHUP: %s", stderr.String())
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file after keys new: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if got := doRequest(t, svc.URL, "GET", "/v1/pets", "", bearer(key)).Status; got != http.StatusUnauthorized {
		t.Errorf("the new key before SIGHUP: status %d, want 401", got)
	}

	svc.Cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the new key is accepted after SIGHUP", func() bool {
		return doRequest(t, svc.URL, "GET", "/v1/pets", "", bearer(key)).Status == http.StatusOK
	})
	wantError(t, doRequest(t, svc.URL, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, bearer(key)), http.StatusForbidden, codeInsufficientScope, "pets:write")
	wantError(t, doRequest(t, svc.URL, "GET", "/metrics", "", bearer(key)), http.StatusForbidden, codeInsufficientScope, "*")
	typo := key[:30] + string(key[30]^1) + key[31:]
	wantError(t, doRequest(t, svc.URL, "GET", "/v1/pets", "", bearer(typo)), http.StatusUnauthorized, codeUnauthorized, "checksum")
	eventually(t, "the reload warns about the key about to expire again", func() bool { return len(svc.Stderr.find(t, "WARN", expiring)) == 2 })

	list := exec.Command(bin, "keys", "list", "-file", keyFile, "-db", db)
	listed, err := list.Output()
	if err != nil {
		t.Fatalf("keys list: %v", err)
	}
	var rows [][]string
	for line := range strings.Lines(string(listed)) {
		rows = append(rows, strings.Fields(line))
	}
	var newExpiry string
	for line := range strings.Lines(readFile(t, keyFile)) {
		if _, after, ok := strings.Cut(line, " shop scopes=pets:read expires="); ok {
			newExpiry = strings.TrimSpace(after)
		}
	}
	want := [][]string{
		{"LABEL", "ID", "SCOPES", "EXPIRES"},
		{"admin", idOf(admin), "*", "never"},
		{"partner", idOf(partner), "orders:read", soon.Format(time.RFC3339)},
		{"shop", idOf(key), "pets:read", newExpiry},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("keys list mismatch (-want +got):\n%s", diff)
	}

	metrics := doRequest(t, svc.URL, "GET", "/metrics", "", bearer(admin)).Body
	if got := metricValue(t, metrics, "petstore_api_key_expiry_timestamp_seconds", map[string]string{"caller": "partner", "id": idOf(partner)}); got != float64(soon.Unix()) {
		t.Errorf("the partner key's expiry metric = %v, want %d", got, soon.Unix())
	}
	for _, k := range []string{admin, partner, key, typo} {
		d := sha256.Sum256([]byte(k))
		for where, text := range map[string]string{"the log": svc.Stderr.String(), "the metrics": string(metrics), "keys list": string(listed),
			"keys new's standard error": stderr.String()} {
			if strings.Contains(text, k) || strings.Contains(strings.ToLower(text), hex.EncodeToString(d[:])) {
				t.Errorf("%s holds a key or its digest", where)
			}
		}
	}
}

// TestAMiswrittenDigestLineIsRefused: a digest line whose prefix is
// written SHA256:, or follows a byte order mark, would make the digest's
// text a key and refuse the key it stands for. The real binary refuses such
// a file: at start-up with exit code 2 and a message that names the setting,
// the file and the line without repeating it; on SIGHUP by keeping the keys
// in force.
func TestAMiswrittenDigestLineIsRefused(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys")
	const key = "shop-key-0123456789abcdef"
	d := sha256.Sum256([]byte(key))
	digest := hex.EncodeToString(d[:])
	upper := "# the shop\nSHA256:" + digest + " shop scopes=pets:read\n"
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_LOG_FORMAT=json", "PETSTORE_DB=" + filepath.Join(dir, "pets.db"), "PETSTORE_API_KEYS_FILE=" + keyFile}

	writeFile(t, keyFile, upper)
	// Bounded: a service that accepts the file serves until killed.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 2 {
		t.Errorf("start-up with SHA256: in the key file: %v, want exit code 2", err)
	}
	want := "petstore: -api-keys-file (PETSTORE_API_KEYS_FILE): key file " + keyFile + ": line 2: the first word reads as a digest"
	if got := stderr.String(); !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 1 || strings.Contains(strings.ToLower(got), digest) {
		t.Errorf("standard error = %q, want one line that starts %q and does not repeat the digest", got, want)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout = %q, want nothing (it never listened)", stdout.String())
	}

	writeFile(t, keyFile, "sha256:"+digest+" shop scopes=pets:read\n")
	svc := startBinary(t, bin, env...)
	status := func(key string) int { return doRequest(t, svc.URL, "GET", "/v1/pets", "", bearer(key)).Status }
	if got := status(key); got != http.StatusOK {
		t.Fatalf("the key before the reloads: status %d, want 200", got)
	}
	const notReloaded = "API keys not reloaded; the previous keys stay in force"
	for _, tt := range []struct {
		rule, file, mention string
		wouldBe             string // the key the miswritten line would make
	}{
		{"SHA256: in upper case", upper, "line 2: the first word reads as a digest", "SHA256:" + digest},
		{"a byte order mark before sha256:", "\ufeffsha256:" + digest + " shop scopes=pets:read\n", "line 1: starts with a byte order mark", "\ufeffsha256:" + digest},
	} {
		failures := len(svc.Stderr.find(t, "ERROR", notReloaded))
		writeFile(t, keyFile, tt.file)
		svc.Cmd.Process.Signal(syscall.SIGHUP)
		eventually(t, tt.rule+" is refused", func() bool { return len(svc.Stderr.find(t, "ERROR", notReloaded)) > failures })
		if err := svc.Stderr.find(t, "ERROR", notReloaded)[failures].field("err"); !strings.Contains(err, keyFile+": "+tt.mention) {
			t.Errorf("%s: the error %q does not say %q", tt.rule, err, keyFile+": "+tt.mention)
		}
		if got := status(key); got != http.StatusOK {
			t.Errorf("after %s the key in force got status %d, want 200", tt.rule, got)
		}
		if got := status(tt.wouldBe); got != http.StatusUnauthorized {
			t.Errorf("after %s the text of the line is a key: status %d, want 401", tt.rule, got)
		}
	}
	if strings.Contains(strings.ToLower(svc.Stderr.String()), digest) {
		t.Errorf("the log repeats the digest")
	}
}

// TestAReloadNeverBlocks: a key file replaced by a FIFO, which an open
// without O_NONBLOCK would wait on for ever, is refused at once, the keys in
// force stay, later reloads still work, and SIGTERM still drains.
func TestAReloadNeverBlocks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys")
	writeFile(t, keyFile, "old-key-0123456789 web\n")
	svc := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_LOG_FORMAT=json", "PETSTORE_DB="+filepath.Join(dir, "pets.db"), "PETSTORE_API_KEYS_FILE="+keyFile)
	status := func(key string) int { return doRequest(t, svc.URL, "GET", "/v1/pets", "", bearer(key)).Status }

	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	const notReloaded = "API keys not reloaded; the previous keys stay in force"
	svc.Cmd.Process.Signal(syscall.SIGHUP)
	svc.waitForLog(t, notReloaded)
	if err := svc.Stderr.find(t, "ERROR", notReloaded)[0].field("err"); !strings.Contains(err, "not a regular file") {
		t.Errorf("the refused reload says %q, want it to say the file is not a regular file", err)
	}
	if got := status("old-key-0123456789"); got != http.StatusOK {
		t.Errorf("the key in force after the FIFO: status %d, want 200", got)
	}
	os.Remove(keyFile)
	writeFile(t, keyFile, "new-key-0123456789 web\n")
	svc.Cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the key file is reloaded once it is a file again", func() bool { return status("new-key-0123456789") == http.StatusOK })

	svc.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- svc.wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM the process exited with %v, want 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the process still runs 15 s after SIGTERM")
	}
}

// TestRefusalsBeforeTheBodyCloseTheConnection: every answer sent before the
// request's body was read says Connection: close and closes the connection,
// so that callers who announce a body and never send it cannot hold the
// connection slots; a fresh client is then served at once.
func TestRefusalsBeforeTheBodyCloseTheConnection(t *testing.T) {
	t.Parallel()
	const maxConns = 4
	const attempts = 2 * maxConns // per row, all sent before any answer is read
	// The rate limit allows each key one request: each connection of a
	// row has a key of its own, and the keys of the 429 row have spent
	// theirs already.
	key := func(kind string, i int) string { return fmt.Sprintf("%s-key-%d-0123456789", kind, i) }
	var envKeys []string
	var readers strings.Builder
	for i := range attempts {
		envKeys = append(envKeys, key("big", i), key("text", i), key("spent", i))
		fmt.Fprintf(&readers, "%s shop scopes=pets:read\n", key("reader", i))
	}
	envKeys = append(envKeys, "fresh-key-0123456789")
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys")
	writeFile(t, keyFile, readers.String())
	rs := startRun(t, map[string]string{"PETSTORE_API_KEYS": strings.Join(envKeys, ",")},
		"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "pets.db"), "-api-keys-file", keyFile, "-max-conns", fmt.Sprint(maxConns),
		"-read-timeout", "60s", "-rate-limit", "0.001", "-rate-burst", "1")
	for i := range attempts {
		if got := doRequest(t, rs.URL, "GET", "/v1/pets", "", bearer(key("spent", i))).Status; got != http.StatusOK {
			t.Fatalf("spending a key's rate limit: status %d", got)
		}
	}
	host := strings.TrimPrefix(rs.URL, "http://")
	tests := []struct {
		rule   string
		header func(i int) string // besides the request line and Host
		status int
	}{
		{"without a key: 401", func(int) string { return "Content-Length: 1000\r\n" }, http.StatusUnauthorized},
		{"a key without the scope: 403", func(i int) string {
			return "Authorization: Bearer " + key("reader", i) + "\r\nContent-Length: 1000\r\n"
		}, http.StatusForbidden},
		{"over the rate limit: 429", func(i int) string {
			return "Authorization: Bearer " + key("spent", i) + "\r\nContent-Length: 1000\r\n"
		}, http.StatusTooManyRequests},
		{"a body announced over 1 MiB: 413", func(i int) string {
			return "Authorization: Bearer " + key("big", i) + "\r\nContent-Length: 2000000\r\n"
		}, http.StatusRequestEntityTooLarge},
		{"a body that is not JSON: 415", func(i int) string {
			return "Authorization: Bearer " + key("text", i) + "\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n"
		}, http.StatusUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			var conns []net.Conn
			for i := range attempts {
				c, err := net.Dial("tcp", host)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() }) // never before the end: the attempt holds on
				fmt.Fprintf(c, "POST /v1/pets HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, tt.header(i))
				conns = append(conns, c)
			}
			answered := 0
			for i, c := range conns {
				// Far below the read timeout (60 s), for which a
				// connection would otherwise wait for the body.
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				res, err := http.ReadResponse(br, nil)
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
					// Closed to make room (see connLimiter) before
					// its request was read: freed all the same.
					continue
				}
				if err != nil {
					t.Fatalf("connection %d: no answer: %v", i, err)
				}
				answered++
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != tt.status || !res.Close {
					t.Errorf("connection %d: status %d, Connection %q; want %d and close", i, res.StatusCode, res.Header.Get("Connection"), tt.status)
				}
				if n, err := br.Read(make([]byte, 1)); n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
					t.Errorf("connection %d: after the answer read %d bytes, %v; want the server to close it", i, n, err)
				}
			}
			if answered == 0 {
				t.Errorf("no connection was answered")
			}
		})
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	start := time.Now()
	res, err := client.Do(newRequest(t, rs.URL, "GET", "/v1/pets", "", bearer("fresh-key-0123456789")))
	if err != nil {
		t.Fatalf("a fresh client after the attempts: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("a fresh client after the attempts: status %d, want 200", res.StatusCode)
	}
	t.Logf("a fresh client was served in %v", time.Since(start))

	// A client that does send its body, refused before it is read, still
	// reads its answer: the connection is not reset under it.
	for _, size := range []int{1000, 200_000} {
		res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`+strings.Repeat(" ", size), bearer("wrong-key-0123456789"))
		if res.Status != http.StatusUnauthorized {
			t.Errorf("a body of %d bytes with a wrong key: status %d, want 401", size, res.Status)
		}
	}
}
