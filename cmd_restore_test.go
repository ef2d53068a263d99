package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/google/go-cmp/cmp"
	"github.com/superfly/ltx"
)

// replicaHistory is a file:// replica written by the service, run
// in-process with -replicate-sync: pets created, a time noted, the pets
// deleted, the service stopped.
type replicaHistory struct {
	dir, url string
	before   time.Time // before the service started
	mark     time.Time // after the creates were answered, before the deletes
	pets     []Pet     // the pets at mark; none are left at the end
}

// replicateHistory writes a replicaHistory. With -replicate-sync, a write
// is answered once its commit is in the replica, so the mark falls between
// the creates' syncs and the deletes'.
func replicateHistory(t *testing.T) replicaHistory {
	t.Helper()
	h := replicaHistory{dir: filepath.Join(t.TempDir(), "replica"), before: time.Now()}
	h.url = "file://" + h.dir
	rs := startReplicating(t, filepath.Join(t.TempDir(), "pets.db"), h.url)
	for _, name := range []string{"Rex", "Tom"} {
		res := doRequest(t, rs.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":%q,"categoryId":1}`, name), nil)
		if res.Status != 201 {
			t.Fatalf("create %s: %d %s", name, res.Status, res.Body)
		}
		h.pets = append(h.pets, decode[Pet](t, res))
	}
	h.mark = time.Now()
	// The replica's times are in milliseconds: the deletes are synced in a
	// later millisecond than the mark.
	for !time.Now().After(h.mark.Truncate(time.Millisecond).Add(time.Millisecond)) {
		runtime.Gosched()
	}
	for _, p := range h.pets {
		if res := doRequest(t, rs.URL, "DELETE", fmt.Sprintf("/v1/pets/%d", p.ID), "", nil); res.Status != 204 {
			t.Fatalf("delete %d: %d %s", p.ID, res.Status, res.Body)
		}
	}
	if err := rs.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	return h
}

// startReplicating runs the service in-process on the SQLite file db,
// replicating it to url, each write answered once in the replica.
func startReplicating(t *testing.T, db, url string) *runningService {
	t.Helper()
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": db, "PETSTORE_API_KEYS": testKey, "PETSTORE_LOG_FORMAT": "json"}
	return startRun(t, env, "-replicate", url, "-replicate-sync")
}

// replicaFile is a file of a file:// replica as its directory shows it.
type replicaFile struct {
	min, max ltx.TXID
	at       time.Time // its modification time: Litestream's time of the file
	size     int64
	path     string
}

// point is the state the file ends with, as the command prints it.
func (f replicaFile) point() string {
	return fmt.Sprintf("%s (transaction %016x)", f.at.UTC().Format("2006-01-02T15:04:05.000Z"), uint64(f.max))
}

// replicaLevel lists the files of a level of the file:// replica in dir, in
// the order of their transactions.
func replicaLevel(t *testing.T, dir string, level int) []replicaFile {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "ltx", fmt.Sprint(level)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var files []replicaFile
	for _, e := range entries {
		min, max, err := ltx.ParseFilename(e.Name())
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, replicaFile{min, max, fi.ModTime(), fi.Size(), filepath.Join(dir, "ltx", fmt.Sprint(level), e.Name())})
	}
	return files
}

