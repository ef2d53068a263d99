package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// announcedKey is the key block the service prints on stderr when it runs on
// a generated key with text logs.
var announcedKey = regexp.MustCompile(`(?m)^WARNING: no API key is configured .*:\n\n    ([A-Za-z0-9_-]{43})\n\n`)

// generatedKeyFrom returns the key a run announced, failing the test when
// there is none.
func generatedKeyFrom(t *testing.T, rs *runningService) string {
	t.Helper()
	m := announcedKey.FindStringSubmatch(rs.Stderr.String())
	if m == nil {
		t.Fatalf("no generated key announced on stderr:\n%s", rs.Stderr)
	}
	return m[1]
}

// bearer returns the headers of a request sent with key.
func bearer(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key}
}

func TestGeneratedKeyIsKeptBesideTheDatabaseAcrossRestarts(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	keyFile := dbPath + ".api-key"
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": dbPath}
	const body = `{"name":"Rex","categoryId":1}`
	idem := map[string]string{idempotencyHeader: "across-restarts"}

	first := startRun(t, env)
	key := generatedKeyFrom(t, first)
	if !strings.Contains(first.Stderr.String(), "generated now and kept in "+keyFile) {
		t.Errorf("the first start does not say where the key is kept (%s):\n%s", keyFile, first.Stderr)
	}
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatalf("no key file beside the database: %v", err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("key file mode = %04o, want 0600", got)
	}
	if b, _ := os.ReadFile(keyFile); string(b) != key+"\n" {
		t.Errorf("key file holds %q, want the announced key and a newline", b)
	}
	for k, v := range bearer(key) {
		idem[k] = v
	}
	want := doRequest(t, first.URL, "POST", "/v1/pets", body, idem)
	if want.Status != http.StatusCreated {
		t.Fatalf("create with the generated key: status %d, body %s", want.Status, want.Body)
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	second := startRun(t, env)
	if got := generatedKeyFrom(t, second); got != key {
		t.Errorf("the restart announced another key: %q, want %q", got, key)
	}
	if !strings.Contains(second.Stderr.String(), "generated on a first start and kept in "+keyFile) {
		t.Errorf("the restart does not say where the key is kept (%s):\n%s", keyFile, second.Stderr)
	}
	// Idempotent replays are scoped by API key: the same key after a
	// restart must replay the first answer, not create a second pet.
	got := doRequest(t, second.URL, "POST", "/v1/pets", body, idem)
	if diff := cmp.Diff(createdOf(want), createdOf(got)); diff != "" {
		t.Errorf("replay after restart with the generated key mismatch (-want +got):\n%s", diff)
	}
	if got.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the create after the restart is not a replay (headers %v)", got.Header)
	}
	if n := len(decode[[]Pet](t, doRequest(t, second.URL, "GET", "/v1/pets", "", bearer(key)))); n != 1 {
		t.Errorf("%d pets stored, want 1", n)
	}
	if n := strings.Count(second.Stderr.String(), key); n != 1 {
		t.Errorf("the key appears %d times on stderr, want once (in the announcement, not in a log line)", n)
	}
}

func TestGeneratedKeyOfAMemoryDatabaseIsNewEachRun(t *testing.T) {
	// Not parallel: t.Chdir changes the directory of the whole process.
	dir := t.TempDir()
	t.Chdir(dir)
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0"}
	first := startRun(t, env, "-db", ":memory:")
	firstKey := generatedKeyFrom(t, first)
	if res := doRequest(t, first.URL, "GET", "/v1/pets", "", bearer(firstKey)); res.Status != http.StatusOK {
		t.Errorf("with the generated key: status %d, want 200", res.Status)
	}
	if !strings.Contains(first.Stderr.String(), "lasts until the process ends") {
		t.Errorf("the announcement does not say the key lasts only this run:\n%s", first.Stderr)
	}
	first.stop(t)

	second := startRun(t, env, "-db", ":memory:")
	if secondKey := generatedKeyFrom(t, second); secondKey == firstKey {
		t.Errorf("two :memory: runs got the same key")
	}
	wantError(t, doRequest(t, second.URL, "GET", "/v1/pets", "", bearer(firstKey)), http.StatusUnauthorized, codeUnauthorized)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf(":memory: left files behind: %v", entries)
	}
}

