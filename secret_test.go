package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReplicasShareTheSecretKeptInTheDatabase starts three replicas (the
// real binary) on one PostgreSQL database with nothing but its URL and a
// key list: all three start, and give a key the same identity, which the
// idempotency records are scoped by, so a create sent to one replays on the
// others. Then it follows the documented moves: -secret-file overrides the
// database's secret; a file's secret written into the database is what
// replicas without a file use from then on; and the database's secret,
// written to a file, is what a replica given that file uses.
func TestReplicasShareTheSecretKeptInTheDatabase(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	url := postgresSchema(t)
	bin := buildBinary(t)
	// PETSTORE_SECRET_FILE empty: no secret file at all (startBinary would
	// otherwise add the tests' shared one).
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + url, "PETSTORE_API_KEYS=" + testKey, "PETSTORE_SECRET_FILE="}
	var replicas []*process
	for range 3 {
		replicas = append(replicas, startBinary(t, bin, env...))
	}
	create := func(base, idempotencyKey string) response {
		t.Helper()
		return doRequest(t, base, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, map[string]string{"Idempotency-Key": idempotencyKey})
	}
	// replayed checks that res is the stored answer first, replayed.
	replayed := func(what string, first, res response) {
		t.Helper()
		if res.Status != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: status %d, Idempotent-Replayed %q; want the 201 replayed", what, res.Status, res.Header.Get("Idempotent-Replayed"))
		}
		if diff := cmp.Diff(string(first.Body), string(res.Body)); diff != "" {
			t.Errorf("%s: body differs from the first answer (-first +replay):\n%s", what, diff)
		}
	}

	first := create(replicas[0].URL, "first")
	if first.Status != http.StatusCreated {
		t.Fatalf("create on replica 0: status %d %s", first.Status, first.Body)
	}
	for i, r := range replicas[1:] {
		replayed("the same create on replica "+string(rune('1'+i)), first, create(r.URL, "first"))
	}

	t.Run("-secret-file overrides the database's secret", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "secret")
		writeSecret(t, file, strings.Repeat("f", 40))
		withFile := startBinary(t, bin, append(env, "PETSTORE_SECRET_FILE="+file)...)
		// Another secret is another identity for the same key: the record
		// made on replica 0 is not this caller's.
		if res := create(withFile.URL, "first"); res.Status != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("create with another secret: status %d, Idempotent-Replayed %q; want a new 201", res.Status, res.Header.Get("Idempotent-Replayed"))
		}
	})

	t.Run("moving from a file to the database", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "secret")
		writeSecret(t, file, strings.Repeat("m", 40))
		withFile := startBinary(t, bin, append(env, "PETSTORE_SECRET_FILE="+file)...)
		made := create(withFile.URL, "moved")
		// The documented step: the file's secret into the table.
		db := openDB(t, url)
		content, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(t.Context(), "UPDATE key_identity_secret SET secret = $1 WHERE id = 1", strings.TrimSpace(string(content))); err != nil {
			t.Fatal(err)
		}
		withoutFile := startBinary(t, bin, env...)
		replayed("the create replayed by a replica without the file", made, create(withoutFile.URL, "moved"))
	})

	t.Run("moving from the database to a file", func(t *testing.T) {
		var secret string
		if err := openDB(t, url).QueryRowContext(t.Context(), "SELECT secret FROM key_identity_secret").Scan(&secret); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "secret")
		writeSecret(t, file, secret)
		withoutFile := startBinary(t, bin, env...)
		made := create(withoutFile.URL, "back")
		withFile := startBinary(t, bin, append(env, "PETSTORE_SECRET_FILE="+file)...)
		replayed("the create replayed by a replica given the file", made, create(withFile.URL, "back"))
	})
}

// writeSecret writes a secret file as the docs make one: mode 0600.
func writeSecret(t *testing.T, path, secret string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