// restoreRun runs petstore restore with args and returns what it printed on
// each stream, and its error.
func restoreRun(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = run(ctx, append([]string{"restore"}, args...), mapEnv(env), strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

// restoredPets opens the restored database at path as the service would
// and returns its pets.
func restoredPets(t *testing.T, path string) []Pet {
	t.Helper()
	st, err := openStore(t.Context(), path, 0)
	if err != nil {
		t.Fatalf("open the restored database %s: %v", path, err)
	}
	defer st.Close()
	return storedPets(t, st)
}

// TestRestoreGivesTheStateAtATime restores a replica the service wrote:
// the latest state (the pets deleted), the state at a time noted between
// the creates and the deletes (the pets there), each saying exactly which
// transaction it restored, and -list the window and snapshots.
func TestRestoreGivesTheStateAtATime(t *testing.T) {
	t.Parallel()
	h := replicateHistory(t)
	l0 := replicaLevel(t, h.dir, 0)
	lastAtMark := l0[0]
	for _, f := range l0 {
		if !f.at.After(h.mark) {
			lastAtMark = f
		}
	}
	coarse, coarseFrom, coarseTo := coarsened(t, h.dir)
	coarseURL := "file://" + coarse
	tests := []struct {
		rule     string
		from     string
		at       string // -at, "" for the latest
		asOf     string
		wantPets []Pet
	}{
		{"the latest state is the last sync's", h.url, "", l0[len(l0)-1].point(), []Pet{}},
		{"a time gives the last sync at or before it", h.url, h.mark.Format(time.RFC3339Nano), lastAtMark.point(), h.pets},
		{"a time given with an offset is the same instant", h.url, h.mark.In(time.FixedZone("", 3600)).Format(time.RFC3339Nano), lastAtMark.point(), h.pets},
		{"the printed time restores the same state", h.url, lastAtMark.at.UTC().Format("2006-01-02T15:04:05.000Z"), lastAtMark.point(), h.pets},
		// The replica kept only coarse files: the times its refusal names
		// (TestRestoreRefuses) restore the states around them.
		{"the state before the changes kept together", coarseURL, coarseFrom, coarseFrom + " (transaction 0000000000000001)", []Pet{}},
		{"the state with the changes kept together", coarseURL, coarseTo, l0[len(l0)-1].point(), []Pet{}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "restored.db")
			args := []string{"-from", tt.from, "-db", out}
			if tt.at != "" {
				args = append(args, "-at", tt.at)
			}
			stdout, _, err := restoreRun(t, nil, args...)
			if err != nil {
				t.Fatalf("restore %v: %v", args, err)
			}
			want := fmt.Sprintf("restored %s to %s as of %s\n", tt.from, out, tt.asOf)
			if diff := cmp.Diff(want, stdout); diff != "" {
				t.Errorf("what restore printed mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPets, restoredPets(t, out)); diff != "" {
				t.Errorf("the restored pets mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("-list prints the first and last restorable states and each snapshot", func(t *testing.T) {
		stdout, stderr, err := restoreRun(t, nil, "-from", h.url, "-list")
		if err != nil {
			t.Fatalf("restore -list: %v (%s)", err, stderr)
		}
		// The first state is the first sync's (TXID 1, the schema), before
		// the snapshot taken as the service opened the replica.
		want := "first restorable: " + l0[0].point() + "\nlast restorable: " + l0[len(l0)-1].point() + "\n"
		for _, s := range replicaLevel(t, h.dir, litestream.SnapshotLevel) {
			want += fmt.Sprintf("snapshot: %s, %d bytes)\n", strings.TrimSuffix(s.point(), ")"), s.size)
		}
		if diff := cmp.Diff(want, stdout); diff != "" {
			t.Errorf("-list mismatch (-want +got):\n%s", diff)
		}
	})
}

// TestRestoreWritesOnlyACheckedFile: the restored file is the one named,
// mode 0600, and nothing else is left in its directory; a missing secret
// file beside it is warned about on one line of stderr, the restore done.
func TestRestoreWritesOnlyACheckedFile(t *testing.T) {
	t.Parallel()
	h := replicateHistory(t)
	secret := filepath.Join(t.TempDir(), "kept.secret")
	writeFile(t, secret, "a secret kept apart from the replica, 32+ chars")
	tests := []struct {
		rule    string
		env     map[string]string
		args    []string
		warning bool
	}{
		{"without PATH.secret beside it, a warning", nil, nil, true},
		{"with -secret-file naming the secret it will be served with, none", nil, []string{"-secret-file", secret}, false},
		{"with PETSTORE_SECRET_FILE, none", map[string]string{"PETSTORE_SECRET_FILE": secret}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "restored.db")
			_, stderr, err := restoreRun(t, tt.env, append([]string{"-from", h.url, "-db", out}, tt.args...)...)
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("the restored file's mode is %v (%v), want 0600", fi.Mode().Perm(), err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("the directory holds %v, want the restored file only", entries)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			switch {
			case !tt.warning && stderr != "":
				t.Errorf("stderr = %q, want nothing", stderr)
			case tt.warning && (len(lines) != 1 || !strings.HasPrefix(lines[0], "petstore: warning: no secret file at "+out+".secret") ||
				!strings.Contains(lines[0], "idempotency records") || !strings.Contains(lines[0], "new identity")):
				t.Errorf("stderr = %q, want one line warning of %s.secret, naming key identities and idempotency records", stderr, out)
			}
		})
	}
}

// TestRestoreRefuses holds restore's refusals: one line each, exit code 2
// (a configError) when the command line is wrong and 1 when the replica
// cannot give what was asked, and nothing written.
func TestRestoreRefuses(t *testing.T) {
	t.Parallel()
	h := replicateHistory(t)
	l0 := replicaLevel(t, h.dir, 0)
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.db")
	writeFile(t, existing, "precious")
	notADir := filepath.Join(dir, "not-a-directory")
	writeFile(t, notADir, "a file")
	empty := t.TempDir()
	coarse, coarseFrom, coarseTo := coarsened(t, h.dir)
	out := filepath.Join(dir, "restored.db")
	tests := []struct {
		rule     string
		args     []string
		exit     int
		mentions []string
	}{
		{"a time before the first restorable one", []string{"-from", h.url, "-db", out, "-at", h.before.Format(time.RFC3339Nano)}, 1,
			[]string{"before the first restorable time", "from " + l0[0].point() + " to " + l0[len(l0)-1].point()}},
		{"a time in the future", []string{"-from", h.url, "-db", out, "-at", time.Now().Add(time.Hour).Format(time.RFC3339)}, 2, []string{"in the future"}},
		{"a time that is not RFC 3339", []string{"-from", h.url, "-db", out, "-at", "yesterday"}, 2, []string{`"yesterday" is not an RFC 3339 time`}},
		{"a replica that does not exist", []string{"-from", "file://" + filepath.Join(dir, "typo"), "-db", out}, 1, []string{"there is no replica at file://" + filepath.Join(dir, "typo")}},
		{"an empty replica", []string{"-from", "file://" + empty, "-db", out}, 1, []string{"the replica at file://" + empty + " is empty"}},
		{"a replica that cannot be read", []string{"-from", "file://" + notADir, "-db", out}, 1, []string{"cannot read the replica at file://" + notADir, "not a directory"}},
		{"-list of a replica that does not exist", []string{"-from", "file://" + filepath.Join(dir, "typo"), "-list"}, 1, []string{"there is no replica"}},
		{"a URL with credentials", []string{"-from", "s3://AKIAEXAMPLE:secret@bucket/shop", "-db", out}, 2, []string{"credentials"}},
		{"a URL with a key in its query", []string{"-from", "s3://bucket/shop?secret-key=x", "-db", out}, 2, []string{"credentials"}},
		{"a file that exists", []string{"-from", h.url, "-db", existing}, 2, []string{existing + " already exists"}},
		{"no file named", []string{"-from", h.url}, 2, []string{"-db PATH"}},
		{"no replica named", []string{"-db", out}, 2, []string{"name the replica"}},
		{"-list with a file to write", []string{"-from", h.url, "-list", "-db", out}, 2, []string{"writes nothing"}},
		{"an in-memory database", []string{"-from", h.url, "-db", ":memory:"}, 2, []string{"in-memory"}},
		{"a time the replica can give only older", []string{"-from", "file://" + coarse, "-db", out, "-at", h.mark.Format(time.RFC3339Nano)}, 1,
			[]string{"cannot give the state at", "only together", "Restore -at " + coarseFrom + " for that state, or -at " + coarseTo}},
		{"a replica with a gap", []string{"-from", "file://" + gapped(t, h.dir), "-db", out}, 1, []string{"cannot be restored", "non-contiguous"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			stdout, _, err := restoreRun(t, nil, tt.args...)
			t.Logf("restore %v: %v", tt.args, err)
			_, isConfig := errors.AsType[*configError](err)
			exit := map[bool]int{true: 2, false: 1}[isConfig]
			switch {
			case err == nil:
				t.Fatalf("restore %v succeeded (%q), want it refused", tt.args, stdout)
			case exit != tt.exit:
				t.Errorf("restore %v = %v: exit code %d, want %d", tt.args, err, exit, tt.exit)
			case strings.Contains(err.Error(), "\n"):
				t.Errorf("the refusal is more than one line: %q", err)
			}
			for _, m := range tt.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("restore %v = %v, want it to mention %q", tt.args, err, m)
				}
			}
			if stdout != "" {
				t.Errorf("a refused restore printed %q", stdout)
			}
		})
	}
	t.Run("AWS_CA_BUNDLE with an S3 replica", func(t *testing.T) {
		_, _, err := restoreRun(t, map[string]string{"AWS_CA_BUNDLE": "/etc/ca.pem"}, "-from", "s3://bucket/shop", "-db", out)
		if ce, ok := errors.AsType[*configError](err); !ok || ce.setting != "AWS_CA_BUNDLE" {
			t.Errorf("restore from S3 with AWS_CA_BUNDLE set = %v, want a configError naming it", err)
		}
	})
	if b, _ := os.ReadFile(existing); string(b) != "precious" {
		t.Errorf("a refused restore changed the existing file: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("refused restores left %v in the directory, want existing.db and not-a-directory only", entries)
	}
}

// copyReplica copies the file:// replica in dir, the files' times kept (a
// file:// replica keeps Litestream's times as the files' modification
// times), and returns the copy's directory.
func copyReplica(t *testing.T, dir string) string {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "replica")
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(cp, rel), 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cp, rel), b, 0o600); err != nil {
			return err
		}
		return os.Chtimes(filepath.Join(cp, rel), fi.ModTime(), fi.ModTime())
	})
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// removeAll removes the files.
func removeAll(t *testing.T, files []replicaFile) {
	t.Helper()
	for _, f := range files {
		if err := os.Remove(f.path); err != nil {
			t.Fatal(err)
		}
	}
}

