package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Losing the VM: the real binary replicating to a store, 8 clients
// creating pets and placing and delivering orders, killed with SIGKILL at a
// random moment; then its disk is gone (the database, its -wal and -shm, and
// Litestream's files beside it are deleted), the replica is restored into a
// new file, and a service started on it holds what was acknowledged.

// vmAck is a write the service acknowledged (2xx), and when.
type vmAck struct {
	at      time.Time
	pet     *Pet       // a create
	order   *orderJSON // a place or a delivery
	petName string     // the pet the order is for
}

// String says what was acknowledged, for a failure's message.
func (a vmAck) String() string {
	if a.pet != nil {
		return fmt.Sprintf("pet %d %q created at %s", a.pet.ID, a.pet.Name, a.at.Format(time.StampMilli))
	}
	return fmt.Sprintf("order %d (pet %q) %s at %s", a.order.ID, a.petName, a.order.Status, a.at.Format(time.StampMilli))
}

// vmLoad runs the clients of a lost VM until stop: each creates a pet,
// orders it and delivers the order, again and again, and records what was
// acknowledged.
func vmLoad(t *testing.T, url string, workers int, stop <-chan struct{}, stopping func() bool) []vmAck {
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var acks []vmAck
	record := func(a vmAck) {
		mu.Lock()
		acks = append(acks, a)
		mu.Unlock()
	}
	untilStopped(workers, stop, func(w, i int) bool {
		name := fmt.Sprintf("vm-w%d-%d", w, i)
		res, err := send(client, "POST", url+"/v1/pets", `{"name":"`+name+`","categoryId":1}`, "")
		if err != nil || res.Status != http.StatusCreated {
			return vmFailed(t, err, res, stopping)
		}
		var p Pet
		json.Unmarshal(res.Body, &p)
		record(vmAck{at: time.Now(), pet: &p})
		res, err = send(client, "POST", url+"/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, p.ID), "")
		if err != nil || res.Status != http.StatusCreated {
			return vmFailed(t, err, res, stopping)
		}
		var o orderJSON
		json.Unmarshal(res.Body, &o)
		record(vmAck{at: time.Now(), order: &o, petName: name})
		res, err = send(client, "PATCH", fmt.Sprintf("%s/v1/store/orders/%d", url, o.ID), `{"status":"delivered"}`, "")
		if err != nil || res.Status != http.StatusOK {
			return vmFailed(t, err, res, stopping)
		}
		json.Unmarshal(res.Body, &o)
		record(vmAck{at: time.Now(), order: &o, petName: name})
		return true
	})
	return acks
}

// vmFailed judges a request that got no 2xx: expected once the process is
// being killed, a failure of the test before.
func vmFailed(t *testing.T, err error, res response, stopping func() bool) bool {
	if !stopping() {
		t.Errorf("a request failed before the kill: %v, status %d, body %s", err, res.Status, res.Body)
	}
	return false
}

// loseTheVM runs one round: the service on store (sync or background mode)
// under load, killed at a random moment between 1 and 8 s, its disk
// deleted, the replica restored and served. It returns what was
// acknowledged, when the kill came, and the restored service's URL and
// file.
func loseTheVM(t *testing.T, store replicaStore, sync bool) (acks []vmAck, killed time.Time, restoredURL, restoredDB string) {
	bin := buildBinary(t)
	disk := t.TempDir()
	db := filepath.Join(disk, "pets.db")
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + db, "PETSTORE_API_KEYS=" + testKey, "PETSTORE_REPLICATE=" + store.url()}
	if sync {
		env = append(env, "PETSTORE_REPLICATE_SYNC=true")
	}
	for k, v := range store.env() {
		env = append(env, k+"="+v)
	}
	svc := startBinary(t, bin, env...)
	stop, stopped := signalAtRandom(svc.Cmd, syscall.SIGKILL, time.Second, 7*time.Second)
	acks = vmLoad(t, svc.URL, 8, stop, stopped.Load)
	killed = time.Now()
	svc.wait()
	// The disk is gone, but for the secret of key identities, whose one
	// copy an operator keeps apart (docs/keys.md).
	secret := mustRead(t, db+".secret")
	restoredDB = filepath.Join(t.TempDir(), "pets.db")
	writeFile(t, restoredDB+".secret", string(secret))
	os.Chmod(restoredDB+".secret", 0o600)
	if err := os.RemoveAll(disk); err != nil {
		t.Fatal(err)
	}
	restoreFrom(t, store, restoredDB)
	restored := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB="+restoredDB, "PETSTORE_API_KEYS="+testKey)
	return acks, killed, restored.URL, restoredDB
}