func TestGeneratedKeyNeverInJSONLogs(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": dbPath}
	for _, start := range []string{"first start, creating the key", "restart, reading the key"} {
		t.Run(start, func(t *testing.T) {
			rs := startRun(t, env, "-log-format", "json")
			b, err := os.ReadFile(dbPath + ".api-key")
			if err != nil {
				t.Fatal(err)
			}
			key := strings.TrimSpace(string(b))
			if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", bearer(key)); res.Status != http.StatusOK {
				t.Errorf("with the key from the file: status %d, want 200", res.Status)
			}
			if err := rs.stop(t); err != nil {
				t.Fatal(err)
			}
			log := rs.Stderr.String()
			if strings.Contains(log, key) {
				t.Errorf("the JSON log holds the generated key:\n%s", log)
			}
			var warned []string
			for line := range strings.SplitSeq(strings.TrimSpace(log), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("stderr line is not a JSON record: %q", line)
				}
				if rec["level"] == "WARN" && rec["file"] != nil {
					warned = append(warned, rec["file"].(string))
				}
			}
			if diff := cmp.Diff([]string{dbPath + ".api-key"}, warned); diff != "" {
				t.Errorf("WARN records naming the key file mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfiguredKeysDisableTheGeneratedKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	writeFile(t, keys, otherTestKey+"\n")
	// A key file left by earlier zero-setup runs must not keep working once
	// the operator configures keys.
	stale := generateKey()
	writeFile(t, filepath.Join(dir, "stale.db.api-key"), stale+"\n")
	if err := os.Chmod(filepath.Join(dir, "stale.db.api-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rule string
		env  map[string]string
		db   string
		key  string
	}{
		{"PETSTORE_API_KEYS disables it", map[string]string{"PETSTORE_API_KEYS": testKey}, "env.db", testKey},
		{"a key file disables it", map[string]string{"PETSTORE_API_KEYS_FILE": keys}, "file.db", otherTestKey},
		{"a stale generated key is refused once keys are configured", map[string]string{"PETSTORE_API_KEYS": testKey}, "stale.db", testKey},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": filepath.Join(dir, tt.db)}
			for k, v := range tt.env {
				env[k] = v
			}
			rs := startRun(t, env)
			if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", bearer(tt.key)); res.Status != http.StatusOK {
				t.Errorf("with the configured key: status %d, want 200", res.Status)
			}
			wantError(t, doRequest(t, rs.URL, "GET", "/v1/pets", "", bearer(stale)), http.StatusUnauthorized, codeUnauthorized)
			rs.stop(t)
			if strings.Contains(rs.Stderr.String(), "no API key is configured") {
				t.Errorf("a generated key was announced although keys are configured:\n%s", rs.Stderr)
			}
			if tt.db != "stale.db" {
				if _, err := os.Stat(filepath.Join(dir, tt.db+".api-key")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a generated key file was written although keys are configured (stat: %v)", err)
				}
			}
		})
	}
}

func TestUntrustworthyGeneratedKeyFileIsAConfigurationError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	valid := generateKey() + "\n"
	tests := []struct {
		rule    string
		make    func(t *testing.T, file string)
		mention string
	}{
		{"a key file others can read", func(t *testing.T, file string) { writeMode(t, file, valid, 0o644) }, "chmod 600"},
		{"a key file its group can write", func(t *testing.T, file string) { writeMode(t, file, valid, 0o620) }, "mode 0620"},
		{"an empty key file", func(t *testing.T, file string) { writeMode(t, file, "", 0o600) }, "is empty"},
		{"a key file holding something else", func(t *testing.T, file string) { writeMode(t, file, "short-key\n", 0o600) }, "does not hold a key"},
		{"a key file with a second line", func(t *testing.T, file string) { writeMode(t, file, valid+valid, 0o600) }, "does not hold a key"},
		{"a directory in place of the key file", func(t *testing.T, file string) {
			if err := os.Mkdir(file, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"a symbolic link in place of the key file", func(t *testing.T, file string) {
			target := file + ".target"
			writeMode(t, target, valid, 0o600)
			if err := os.Symlink(target, file); err != nil {
				t.Fatal(err)
			}
		}, "cannot read"},
		{"a key file owned by another user", func(t *testing.T, file string) {
			if os.Geteuid() != 0 {
				t.Skip("only root can give a file to another user")
			}
			writeMode(t, file, valid, 0o600)
			if err := os.Chown(file, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by user id 65534"},
	}
	for i, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			dbPath := filepath.Join(dir, strings.Repeat("x", i+1)+".db")
			file := dbPath + ".api-key"
			tt.make(t, file)
			before, _ := os.ReadFile(file)
			var stdout strings.Builder
			err := run(t.Context(), nil, func(k string) string {
				return map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": dbPath}[k]
			}, strings.NewReader(""), &stdout, io.Discard)
			ce, ok := errors.AsType[*configError](err)
			if !ok || ce.setting != file || !strings.Contains(ce.problem, tt.mention) {
				t.Errorf("run() = %v, want a configError for %s mentioning %q", err, file, tt.mention)
			}
			if err != nil && strings.Contains(err.Error(), strings.TrimSpace(valid)) {
				t.Errorf("the error repeats the key: %v", err)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing (it must not listen)", stdout.String())
			}
			if after, _ := os.ReadFile(file); string(after) != string(before) {
				t.Errorf("the key file was changed from %q to %q; a refused file must be left as it is", before, after)
			}
		})
	}
}

func TestJSONLogsWithAMemoryDatabaseNeedAConfiguredKey(t *testing.T) {
	t.Parallel()
	err := runConfig(t, map[string]string{"PETSTORE_ADDR": "127.0.0.1:0"}, "-db", ":memory:", "-log-format", "json")
	ce, ok := errors.AsType[*configError](err)
	if !ok || ce.setting != "PETSTORE_API_KEYS" || !strings.Contains(ce.problem, "only be shown in the log") {
		t.Errorf("run() = %v, want a configError for PETSTORE_API_KEYS", err)
	}
}

// writeMode writes content to path with exactly the given mode, whatever
// the umask.
func writeMode(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	writeFile(t, path, content)
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestDescribeBuild(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule string
		bi   *debug.BuildInfo
		want string
	}{
		{
			"a build from a clean clone names the version, revision, commit time and Go release",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "petstore", Version: "v0.0.0-20261122145745-0a2cb8c4e079"}, Settings: []debug.BuildSetting{
				{Key: "CGO_ENABLED", Value: "0"}, {Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: "0a2cb8c4e0791d7c1591eada576a85cac9049bbd"},
				{Key: "vcs.time", Value: "2026-11-22T14:57:45Z"}, {Key: "vcs.modified", Value: "false"},
			}},
			"petstore v0.0.0-20261122145745-0a2cb8c4e079, revision 0a2cb8c4e0791d7c1591eada576a85cac9049bbd (2026-11-22T14:57:45Z), go1.26.8",
		},
		{
			"a build with uncommitted changes says so",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "petstore", Version: "v0.0.0-20261122145745-0a2cb8c4e079+dirty"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "0a2cb8c4e0791d7c1591eada576a85cac9049bbd"}, {Key: "vcs.modified", Value: "true"},
			}},
			"petstore v0.0.0-20261122145745-0a2cb8c4e079+dirty, revision 0a2cb8c4e0791d7c1591eada576a85cac9049bbd with uncommitted changes, go1.26.8",
		},
		{
			"go run records no revision, and the output says why",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "petstore", Version: "(devel)"}},
			"petstore (devel), no VCS revision recorded (go run, or not built by the build command of docs/operations.md in a git clone), go1.26.8",
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, describeBuild(tt.bi)); diff != "" {
				t.Errorf("describeBuild mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	bi, _ := debug.ReadBuildInfo()
	want := describeBuild(bi) + "\n"
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}, {"-addr", "127.0.0.1:0", "-version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out strings.Builder
			// PETSTORE_VERSION is no setting: it must not turn serving into
			// printing the version, nor the other way round.
			err := run(t.Context(), args, func(k string) string { return map[string]string{"PETSTORE_VERSION": "false"}[k] }, strings.NewReader(""), &out, io.Discard)
			if err != nil {
				t.Fatalf("run(%q) = %v", args, err)
			}
			if diff := cmp.Diff(want, out.String()); diff != "" {
				t.Errorf("output mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("version with an argument", func(t *testing.T) {
		if _, ok := errors.AsType[*configError](runConfig(t, nil, "version", "extra")); !ok {
			t.Errorf("petstore version extra is not a configuration error")
		}
	})
	t.Run("PETSTORE_VERSION does not stop the service from serving", func(t *testing.T) {
		cfg, err := parseConfig(nil, func(k string) string {
			return map[string]string{"PETSTORE_VERSION": "true", "PETSTORE_API_KEYS": testKey, "PETSTORE_DB": ":memory:"}[k]
		}, io.Discard)
		if err != nil || cfg.printVersion {
			t.Errorf("parseConfig with PETSTORE_VERSION=true: printVersion %v, err %v; want false, nil", cfg.printVersion, err)
		}
	})
	t.Run("-h lists the command, and no variable for it", func(t *testing.T) {
		var out strings.Builder
		run(t.Context(), []string{"-h"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, &out)
		if !strings.Contains(out.String(), "petstore version (or -version)") || strings.Contains(out.String(), "PETSTORE_VERSION") {
			t.Errorf("-h output:\n%s", out.String())
		}
	})
}

func TestBuiltBinaryIsStaticAndStamped(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}

	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != v {
			t.Errorf("build setting %s = %q, want %q", k, settings[k], v)
		}
	}

	for _, arg := range []string{"version", "-version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("petstore %s: %v", arg, err)
		}
		if diff := cmp.Diff(describeBuild(bi)+"\n", string(out)); diff != "" {
			t.Errorf("petstore %s mismatch with the binary's build information (-want +got):\n%s", arg, diff)
		}
	}

	// Go stamps the revision only where .git is a directory: not in a
	// linked worktree, whose .git is a file (golang/go#58218), nor outside
	// git. .ci/run tests a clone, where the revision must be HEAD's.
	if fi, err := os.Stat(".git"); err != nil || !fi.IsDir() {
		why := "a file: a linked worktree"
		if err != nil {
			why = err.Error()
		}
		t.Logf("not a git clone (.git is %s): Go records no revision here, so only its absence is checked", why)
		if rev := settings["vcs.revision"]; rev != "" {
			t.Errorf("vcs.revision = %q outside a clone, want none", rev)
		}
		return
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	if got, want := settings["vcs.revision"], strings.TrimSpace(string(head)); got != want {
		t.Errorf("vcs.revision = %q, want HEAD %q", got, want)
	}
}

