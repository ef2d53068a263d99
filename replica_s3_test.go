package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
)

// Replication against a real S3-compatible server (versitygw, see
// helpers_s3_test.go), in a network namespace of loopback alone: every case
// of replica_test.go and replica_vm_test.go runs here at least once, over
// S3, with its conditional writes for the lease. One run in the namespace
// holds them all as parallel subtests, sharing one server (each with a
// bucket of its own), but for the outages, each with a server of its own.

// s3Store is a replica in a bucket of an S3 server; down stops the server
// (a test that takes it down has a server of its own).
type s3Store struct {
	server *s3Server
	bucket *s3Bucket
}

func newS3Store(t *testing.T, server *s3Server) *s3Store {
	return &s3Store{server: server, bucket: server.newBucket(t)}
}

func (s *s3Store) url() string            { return s.bucket.URL }
func (s *s3Store) env() map[string]string { return s.bucket.Env }
func (s *s3Store) down(t *testing.T)      { s.server.stop(t) }
func (s *s3Store) up(t *testing.T)        { s.server.start(t) }

// holderElsewhere rewrites the replica's lease to name its holder on
// another machine (another boot), its expiry kept.
func (s *s3Store) holderElsewhere(t *testing.T) {
	t.Helper()
	key := s.bucket.Path + "/lock.json"
	out, err := s.bucket.Client.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(s.bucket.Name), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	var lease map[string]any
	err = json.NewDecoder(out.Body).Decode(&lease)
	out.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var owner leaseOwner
	if err := json.Unmarshal([]byte(lease["owner"].(string)), &owner); err != nil {
		t.Fatal(err)
	}
	owner.Boot = "another-machine"
	o, _ := json.Marshal(owner)
	lease["owner"] = string(o)
	b, _ := json.Marshal(lease)
	if _, err := s.bucket.Client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(s.bucket.Name), Key: aws.String(key), Body: bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
}

func TestReplicationOnS3(t *testing.T) {
	t.Parallel()
	if !inALoopbackNetworkWithS3(t) {
		return
	}
	shared := sharedS3(t)
	onShared := func(t *testing.T) replicaStore { return newS3Store(t, shared) }
	alone := func(t *testing.T) replicaStore { return newS3Store(t, startS3Alone(t)) }
	for _, c := range []struct {
		name  string
		store func(t *testing.T) replicaStore
		run   func(t *testing.T, store replicaStore)
	}{
		{"sync mode answers a write once it is in the replica", onShared, syncModeAnswersOnceReplicated},
		{"the store goes away in sync mode", alone, storeGoesAwayInSyncMode},
		{"the store goes away in the background", alone, storeGoesAwayInTheBackground},
		{"losing the VM in sync mode loses nothing acknowledged", onShared, loseTheVMInSyncMode},
		{"losing the VM in the background loses only the last second", onShared, loseTheVMInTheBackground},
		{"one service replicates into a path", onShared, oneServicePerPath},
		{"a restore at a time has what was there then", onShared, restoreAtATime},
		{"a restore from an empty or missing replica is refused", onShared, restoreFromNothing},
		{"a service whose lease was taken writes nothing more there", onShared, leaseTakenStopsTheWrites},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, c.store(t))
		})
	}
}