// coarsened is a copy of the replica in dir as it is once its fine files
// are gone: its first state an hour older, and every change since kept only
// together, in one file of level 1 (which keeps a second of writes). It
// returns the copy, and the times of the two states a restore between them
// can give.
func coarsened(t *testing.T, dir string) (cp, from, to string) {
	t.Helper()
	cp = copyReplica(t, dir)
	removeAll(t, replicaLevel(t, cp, 1))
	removeAll(t, replicaLevel(t, cp, litestream.SnapshotLevel))
	// The first transaction's file becomes level 1's first, an hour older;
	// the compaction then takes every later one of level 0.
	first := replicaLevel(t, cp, 0)[0]
	older := first.at.Add(-time.Hour)
	base := filepath.Join(cp, "ltx", "1", filepath.Base(first.path))
	if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(first.path, base); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(base, older, older); err != nil {
		t.Fatal(err)
	}
	c := litestream.NewCompactor(file.NewReplicaClient(cp), slogTo(io.Discard))
	if _, err := c.Compact(t.Context(), 1); err != nil {
		t.Fatalf("compact level 0 into one file of level 1: %v", err)
	}
	removeAll(t, replicaLevel(t, cp, 0))
	l1 := replicaLevel(t, cp, 1)
	if len(l1) != 2 {
		t.Fatalf("level 1 holds %d files, want 2", len(l1))
	}
	stamp := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
	return cp, stamp(older), stamp(l1[1].at)
}