func TestREADMEStaysTrue(t *testing.T) {
	t.Parallel()
	readme := readFile(t, "README.md")
	t.Run("the README and the guides point at nothing outside the repository", func(t *testing.T) {
		for path, text := range docFiles(t) {
			for _, outside := range []string{"../", "shared/seeds"} {
				if strings.Contains(text, outside) {
					t.Errorf("%s mentions %q", path, outside)
				}
			}
		}
	})
	t.Run("the README's test command is the one .ci/run runs, and then under the race detector", func(t *testing.T) {
		const testCommand, raceCommand = "go test -count=1 ./...", "go test -race -count=1 ./..."
		lines := func(file string) []string { return strings.Split(readFile(t, file), "\n") }
		if !slices.Contains(lines("README.md"), testCommand) {
			t.Errorf("README.md has no line %q", testCommand)
		}
		ci := lines(".ci/run")
		test, race := slices.Index(ci, testCommand), slices.Index(ci, raceCommand)
		if test < 0 || race < test {
			t.Errorf(".ci/run runs %q (line %d) and then %q (line %d), want both, in that order", testCommand, test+1, raceCommand, race+1)
		}
	})
	t.Run("the build command is the one the tests use, in docs/operations.md and the systemd unit", func(t *testing.T) {
		for _, file := range []string{"docs/operations.md", "deploy/petstore.service"} {
			if !strings.Contains(readFile(t, file), buildCommand) {
				t.Errorf("%s does not give the build command %q", file, buildCommand)
			}
		}
	})
	t.Run("the versitygw build of .ci/run is the tests', so that theirs is served by the build cache", func(t *testing.T) {
		line := `(?m)^` + regexp.QuoteMeta(versitygwBuild) + `( |$)`
		if !regexp.MustCompile(line).MatchString(readFile(t, ".ci/run")) {
			t.Errorf(".ci/run has no line %q", versitygwBuild)
		}
	})
	t.Run("the Go release the README asks for is go.mod's", func(t *testing.T) {
		m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readFile(t, "go.mod"))
		if m == nil {
			t.Fatal("go.mod has no go line")
		}
		if !strings.Contains(readme, "Go "+m[1]+" or newer") {
			t.Errorf("README.md does not ask for Go %s or newer", m[1])
		}
	})
	t.Run("the key file example is a valid key file of long keys", func(t *testing.T) {
		m := regexp.MustCompile("(?s)```\n(# /etc/petstore/keys\n.*?)```").FindStringSubmatch(readFile(t, "docs/keys.md"))
		if m == nil {
			t.Fatal("no key file example in docs/keys.md")
		}
		entries, err := parseKeyFile(strings.NewReader(m[1]), testSecret)
		if err != nil || len(entries) < 2 {
			t.Fatalf("the example parses to %d entries, error %v", len(entries), err)
		}
		// Digests of guessable words would teach the wrong habit.
		for _, word := range []string{"test", "test2", "secret", "password", "key"} {
			d := sha256.Sum256([]byte(word))
			if strings.Contains(m[1], hex.EncodeToString(d[:])) {
				t.Errorf("the example holds the digest of %q", word)
			}
		}
		for line := range strings.SplitSeq(m[1], "\n") {
			if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") && !strings.HasPrefix(f[0], "sha256:") && len(f[0]) < 32 {
				t.Errorf("the example lists a plain key of %d characters; show a long random one", len(f[0]))
			}
		}
	})
}

