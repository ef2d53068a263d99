package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// createAttempt is one create a load worker sent, and what came of it.
type createAttempt struct {
	Name   string
	Body   string
	Key    string // the Idempotency-Key sent, "" for none
	Answer *response
}

// createLoad sends creates from several workers until stop is closed, then
// lets each worker finish its request. Every name is unique, so a pet in the
// database names the attempt that made it. A transport error before stop is
// closed is a failure of the test; after it, the process is expected to be
// gone and the worker ends.
func createLoad(t *testing.T, url, prefix string, workers int, stop <-chan struct{}, stopped *atomic.Bool) []createAttempt {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	perWorker := make([][]createAttempt, workers)
	untilStopped(workers, stop, func(w, i int) bool {
		a := createAttempt{Name: fmt.Sprintf("%s-w%d-%d", prefix, w, i)}
		a.Body = fmt.Sprintf(`{"name":%q,"categoryId":%d,"status":%q}`, a.Name, i+1, []string{"available", "pending", "sold"}[i%3])
		if i%2 == 0 {
			a.Key = "key-" + a.Name
		}
		res, err := postCreate(client, url, a.Body, a.Key)
		if err != nil {
			if !stopped.Load() {
				t.Errorf("create %s failed before the process was stopped: %v", a.Name, err)
			}
			perWorker[w] = append(perWorker[w], a)
			return false
		}
		a.Answer = &res
		perWorker[w] = append(perWorker[w], a)
		return true
	})
	var all []createAttempt
	for _, as := range perWorker {
		all = append(all, as...)
	}
	return all
}

// postCreate sends one createPet with the test key and, when key is not
// empty, an Idempotency-Key.
func postCreate(client *http.Client, url, body, key string) (response, error) {
	return send(client, "POST", url+"/v1/pets", body, key)
}

// send sends one request with the test key, a JSON body and, when key is not
// empty, an Idempotency-Key. Unlike doRequest it returns the transport's
// error, which a test that kills the process expects.
func send(client *http.Client, method, url, body, key string) (response, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idempotencyHeader, key)
	}
	res, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}, nil
}

// acknowledged returns the pets whose create got a 201, by name.
func acknowledged(t *testing.T, attempts []createAttempt) map[string]Pet {
	t.Helper()
	acked := map[string]Pet{}
	for _, a := range attempts {
		if a.Answer == nil {
			continue
		}
		if a.Answer.Status != http.StatusCreated {
			t.Errorf("create %s: status %d, body %s", a.Name, a.Answer.Status, a.Answer.Body)
			continue
		}
		var p Pet
		if err := json.Unmarshal(a.Answer.Body, &p); err != nil {
			t.Fatalf("create %s: %v", a.Name, err)
		}
		acked[a.Name] = p
	}
	return acked
}

func TestSIGKILLLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	bin := buildBinary(t)
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + dbPath, "PETSTORE_API_KEYS=" + testKey}
	const rounds, workers = 3, 8

	acked := map[string]Pet{}
	var keyed []createAttempt // every create sent with an Idempotency-Key, answered or not
	var before []Pet          // the catalogue before the current round
	for round := range rounds {
		svc := startBinary(t, bin, env...)
		cmd, url := svc.Cmd, svc.URL
		// A random moment, long enough for a few hundred creates.
		stop, stopped := signalAtRandom(cmd, syscall.SIGKILL, 150*time.Millisecond, 450*time.Millisecond)
		attempts := createLoad(t, url, fmt.Sprintf("kill%d", round), workers, stop, stopped)
		cmd.Wait()
		for name, p := range acknowledged(t, attempts) {
			acked[name] = p
		}
		for _, a := range attempts {
			if a.Key != "" {
				keyed = append(keyed, a)
			}
		}
		if got := integrityCheck(t, dbPath); got != "ok" {
			t.Fatalf("round %d: PRAGMA integrity_check after SIGKILL = %q, want ok", round, got)
		}
		checkFeedMatchesTables(t, round, dbPath)

		restarted := startBinary(t, bin, env...)
		now := listAll[Pet](t, restarted.URL, "/v1/pets?limit=100", nil, nil)
		checkAfterCrash(t, round, acked, before, now)
		before = now
		// One process serves the file: this one is killed too, and the
		// next starts on it at once.
		restarted.Cmd.Process.Kill()
		restarted.wait()
		t.Logf("round %d: %d creates sent, %d acknowledged in total, %d pets stored", round, len(attempts), len(acked), len(now))
	}

	// Every create sent with a key, answered or cut off by the kill, is
	// retried with its key: an acknowledged one replays its exact answer, one
	// the kill interrupted is either replayed (it was committed) or
	// processed now; either way each ends up as exactly one pet.
	url := startBinary(t, bin, env...).URL
	client := &http.Client{Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	replayed := map[string]Pet{}
	for _, a := range keyed {
		res, err := postCreate(client, url, a.Body, a.Key)
		if err != nil || res.Status != http.StatusCreated {
			t.Fatalf("retry of %s: %v, status %d, body %s", a.Name, err, res.Status, res.Body)
		}
		if a.Answer != nil {
			if diff := cmp.Diff(createdOf(*a.Answer), createdOf(res)); diff != "" {
				t.Errorf("retry of acknowledged %s after crashes mismatch (-want +got):\n%s", a.Name, diff)
			}
		}
		replayed[a.Name] = decode[Pet](t, res)
	}
	byName := map[string][]Pet{}
	for _, p := range listAll[Pet](t, url, "/v1/pets?limit=100", nil, nil) {
		byName[p.Name] = append(byName[p.Name], p)
	}
	for name, p := range replayed {
		if diff := cmp.Diff([]Pet{p}, byName[name]); diff != "" {
			t.Errorf("pets named %s after retrying its key mismatch (-want +got):\n%s", name, diff)
		}
	}
	t.Logf("%d acknowledged pets checked, %d keyed creates retried", len(acked), len(keyed))
}