// gapped is a copy of the replica in dir that misses the file of its third
// transaction, and the compacted files and snapshots that could hold it.
func gapped(t *testing.T, dir string) string {
	t.Helper()
	cp := copyReplica(t, dir)
	removeAll(t, replicaLevel(t, cp, 1))
	removeAll(t, replicaLevel(t, cp, litestream.SnapshotLevel))
	for _, f := range replicaLevel(t, cp, 0) {
		if f.max == 3 {
			removeAll(t, []replicaFile{f})
		}
	}
	return cp
}

// TestRestoreWhileTheServiceReplicates: a restore only reads the replica,
// so it runs beside the service that writes it, which goes on serving and
// replicating.
func TestRestoreWhileTheServiceReplicates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "file://" + filepath.Join(dir, "replica")
	db := filepath.Join(dir, "pets.db")
	rs := startReplicating(t, db, url)
	var pets []Pet
	for _, name := range []string{"Rex", "Tom"} {
		res := doRequest(t, rs.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":%q,"categoryId":1}`, name), nil)
		if res.Status != 201 {
			t.Fatalf("create %s: %d %s", name, res.Status, res.Body)
		}
		pets = append(pets, decode[Pet](t, res))
		out := filepath.Join(dir, "restored-"+name+".db")
		stdout, stderr, err := restoreRun(t, nil, "-from", url, "-db", out, "-secret-file", defaultSecretFile(db))
		if err != nil || stderr != "" || !strings.HasPrefix(stdout, "restored "+url+" to "+out+" as of ") {
			t.Fatalf("restore beside the service: %v, printed %q, %q", err, stdout, stderr)
		}
		if diff := cmp.Diff(pets, restoredPets(t, out)); diff != "" {
			t.Errorf("after creating %s, the restored pets mismatch (-want +got):\n%s", name, diff)
		}
	}
	if _, _, err := restoreRun(t, nil, "-from", url, "-list"); err != nil {
		t.Errorf("restore -list beside the service: %v", err)
	}
	if err := rs.stop(t); err != nil {
		t.Errorf("the service, after the restores: %v", err)
	}
}