// readFile returns a file of the repository as a string.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMessagesANewcomerReads(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	t.Run(`"status":null says that null is the problem`, func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1,"status":null}`, nil)
		wantError(t, res, http.StatusBadRequest, codeInvalidField, "status", "not null", "omit")
	})
	for _, path := range []string{"/v1/nothing", "/v1", "/v1/pets/1/photos"} {
		t.Run("a 404 under /v1 does not send the client to /v1: "+path, func(t *testing.T) {
			res := ts.do(t, "GET", path, "", nil)
			wantError(t, res, http.StatusNotFound, codeNotFound, "/v1/openapi.json")
			if strings.Contains(string(res.Body), "lives under /v1") {
				t.Errorf("404 for %s advises the path it is already on: %s", path, res.Body)
			}
		})
	}
	t.Run("a 404 outside /v1 points at /v1", func(t *testing.T) {
		wantError(t, ts.do(t, "GET", "/pets", "", nil), http.StatusNotFound, codeNotFound, "lives under /v1", "/v1/openapi.json")
	})
	t.Run("/metrics carries nosniff like every answer with a body", func(t *testing.T) {
		res := ts.do(t, "GET", "/metrics", "", nil)
		if res.Status != http.StatusOK || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET /metrics: status %d, X-Content-Type-Options %q; want 200 and nosniff", res.Status, res.Header.Get("X-Content-Type-Options"))
		}
	})
}