// restoreFrom restores the replica of store, as it is now, into db, with
// petstore restore.
func restoreFrom(t *testing.T, store replicaStore, db string) {
	t.Helper()
	var stdout, stderr strings.Builder
	if err := run(t.Context(), []string{"restore", "-from", store.url(), "-db", db}, mapEnv(store.env()), strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Fatalf("petstore restore -from %s: %v\n%s", store.url(), err, stderr.String())
	}
}

// checkTheVMsAcks checks the restored service against what was
// acknowledged before since (all of it: the zero time): every pet there,
// every order at least as far as its acknowledgement, every delivered
// order's pet sold. It returns the acknowledged writes that are missing.
func checkTheVMsAcks(t *testing.T, url string, acks []vmAck, before time.Time) (lost []vmAck) {
	t.Helper()
	pets := map[string]Pet{}
	for _, p := range listAll[Pet](t, url, "/v1/pets?limit=100", nil, nil) {
		pets[p.Name] = p
	}
	orders := map[int64]orderJSON{}
	for _, o := range listAll[orderJSON](t, url, "/v1/store/orders?limit=100", nil, nil) {
		orders[o.ID] = o
	}
	for _, a := range acks {
		switch {
		case a.pet != nil:
			if got, ok := pets[a.pet.Name]; !ok || got.ID != a.pet.ID {
				lost = append(lost, a)
			}
		case a.order != nil:
			got, ok := orders[a.order.ID]
			if !ok || (a.order.Status == "delivered" && got.Status != "delivered") {
				lost = append(lost, a)
			}
		}
	}
	for _, o := range orders {
		if o.Status == "delivered" && petByID(pets, o.PetID).Status != "sold" {
			t.Errorf("order %d is delivered but its pet %d is %q", o.ID, o.PetID, petByID(pets, o.PetID).Status)
		}
	}
	if !before.IsZero() {
		lost = slices.DeleteFunc(lost, func(a vmAck) bool { return !a.at.Before(before) })
	}
	return lost
}

// petByID finds the pet of id among pets.
func petByID(pets map[string]Pet, id int64) Pet {
	for _, p := range pets {
		if p.ID == id {
			return p
		}
	}
	return Pet{}
}

// checkFeedRunsOn checks that the restored database's feed holds ids 1 to n
// without a gap or a repeat (nothing was pruned in the round), and that
// the next write's event takes n+1: the feed runs on where the replica
// stopped, so no client sees an id twice for two events.
func checkFeedRunsOn(t *testing.T, url, db string) {
	t.Helper()
	var ids []int64
	rows, err := openDB(t, db).QueryContext(t.Context(), "SELECT id FROM events ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("the restored feed's ids are not 1 to %d: id %d at position %d", len(ids), id, i+1)
		}
	}
	if res := doRequest(t, url, "POST", "/v1/pets", `{"name":"after","categoryId":1}`, nil); res.Status != http.StatusCreated {
		t.Fatalf("a create on the restored service: %d %s", res.Status, res.Body)
	}
	var events []struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(doRequest(t, url, "GET", fmt.Sprintf("/v1/events?after=%d", len(ids)), "", nil).Body, &events); err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].ID != int64(len(ids)+1) {
		t.Errorf("the first event after the restore: %v, want one of id %d", events, len(ids)+1)
	}
}

// TestLosingTheVMInSyncModeLosesNothingAcknowledged: with -replicate-sync,
// five rounds, each killed at another moment: every write answered 2xx is
// in the restored database, the feed runs on without a gap or a repeat,
// and every delivered order's pet is sold.
func TestLosingTheVMInSyncModeLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	for round := range 2 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			t.Parallel()
			acks, _, url, db := loseTheVM(t, newVMStore(t), true)
			if lost := checkTheVMsAcks(t, url, acks, time.Time{}); len(lost) > 0 {
				t.Errorf("%d of %d acknowledged writes are lost: the first %s", len(lost), len(acks), lost[0])
			} else {
				t.Logf("%d writes acknowledged, all restored", len(acks))
			}
			checkFeedRunsOn(t, url, db)
		})
	}
}

// TestLosingTheVMInTheBackgroundLosesOnlyTheLastSecond: without
// -replicate-sync, every write acknowledged more than 2 s before the kill
// is in the restored database; the test reports how far back the loss went
// (the measured recovery point).
func TestLosingTheVMInTheBackgroundLosesOnlyTheLastSecond(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	acks, killed, url, db := loseTheVM(t, newVMStore(t), false)
	if lost := checkTheVMsAcks(t, url, acks, killed.Add(-2*time.Second)); len(lost) > 0 {
		t.Errorf("%d writes acknowledged more than 2 s before the kill are lost: the first %s", len(lost), lost[0])
	}
	t.Logf("the recovery point: %v", recoveryPoint(t, url, acks, killed))
	checkFeedRunsOn(t, url, db)
}