// TestRestoreAtATimeThenServeIt restores the state before a mistake (the
// pets deleted) and serves it again, replicating into the same replica: the
// next restore gives the restored pets and what was written since.
func TestRestoreAtATimeThenServeIt(t *testing.T) {
	t.Parallel()
	h := replicateHistory(t)
	db := filepath.Join(t.TempDir(), "pets.db")
	if _, _, err := restoreRun(t, nil, "-from", h.url, "-db", db, "-at", h.mark.Format(time.RFC3339Nano)); err != nil {
		t.Fatalf("restore at the mark: %v", err)
	}
	rs := startReplicating(t, db, h.url)
	if diff := cmp.Diff(h.pets, listAll[Pet](t, rs.URL, "/v1/pets", nil, nil)); diff != "" {
		t.Errorf("the pets served from the restored file mismatch (-want +got):\n%s", diff)
	}
	res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Kit","categoryId":2}`, nil)
	if res.Status != 201 {
		t.Fatalf("create after the restore: %d %s", res.Status, res.Body)
	}
	want := append(slices.Clone(h.pets), decode[Pet](t, res))
	if err := rs.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	again := filepath.Join(t.TempDir(), "again.db")
	if _, _, err := restoreRun(t, nil, "-from", h.url, "-db", again); err != nil {
		t.Fatalf("restore the latest state: %v", err)
	}
	if diff := cmp.Diff(want, restoredPets(t, again)); diff != "" {
		t.Errorf("the latest state, after serving the restored file, mismatch (-want +got):\n%s", diff)
	}
}

// The drill's directory and replica in docs/operations.md, which
// TestTheRestoreDrillRuns replaces with its own.
const (
	drillDir     = "/var/lib/petstore"
	drillReplica = "s3://petstore-replica/shop?endpoint=https://s3.example.net"
)

// TestTheRestoreDrillRuns runs the drill of docs/operations.md ("The restore
// drill") as written: the service, replicating into a file:// replica, is
// stopped where the drill says systemctl stop, and its database damaged; the
// drill's commands between run with sh in its directory (the built binary
// as petstore; the drill's directory and replica URL replaced by this
// test's); the service started where it says systemctl start serves the
// pets it had, and replicates again.
func TestTheRestoreDrillRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	t.Parallel()
	cmds := shellTour(t, "docs/operations.md", "The restore drill")
	if len(cmds) < 4 || cmds[0].command != "systemctl stop petstore" || cmds[len(cmds)-1].command != "systemctl start petstore" {
		t.Fatalf("the drill does not stop the service first and start it last: %q", cmds)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "petstore.db")
	url := "file://" + filepath.Join(t.TempDir(), "replica")
	rs := startReplicating(t, db, url)
	var pets []Pet
	for _, name := range []string{"Rex", "Tom"} {
		res := doRequest(t, rs.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":%q,"categoryId":1}`, name), nil)
		pets = append(pets, decode[Pet](t, res))
	}
	if err := rs.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	writeFile(t, db, "the damage the drill repairs")
	var commands []string
	var script string
	for _, c := range cmds[1 : len(cmds)-1] {
		script += c.command + "\n"
		commands = append(commands, strings.NewReplacer(drillDir, dir, drillReplica, url).Replace(c.command))
	}
	if !strings.Contains(script, drillDir) || !strings.Contains(script, drillReplica) || !strings.Contains(script, "petstore restore ") {
		t.Fatalf("the drill names no %s, no %s or no petstore restore:\n%s", drillDir, drillReplica, script)
	}
	answers := runCommands(t, dir, buildBinary(t), commands)
	if !slices.ContainsFunc(answers, func(a string) bool { return strings.HasPrefix(a, "restored "+url+" to petstore.db.restored as of ") }) {
		t.Errorf("no command of the drill printed its restore:\n%q", answers)
	}
	rs = startReplicating(t, db, url)
	if diff := cmp.Diff(pets, listAll[Pet](t, rs.URL, "/v1/pets", nil, nil)); diff != "" {
		t.Errorf("the pets served after the drill mismatch (-want +got):\n%s", diff)
	}
	if res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Kit","categoryId":1}`, nil); res.Status != 201 {
		t.Errorf("a write after the drill, answered once in the replica: %d %s", res.Status, res.Body)
	}
}