// checkAfterCrash checks the catalogue now, read after a restart, against
// every acknowledged pet and the catalogue before the round: every
// acknowledged pet is present and intact, no pet lost, and the ids given
// out in the round are new (above every earlier id, none twice).
func checkAfterCrash(t *testing.T, round int, acked map[string]Pet, before, now []Pet) {
	t.Helper()
	byName := map[string]Pet{}
	seen := map[int64]bool{}
	for _, p := range now {
		if seen[p.ID] {
			t.Errorf("round %d: id %d listed twice", round, p.ID)
		}
		seen[p.ID] = true
		byName[p.Name] = p
	}
	lost := 0
	for name, want := range acked {
		got, ok := byName[name]
		if !ok {
			lost++
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round %d: acknowledged pet %s mismatch (-want +got):\n%s", round, name, diff)
		}
	}
	if lost > 0 {
		t.Errorf("round %d: %d acknowledged pets lost", round, lost)
	}
	if len(before) > 0 {
		if diff := cmp.Diff(before, now[:min(len(before), len(now))]); diff != "" {
			t.Errorf("round %d: the pets from before the round changed (-want +got):\n%s", round, diff)
		}
		for _, p := range now[len(before):] {
			if p.ID <= before[len(before)-1].ID {
				t.Errorf("round %d: new pet %s got id %d, not above the earlier ids", round, p.Name, p.ID)
			}
		}
	}
}

func TestSIGTERMAnswersEveryInFlightCreate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	bin := buildBinary(t)
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + dbPath, "PETSTORE_API_KEYS=" + testKey}
	svc := startBinary(t, bin, env...)
	cmd, url := svc.Cmd, svc.URL

	// The workers stop on their first refused connection.
	stop, stopped := signalAtRandom(cmd, syscall.SIGTERM, 150*time.Millisecond, 350*time.Millisecond)
	attempts := createLoad(t, url, "term", 8, stop, stopped)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM the process exited with %v, want exit code 0", err)
	}
	acked := acknowledged(t, attempts)
	if got := integrityCheck(t, dbPath); got != "ok" {
		t.Fatalf("PRAGMA integrity_check after SIGTERM = %q, want ok", got)
	}

	// The catalogue is exactly the acknowledged pets: none lost, and none
	// stored whose answer never reached its client.
	url = startBinary(t, bin, env...).URL
	got := map[string]Pet{}
	for _, p := range listAll[Pet](t, url, "/v1/pets?limit=100", nil, nil) {
		got[p.Name] = p
	}
	if diff := cmp.Diff(acked, got); diff != "" {
		t.Errorf("pets after SIGTERM and restart mismatch (-acknowledged +stored):\n%s", diff)
	}
	t.Logf("%d creates sent, %d acknowledged", len(attempts), len(acked))
}

// signalAtRandom sends sig to cmd (only the process the test started, by its
// PID) after a random delay of least plus up to spread. stopped is set just
// before the signal, and stop is closed just after it.
func signalAtRandom(cmd *exec.Cmd, sig syscall.Signal, least, spread time.Duration) (stop chan struct{}, stopped *atomic.Bool) {
	stop, stopped = make(chan struct{}), new(atomic.Bool)
	go func() {
		time.Sleep(least + rand.N(spread))
		stopped.Store(true)
		cmd.Process.Signal(sig)
		close(stop)
	}()
	return stop, stopped
}

// orderAck is a change of an order that the service acknowledged: after any
// crash, the order must be at least this far.
type orderAck struct {
	orderID int64
	status  string
}