// recoveryPoint says how far back before the kill the loss went: how many
// acknowledged writes were lost, and how long before the kill the oldest of
// them was acknowledged.
func recoveryPoint(t *testing.T, url string, acks []vmAck, killed time.Time) string {
	t.Helper()
	lost := checkTheVMsAcks(t, url, acks, time.Time{})
	sort.Slice(lost, func(i, j int) bool { return lost[i].at.Before(lost[j].at) })
	rpo := time.Duration(0)
	if len(lost) > 0 {
		rpo = killed.Sub(lost[0].at)
	}
	return fmt.Sprintf("%d of %d acknowledged writes lost, the oldest acknowledged %v before the kill", len(lost), len(acks), rpo.Round(time.Millisecond))
}

// newVMStore is the store a lost VM replicates to.
func newVMStore(t *testing.T) replicaStore { return newDirStore(t) }

// TestOneServiceReplicatesIntoAPath: a second service started on the path
// of a live replica is refused (exit 2), naming the holder's process id;
// after the first is killed and its lease has lapsed, a service restored
// from the replica takes the path over and replicates into it, and a
// later restore holds the writes of both.
func TestOneServiceReplicatesIntoAPath(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	oneServicePerPath(t, newVMStore(t))
}

// oneServicePerPath is TestOneServiceReplicatesIntoAPath on store.
func oneServicePerPath(t *testing.T, store replicaStore) {
	bin := buildBinary(t)
	envOf := func(db string) []string {
		env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + db, "PETSTORE_API_KEYS=" + testKey, "PETSTORE_REPLICATE=" + store.url(), "PETSTORE_REPLICATE_SYNC=true"}
		for k, v := range store.env() {
			env = append(env, k+"="+v)
		}
		return env
	}
	first := startBinary(t, bin, envOf(filepath.Join(t.TempDir(), "first.db"))...)
	if res := doRequest(t, first.URL, "POST", "/v1/pets", `{"name":"First","categoryId":1}`, nil); res.Status != http.StatusCreated {
		t.Fatalf("the first service's create: %d %s", res.Status, res.Body)
	}
	second := exec.Command(bin)
	second.Env = envOf(filepath.Join(t.TempDir(), "second.db"))
	out, err := second.CombinedOutput()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 2 {
		t.Fatalf("a second service on the same replica path: %v, want exit 2; output:\n%s", err, out)
	}
	if want := fmt.Sprintf("process %d", first.Cmd.Process.Pid); !strings.Contains(string(out), want) || !strings.Contains(string(out), "another service replicates into") {
		t.Errorf("the refusal does not name the holder (%s):\n%s", want, out)
	}
	first.Cmd.Process.Kill()
	first.wait()
	// A lease dies with its holder on file:// (a lock the kernel drops).
	// On S3 it lapses 30 s after its last renewal, unless its holder is
	// known dead on this machine: the lease is made to name a holder on
	// another machine, whose death no one here can see.
	elsewhere, onS3 := store.(interface{ holderElsewhere(*testing.T) })
	if onS3 {
		elsewhere.holderElsewhere(t)
	}
	restored := filepath.Join(t.TempDir(), "restored.db")
	restoreFrom(t, store, restored)
	taker, refused := startOnceTheLeaseLapses(t, bin, envOf(restored))
	if onS3 && refused == 0 {
		t.Error("a service took over the lease of a holder on another machine at once, before it lapsed")
	}
	if res := doRequest(t, taker.URL, "POST", "/v1/pets", `{"name":"Second","categoryId":1}`, nil); res.Status != http.StatusCreated {
		t.Fatalf("the restored service's create: %d %s", res.Status, res.Body)
	}
	if diff := cmp.Diff([]string{"First", "Second"}, petNames(t, restoreLatest(t, store.url()))); diff != "" {
		t.Errorf("a restore after the takeover (-want +got):\n%s", diff)
	}
}

// startOnceTheLeaseLapses starts the binary with env again and again while
// it is refused for a live lease on its replica, for at most twice the
// lease's life, and returns it once it serves, with how many times it was
// refused.
func startOnceTheLeaseLapses(t *testing.T, bin string, env []string) (*process, int) {
	t.Helper()
	deadline := time.Now().Add(2 * replicaLeaseTTL)
	for refused := 0; ; refused++ {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), env...)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if m := urlLine.FindStringSubmatch(strings.TrimSpace(line)); err == nil && m != nil {
			p := &process{Cmd: cmd, URL: m[1], Stderr: &stderr}
			t.Cleanup(func() {
				cmd.Process.Kill()
				p.wait()
			})
			return p, refused
		}
		cmd.Wait()
		if !strings.Contains(stderr.String(), "another service replicates into") || time.Now().After(deadline) {
			t.Fatalf("the restored service did not take the replica over: %v\n%s", err, stderr.String())
		}
		time.Sleep(time.Second) // the pace of the retries, as an operator's
	}
}