// syncModeAnswersOnceReplicated is TestSyncModeAnswersAWriteOnceItIsInTheReplica
// on store.
func syncModeAnswersOnceReplicated(t *testing.T, store replicaStore) {
	rs, _ := startReplicatedOn(t, store, "-replicate-sync")
	var created []string
	for i := range 40 {
		name := fmt.Sprintf("s3-%02d", i)
		if res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"`+name+`","categoryId":1}`, nil); res.Status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, res.Status, res.Body)
		}
		created = append(created, name)
	}
	restored := filepath.Join(t.TempDir(), "restored.db")
	restoreFrom(t, store, restored)
	if diff := cmp.Diff(created, petNames(t, restored)); diff != "" {
		t.Errorf("pets answered 201 but not in the replica (-answered +replica):\n%s", diff)
	}
}

// loseTheVMInSyncMode is TestLosingTheVMInSyncModeLosesNothingAcknowledged
// on store's server: five rounds at once, each with a bucket of its own
// and another kill moment.
func loseTheVMInSyncMode(t *testing.T, store replicaStore) {
	server := store.(*s3Store).server
	for round := range 5 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			t.Parallel()
			store := replicaStore(newS3Store(t, server))
			acks, _, url, db := loseTheVM(t, store, true)
			if lost := checkTheVMsAcks(t, url, acks, time.Time{}); len(lost) > 0 {
				t.Errorf("%d of %d acknowledged writes are lost: the first %s", len(lost), len(acks), lost[0])
			} else {
				t.Logf("%d writes acknowledged, all restored", len(acks))
			}
			checkFeedRunsOn(t, url, db)
		})
	}
}

// loseTheVMInTheBackground is
// TestLosingTheVMInTheBackgroundLosesOnlyTheLastSecond on store.
func loseTheVMInTheBackground(t *testing.T, store replicaStore) {
	acks, killed, url, db := loseTheVM(t, store, false)
	if lost := checkTheVMsAcks(t, url, acks, killed.Add(-2*time.Second)); len(lost) > 0 {
		t.Errorf("%d writes acknowledged more than 2 s before the kill are lost: the first %s", len(lost), lost[0])
	}
	t.Logf("the recovery point over S3: %v", recoveryPoint(t, url, acks, killed))
	checkFeedRunsOn(t, url, db)
}

// restoreAtATime: pets created, a time T noted, the pets deleted: restore
// -at T has them, the latest restore does not.
func restoreAtATime(t *testing.T, store replicaStore) {
	rs, _ := startReplicatedOn(t, store, "-replicate-sync")
	var ids []int64
	for _, name := range []string{"Rex", "Tom", "Kit"} {
		res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"`+name+`","categoryId":1}`, nil)
		if res.Status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, res.Status, res.Body)
		}
		ids = append(ids, decode[Pet](t, res).ID)
	}
	// Every create was answered once in the replica: its sync began
	// before this mark. A sync is dated to the millisecond, and a delete's
	// begins after its request, sent after a pause of 2 ms, so that it is
	// never dated the same millisecond as the mark (a pace, not a
	// synchronisation).
	mark := time.Now().UTC()
	time.Sleep(2 * time.Millisecond)
	for _, id := range ids {
		if res := doRequest(t, rs.URL, "DELETE", fmt.Sprintf("/v1/pets/%d", id), "", nil); res.Status != http.StatusNoContent {
			t.Fatalf("delete %d: %d %s", id, res.Status, res.Body)
		}
	}
	at := filepath.Join(t.TempDir(), "at.db")
	var stdout, stderr strings.Builder
	if err := run(t.Context(), []string{"restore", "-from", store.url(), "-db", at, "-at", mark.Format(time.RFC3339Nano)}, mapEnv(store.env()), strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Fatalf("restore -at %s: %v\n%s", mark.Format(time.RFC3339Nano), err, stderr.String())
	}
	if diff := cmp.Diff([]string{"Rex", "Tom", "Kit"}, petNames(t, at)); diff != "" {
		t.Errorf("restore -at T (-want +got):\n%s", diff)
	}
	latest := filepath.Join(t.TempDir(), "latest.db")
	restoreFrom(t, store, latest)
	if got := petNames(t, latest); len(got) != 0 {
		t.Errorf("the latest restore has %v, want none (they were deleted)", got)
	}
}

// restoreFromNothing: a bucket with no replica in it, and a path nothing
// was ever written to, are refused with exit 1, nothing written.
func restoreFromNothing(t *testing.T, store replicaStore) {
	for _, from := range []string{store.url(), strings.Replace(store.url(), "/petstore?", "/nothing-here?", 1)} {
		db := filepath.Join(t.TempDir(), "restored.db")
		var stdout, stderr strings.Builder
		err := run(t.Context(), []string{"restore", "-from", from, "-db", db}, mapEnv(store.env()), strings.NewReader(""), &stdout, &stderr)
		if _, isConfig := errors.AsType[*configError](err); err == nil || isConfig {
			t.Errorf("restore from an empty replica %s: %v, want an error of exit code 1\n%s", from, err, stderr.String())
		}
		if _, statErr := os.Lstat(db); statErr == nil {
			t.Errorf("restore from an empty replica wrote %s", db)
		}
	}
}

// leaseTakenStopsTheWrites: another service takes the lease (the lease
// object rewritten to name it, as a takeover after a lapse writes it): at
// its next renewal the service finds it, logs an ERROR, and writes nothing
// more into the replica, neither its uploads nor Litestream's own (its last
// upload at the stop); with -replicate-sync its writes are answered 503.
func leaseTakenStopsTheWrites(t *testing.T, store replicaStore) {
	rs, _ := startReplicatedOn(t, store, "-replicate-sync", "-replicate-timeout", "1s")
	if res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Before","categoryId":1}`, nil); res.Status != http.StatusCreated {
		t.Fatalf("create before: %d %s", res.Status, res.Body)
	}
	b := store.(*s3Store).bucket
	lease := fmt.Sprintf(`{"generation":99,"expires_at":%q,"owner":"another service"}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	if _, err := b.Client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(b.Name), Key: aws.String(b.Path + "/lock.json"), Body: strings.NewReader(lease)}); err != nil {
		t.Fatal(err)
	}
	eventually3(t, "the service finds its lease taken at its next renewal", replicaLeaseTTL, func() bool {
		return len(rs.Stderr.find(t, "ERROR", "the replica's lease was taken by another service: this one no longer writes into the replica; stop one of the two, restore from the replica if this one's writes must be kept")) == 1
	})
	before := b.keys(t)
	res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"After","categoryId":1}`, nil)
	wantError(t, res, http.StatusServiceUnavailable, codeReplicaUnavailable)
	// The stop's last upload (Litestream's, at its close) would carry the
	// write committed here into the replica: it is fenced too.
	rs.stop(t)
	if diff := cmp.Diff(before, b.keys(t)); diff != "" {
		t.Errorf("the replica changed after the lease was taken (-before +after):\n%s", diff)
	}
}

// eventually3 is eventually with its own limit.
func eventually3(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if !waitUntil(within, 50*time.Millisecond, cond) {
		t.Fatalf("after %v: %s", within, what)
	}
}