// TestSIGKILLKeepsTheCatalogueAndOrdersInAgreement places, delivers and
// cancels orders from several clients while the real binary is killed at
// random moments, then checks the database itself after each restart: every
// acknowledged order and change is there, every placed order's pet is
// pending, no pet has two placed orders, and no order names a missing pet.
func TestSIGKILLKeepsTheCatalogueAndOrdersInAgreement(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	bin := buildBinary(t)
	dbPath := dbFor(t, filepath.Join(t.TempDir(), "pets.db"))
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + dbPath, "PETSTORE_API_KEYS=" + testKey}
	const rounds, workers, pets = 3, 6, 40
	svc := startBinary(t, bin, env...)
	client := &http.Client{Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	for i := range pets {
		if res, err := postCreate(client, svc.URL, fmt.Sprintf(`{"name":"p%d","categoryId":1}`, i), ""); err != nil || res.Status != http.StatusCreated {
			t.Fatalf("seed pet %d: %v %d", i, err, res.Status)
		}
	}
	svc.Cmd.Process.Kill()
	svc.wait()

	var acks []orderAck
	for round := range rounds {
		svc := startBinary(t, bin, env...)
		stop, stopped := signalAtRandom(svc.Cmd, syscall.SIGKILL, 150*time.Millisecond, 450*time.Millisecond)
		var mu sync.Mutex
		rngs := make([]*rand.Rand, workers)
		mine := make([][]int64, workers) // each worker's placed orders
		untilStopped(workers, stop, func(w, i int) bool {
			if i == 0 {
				rngs[w] = rand.New(rand.NewPCG(uint64(round), uint64(w)))
			}
			rng := rngs[w]
			var res response
			var err error
			var ack orderAck
			if len(mine[w]) == 0 || rng.IntN(2) == 0 {
				res, err = send(client, "POST", svc.URL+"/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, 1+rng.IntN(pets)), "")
				if err == nil && res.Status == http.StatusCreated {
					var o orderJSON
					json.Unmarshal(res.Body, &o)
					mine[w] = append(mine[w], o.ID)
					ack = orderAck{o.ID, "placed"}
				}
			} else {
				id := mine[w][len(mine[w])-1]
				mine[w] = mine[w][:len(mine[w])-1]
				to := []string{"delivered", "cancelled"}[rng.IntN(2)]
				res, err = send(client, "PATCH", fmt.Sprintf("%s/v1/store/orders/%d", svc.URL, id), fmt.Sprintf(`{"status":%q}`, to), "")
				if err == nil && res.Status == http.StatusOK {
					ack = orderAck{id, to}
				}
			}
			switch {
			case err != nil && !stopped.Load():
				t.Errorf("round %d: a request failed before the kill: %v", round, err)
				return false
			case err != nil:
				return false
			case res.Status >= 500:
				t.Errorf("round %d: status %d: %s", round, res.Status, res.Body)
			case ack.orderID != 0:
				mu.Lock()
				acks = append(acks, ack)
				mu.Unlock()
			}
			return true
		})
		svc.wait()
		checkStoreInvariants(t, round, dbPath, acks)
		checkFeedMatchesTables(t, round, dbPath)
	}
	t.Logf("%d acknowledged order changes checked over %d kills", len(acks), rounds)
}

// checkStoreInvariants checks the database file after a crash, as a
// separate process would.
func checkStoreInvariants(t *testing.T, round int, dbPath string, acks []orderAck) {
	t.Helper()
	if !isPostgresURL(dbPath) {
		if got := integrityCheck(t, dbPath); got != "ok" {
			t.Fatalf("round %d: integrity_check = %q", round, got)
		}
	}
	db := openDB(t, dbPath)
	for _, c := range []struct{ rule, query string }{
		{"a placed order whose pet is not pending", "SELECT count(*) FROM orders o JOIN pets p ON p.id = o.pet_id WHERE o.status = 'placed' AND p.status <> 'pending'"},
		{"a pet with two placed orders", "SELECT count(*) FROM (SELECT pet_id FROM orders WHERE status = 'placed' GROUP BY pet_id HAVING count(*) > 1) AS twice"},
		{"an order naming a missing pet", "SELECT count(*) FROM orders o LEFT JOIN pets p ON p.id = o.pet_id WHERE p.id IS NULL"},
		{"a pending pet without a placed order (no pet was created pending)", "SELECT count(*) FROM pets p WHERE p.status = 'pending' AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.pet_id = p.id AND o.status = 'placed')"},
	} {
		var n int
		if err := db.QueryRowContext(t.Context(), c.query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("round %d: %d rows: %s", round, n, c.rule)
		}
	}
	status := map[int64]string{}
	rows, err := db.QueryContext(t.Context(), "SELECT id, status FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var s string
		if err := rows.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		status[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, a := range acks {
		got, ok := status[a.orderID]
		switch {
		case !ok:
			t.Errorf("round %d: acknowledged order %d is lost", round, a.orderID)
		case a.status != "placed" && got != a.status:
			t.Errorf("round %d: order %d was acknowledged %s, the database says %s", round, a.orderID, a.status, got)
		}
	}
}
